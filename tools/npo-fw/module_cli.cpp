// SPDX-License-Identifier: Apache-2.0
// npo-fw module query|update (docs/firmware.md "Transceiver modules"): the command line of a
// module's firmware through CMIS CDB. A module image is a signed NPO image (npo-fw sign
// --vendor 0 --device 0 --model PART_NUMBER) whose payload is the module vendor's file: the
// vendor header CMIS 0101h Start takes (as many bytes as the module's 0041h says), then the
// image. Every host check (layout, digest, signer key, target, version) passes before the
// first CDB command; the module then checks its own header and image (module.cpp does the
// CDB exchange through npo/hal/module_firmware.hpp).
#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "common/backend.hpp"
#include "common/cli.hpp"
#include "common/output.hpp"
#include "fw.hpp"
#include "module.hpp"
#include "npo/hal/firmware.hpp"
#include "npo/hal/module_firmware.hpp"
#include "npo/hal/system.hpp"
#include "npo/hal/transceiver.hpp"

namespace npo::tools::fw {
namespace {

using npo::tools::fail;

constexpr std::size_t kImageHeaderBytes = 256;  // firmware-image.md §2

struct ModuleArgs {
  std::optional<std::string> backend;
  unsigned card = 0;
  unsigned port = 0;
  std::string image;
  std::string key;  // public key file; default: the key the card trusts
  bool allow_downgrade = false;
  bool force = false;
  bool no_commit = false;
  bool json = false;
};

// The module's vendor part number (CMIS 5.2 §8.3, upper page 00h bytes 148-163, ASCII, space
// padded), trimmed.
Result<std::string> part_number(Device& dev, unsigned port) {
  std::array<std::byte, 16> pn{};
  if (auto r = read_transceiver(dev, port, 0, 0, 148, pn); !r) return std::unexpected(r.error());
  std::string s;
  for (std::byte b : pn) s += static_cast<char>(b);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\0')) s.pop_back();
  return s;
}

Result<FirmwarePublicKey> public_key(const std::string& path) {
  auto bytes = read_file(path, 32);
  if (!bytes) return std::unexpected(bytes.error());
  if (bytes->size() != 32)
    return npo::fail(Code::kInvalidArgument, fmt::format("'{}' is not a 32-byte public key", path));
  FirmwarePublicKey k{};
  std::copy(bytes->begin(), bytes->end(), k.begin());
  return k;
}

// Opens the card; nullopt after printing why.
std::optional<std::unique_ptr<System>> open_card(const ModuleArgs& a, int& rc) {
  const std::string uri = owner_uri(backend_uri(a.backend, kTool), {a.card});
  auto sys = System::open(uri);
  if (!sys) {
    fail(kTool, fmt::format("cannot open '{}'", uri), sys.error());
    rc = open_failure_status(sys.error());
    return std::nullopt;
  }
  if (a.card >= (*sys)->device_count()) {
    std::fprintf(stderr, "npo-fw module: card %u not present (%zu cards)\n", a.card, (*sys)->device_count());
    rc = kExitError;
    return std::nullopt;
  }
  if (a.port >= (*sys)->device(a.card).port_count()) {
    std::fprintf(stderr, "npo-fw module: card %u has no port %u (%u ports)\n", a.card, a.port,
                 (*sys)->device(a.card).port_count());
    rc = kExitError;
    return std::nullopt;
  }
  return std::move(*sys);
}

int query(const ModuleArgs& a) {
  int rc = kExitError;
  auto sys = open_card(a, rc);
  if (!sys) return rc;
  return firmware::module_query((*sys)->device(a.card), a.port, a.json);
}

int update(const ModuleArgs& a) {
  auto image = read_file(a.image, kMaxFirmwareImageBytes);
  if (!image) return fail(kTool, a.image, image.error());
  // the image on its own first: malformed, oversized or corrupt files fail before a card opens
  if (auto info = inspect_firmware_image(*image); !info) return fail(kTool, a.image, info.error());
  int rc = kExitError;
  auto sys = open_card(a, rc);
  if (!sys) return rc;
  Device& dev = (*sys)->device(a.card);
  FirmwarePublicKey trusted{};
  if (!a.key.empty()) {
    auto k = public_key(a.key);
    if (!k) return fail(kTool, a.key, k.error());
    trusted = *k;
  } else {
    auto st = firmware_status(dev);  // the fleet key the card trusts
    if (!st) return fail(kTool, fmt::format("card {}: FW_QUERY (give --key PUB)", a.card), st.error());
    trusted = st->trusted_key;
  }
  auto info = inspect_firmware_image(*image, &trusted);
  if (!info) return fail(kTool, a.image, info.error());
  const auto refuse = [&](const std::string& why) {
    std::fprintf(stderr, "npo-fw module update: card %u port %u: firmware image refused (%s)\n", a.card, a.port,
                 why.c_str());
    return kExitError;
  };
  // target: a module image names no PCI device, and the module's part number (or any)
  auto pn = part_number(dev, a.port);
  if (!pn) return fail(kTool, fmt::format("card {} port {}: module identity", a.card, a.port), pn.error());
  if (info->vendor_id != 0 || info->device_id != 0)
    return refuse(
        fmt::format("wrong_device): the image targets PCI device {:04x}:{:04x}, not a transceiver module "
                    "(sign module images with --vendor 0 --device 0",
                    info->vendor_id, info->device_id));
  if (!info->model.empty() && info->model != *pn)
    return refuse(
        fmt::format("wrong_device): the image is for part number '{}', the module is '{}'", info->model, *pn));
  auto fwinfo = query_module_firmware(dev, a.port);
  if (!fwinfo) return fail(kTool, fmt::format("card {} port {}: module firmware", a.card, a.port), fwinfo.error());
  const ModuleImage& run = fwinfo->running_image();
  const FirmwareVersion running{run.major, run.minor, static_cast<unsigned>(run.build)};
  const auto key = [](const FirmwareVersion& v) { return std::tuple(v.major, v.minor, v.patch); };
  if (key(info->version) < key(running) && !a.allow_downgrade)
    return refuse(fmt::format("older_version): {} is older than the running {} (--allow-downgrade)",
                              info->version.to_string(), running.to_string()));
  if (key(info->version) == key(running) && !a.force)
    return refuse(
        fmt::format("same_version): the module already runs {} (--force re-installs it)", running.to_string()));
  auto features = query_module_firmware_features(dev, a.port);
  if (!features) return fail(kTool, fmt::format("card {} port {}: 0041h", a.card, a.port), features.error());
  const std::span<const std::byte> payload = std::span<const std::byte>(*image).subspan(kImageHeaderBytes);
  if (payload.size() <= features->header_bytes)
    return refuse(fmt::format("truncated): the payload has {} bytes, the module's vendor header alone is {}",
                              payload.size(), features->header_bytes));
  return firmware::module_update(dev, a.port, payload.first(features->header_bytes),
                                 payload.subspan(features->header_bytes), !a.no_commit, a.json);
}

}  // namespace

void add_module_commands(CLI::App& app, std::vector<Command>& out) {
  static ModuleArgs q, u;
  const std::string backend_help =
      std::string("backend URI: emu:N, emu-remote:DIR, vfio:all, vfio:BDF (") + kBackendDefaultHelp + ")";
  CLI::App* m = app.add_subcommand("module", "a transceiver module's firmware through CMIS CDB");
  m->require_subcommand(1);
  CLI::App* qa = m->add_subcommand("query", "show the module's image banks A/B (version, running, committed)");
  add_backend_option(*qa, q.backend, "--backend", backend_help);
  qa->add_option("--card", q.card, "the card")->required();
  qa->add_option("--port", q.port, "the port whose module")->required();
  qa->add_flag("--json", q.json, "print JSON");
  out.push_back({qa, [] { return query(q); }});
  CLI::App* ua = m->add_subcommand(
      "update", "download a signed module image with the link up, run it (hitless where the module can), commit it");
  add_backend_option(*ua, u.backend, "--backend", backend_help);
  ua->add_option("--card", u.card, "the card")->required();
  ua->add_option("--port", u.port, "the port whose module")->required();
  ua->add_option("IMAGE", u.image, "signed image (npo-fw sign --vendor 0 --device 0 --model PART_NUMBER)")->required();
  ua->add_option("--key", u.key, "public key file to verify the image with (default: the key the card trusts)");
  ua->add_flag("--allow-downgrade", u.allow_downgrade, "allow an older version than the running one");
  ua->add_flag("--force", u.force, "re-install the running version");
  ua->add_flag("--no-commit", u.no_commit, "run the new image without committing it (a power cut boots the old one)");
  ua->add_flag("--json", u.json, "print the result as JSON");
  out.push_back({ua, [] { return update(u); }});
}

}  // namespace npo::tools::fw
