// SPDX-License-Identifier: Apache-2.0
// npo-fw's card subcommands (docs/firmware.md): query, update, commit, rollback, sign, verify, keygen.
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/backend.hpp"
#include "common/cli.hpp"
#include "common/output.hpp"
#include "fw.hpp"
#include "npo/hal/firmware.hpp"
#include "npo/hal/system.hpp"

namespace npo::tools::fw {

Result<std::vector<std::byte>> read_file(const std::string& path, std::uintmax_t max) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) return npo::fail(Code::kNotFound, fmt::format("cannot read '{}': {}", path, ec.message()));
  if (size > max) {
    return npo::fail(Code::kOutOfRange, fmt::format("'{}' has {} bytes, more than {} (firmware image refused "
                                                    "(oversized))",
                                                    path, size, max));
  }
  std::ifstream f(path, std::ios::binary);
  std::vector<std::byte> out(static_cast<std::size_t>(size));
  if (!f.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(out.size()))) {
    return npo::fail(Code::kDataLoss, fmt::format("cannot read '{}'", path));
  }
  return out;
}

namespace {

using npo::tools::fail;

std::string hex(std::span<const std::byte> b) {
  std::string s;
  for (std::byte x : b) s += fmt::format("{:02x}", static_cast<unsigned>(x));
  return s;
}

char slot_name(unsigned s) { return s == 0 ? 'A' : 'B'; }

Result<void> write_file(const std::string& path, std::span<const std::byte> data, mode_t mode) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return npo::fail(Code::kPermissionDenied, fmt::format("cannot write '{}'", path));
  ::chmod(path.c_str(), mode);
  const bool ok = std::fwrite(data.data(), 1, data.size(), f) == data.size();
  if (std::fclose(f) != 0 || !ok) return npo::fail(Code::kDataLoss, fmt::format("cannot write '{}'", path));
  return {};
}

template <std::size_t N>
Result<std::array<std::byte, N>> read_key(const std::string& path, const char* what) {
  auto b = read_file(path, 4096);
  if (!b) return std::unexpected(b.error());
  if (b->size() != N) {
    return npo::fail(Code::kInvalidArgument, fmt::format("'{}' has {} bytes: a {} key file holds {} raw bytes "
                                                         "(npo-fw keygen)",
                                                         path, b->size(), what, N));
  }
  std::array<std::byte, N> k{};
  std::copy(b->begin(), b->end(), k.begin());
  return k;
}

nlohmann::json status_json(unsigned card, const FirmwareStatus& s) {
  nlohmann::json slots = nlohmann::json::array();
  for (unsigned i = 0; i < 2; ++i) {
    const auto& sl = s.slots[i];
    slots.push_back({{"slot", std::string(1, slot_name(i))},
                     {"valid", sl.valid},
                     {"version", sl.valid ? nlohmann::json(sl.version.to_string()) : nlohmann::json(nullptr)},
                     {"security_version", sl.security_version},
                     {"image_bytes", sl.image_bytes},
                     {"active", s.active == i},
                     {"committed", s.committed == i}});
  }
  return {{"card", card},
          {"running", s.slots[s.active].version.to_string()},
          {"active", std::string(1, slot_name(s.active))},
          {"committed", std::string(1, slot_name(s.committed))},
          {"state", firmware_state_name(s.state)},
          {"ready", s.ready},
          {"rolled_back", s.rolled_back},
          {"security_version", s.security_version},
          {"max_chunk", s.max_chunk},
          {"max_image", s.max_image},
          {"model", s.model},
          {"trusted_key", hex(s.trusted_key)},
          {"slots", slots}};
}

void print_status(unsigned card, const FirmwareStatus& s) {
  std::printf("card %u: firmware %s in slot %c (committed %c), state %s%s%s, security version %u\n", card,
              s.slots[s.active].version.to_string().c_str(), slot_name(s.active), slot_name(s.committed),
              std::string(firmware_state_name(s.state)).c_str(), s.ready ? ", ready" : "",
              s.rolled_back ? ", last trial rolled back" : "", s.security_version);
  for (unsigned i = 0; i < 2; ++i) {
    const auto& sl = s.slots[i];
    if (sl.valid) {
      std::printf("  slot %c: %s (security %u, %llu bytes)%s%s\n", slot_name(i), sl.version.to_string().c_str(),
                  sl.security_version, static_cast<unsigned long long>(sl.image_bytes), s.active == i ? " active" : "",
                  s.committed == i ? " committed" : "");
    } else {
      std::printf("  slot %c: empty\n", slot_name(i));
    }
  }
  std::printf("  model %s, trusted key %s\n", s.model.c_str(), hex(s.trusted_key).c_str());
}

// ---- query ----------------------------------------------------------------------------------
struct QueryArgs {
  std::optional<std::string> backend;
  std::vector<unsigned> cards;
  bool json = false;
};

int query(const QueryArgs& a) {
  const std::string uri = observer_uri(backend_uri(a.backend, kTool));
  auto sys = System::open(uri);
  if (!sys) {
    fail(kTool, fmt::format("cannot open '{}'", uri), sys.error());
    return open_failure_status(sys.error());
  }
  std::vector<unsigned> cards = a.cards;
  if (cards.empty())
    for (std::size_t k = 0; k < (*sys)->device_count(); ++k) cards.push_back(static_cast<unsigned>(k));
  nlohmann::json all = nlohmann::json::array();
  int rc = kExitOk;
  for (unsigned k : cards) {
    if (k >= (*sys)->device_count()) {
      std::fprintf(stderr, "npo-fw query: card %u not present (%zu cards)\n", k, (*sys)->device_count());
      return kExitError;
    }
    auto st = firmware_status((*sys)->device(k));
    if (!st) {
      rc = fail(kTool, fmt::format("card {}: FW_QUERY", k), st.error());
      continue;
    }
    if (a.json) {
      all.push_back(status_json(k, *st));
    } else {
      print_status(k, *st);
    }
  }
  if (a.json) print_json(all);
  return rc;
}

// ---- update ---------------------------------------------------------------------------------
struct UpdateArgs {
  std::optional<std::string> backend;
  unsigned card = 0;
  std::string image;
  bool allow_downgrade = false;
  bool force = false;
  bool no_commit = false;
  double ready_timeout_s = 10.0;
  bool quiet = false;
};

int update(const UpdateArgs& a) {
  if (!check_seconds(kTool, "--ready-timeout", a.ready_timeout_s, 600.0)) return kExitUsage;
  auto image = read_file(a.image, kMaxFirmwareImageBytes);
  if (!image) return fail(kTool, a.image, image.error());
  // The image on its own first: a malformed or corrupt file is refused before any card is opened.
  auto info = inspect_firmware_image(*image);
  if (!info) return fail(kTool, a.image, info.error());
  const std::string uri = owner_uri(backend_uri(a.backend, kTool), {a.card});
  auto sys = System::open(uri);
  if (!sys) {
    fail(kTool, fmt::format("cannot open '{}'", uri), sys.error());
    return open_failure_status(sys.error());
  }
  if (a.card >= (*sys)->device_count()) {
    std::fprintf(stderr, "npo-fw update: card %u not present (%zu cards)\n", a.card, (*sys)->device_count());
    return kExitError;
  }
  Device& dev = (*sys)->device(a.card);
  auto before = firmware_status(dev);
  if (!before) return fail(kTool, fmt::format("card {}: FW_QUERY", a.card), before.error());
  // Precondition of the tool: re-installing the running version is almost always a mistake in
  // a fleet roll-out (the wrong file); --force says it is meant.
  if (before->slots[before->active].version == info->version && !a.force) {
    std::fprintf(stderr, "npo-fw update: card %u already runs firmware %s; nothing to do (--force re-installs it)\n",
                 a.card, info->version.to_string().c_str());
    return kExitError;
  }
  FirmwareUpdateOptions o;
  o.allow_downgrade = a.allow_downgrade;
  o.force = a.force;
  o.commit = !a.no_commit;
  o.ready_timeout_ns = static_cast<std::uint64_t>(a.ready_timeout_s * 1e9);
  unsigned last_pct = 101;
  const auto progress = [&](FirmwareUpdateStage st, std::uint64_t done, std::uint64_t total) {
    if (a.quiet) return;
    if (st == FirmwareUpdateStage::kWriting) {
      const unsigned pct = total ? static_cast<unsigned>(done * 100 / total) : 100;
      if (pct / 10 == last_pct / 10 && done != total) return;
      last_pct = pct;
      std::fprintf(stderr, "npo-fw: card %u: writing %llu/%llu bytes (%u%%)\n", a.card,
                   static_cast<unsigned long long>(done), static_cast<unsigned long long>(total), pct);
      return;
    }
    std::fprintf(stderr, "npo-fw: card %u: %s\n", a.card, std::string(firmware_stage_name(st)).c_str());
  };
  auto r = update_firmware(dev, *image, o, progress);
  if (!r) {
    fail(kTool, fmt::format("card {}: update to {}", a.card, info->version.to_string()), r.error());
    return r.error().code() == Code::kAborted ? kExitRolledBack : kExitError;
  }
  std::printf("card %u: firmware %s -> %s %s in slot %c (security version %u)\n", a.card, r->from.to_string().c_str(),
              r->to.to_string().c_str(), r->committed ? "committed" : "on trial, not committed", slot_name(r->slot),
              r->security_version);
  return kExitOk;
}

// ---- commit / rollback -----------------------------------------------------------------------
struct TrialArgs {
  std::optional<std::string> backend;
  unsigned card = 0;
};

/// commit (`commit` true) or roll back the update of one card (after `update --no-commit`).
int end_trial(const TrialArgs& a, bool commit) {
  const std::string uri = owner_uri(backend_uri(a.backend, kTool), {a.card});
  auto sys = System::open(uri);
  if (!sys) {
    fail(kTool, fmt::format("cannot open '{}'", uri), sys.error());
    return open_failure_status(sys.error());
  }
  if (a.card >= (*sys)->device_count()) {
    std::fprintf(stderr, "npo-fw %s: card %u not present (%zu cards)\n", commit ? "commit" : "rollback", a.card,
                 (*sys)->device_count());
    return kExitError;
  }
  auto st = commit ? commit_firmware((*sys)->device(a.card)) : rollback_firmware((*sys)->device(a.card));
  if (!st) return fail(kTool, fmt::format("card {}: {}", a.card, commit ? "commit" : "rollback"), st.error());
  print_status(a.card, *st);
  return kExitOk;
}

// ---- sign / verify / keygen -----------------------------------------------------------------
struct SignArgs {
  std::string key, out, payload, version, model = "NPO-REF-1", digest = "sha512";
  std::uint32_t security = 1;
  std::uint16_t vendor = 0x1ee7, device = 0x0a01;
};

int sign(const SignArgs& a) {
  auto version = FirmwareVersion::parse(a.version);
  if (!version) return fail(kTool, "--fw-version", version.error());
  auto key = read_key<64>(a.key, "secret");
  if (!key) return fail(kTool, "--key", key.error());
  auto payload = read_file(a.payload, kMaxFirmwareImageBytes);
  if (!payload) return fail(kTool, a.payload, payload.error());
  FirmwareImageSpec spec;
  spec.vendor_id = a.vendor;
  spec.device_id = a.device;
  spec.model = a.model;
  spec.version = *version;
  spec.security_version = a.security;
  spec.digest = a.digest == "blake2b" ? FirmwareDigest::kBlake2b512 : FirmwareDigest::kSha512;
  auto img = sign_firmware_image(*payload, *key, spec);
  if (!img) return fail(kTool, "sign", img.error());
  if (auto w = write_file(a.out, *img, 0644); !w) return fail(kTool, w.error());
  std::printf("%s: firmware %s, security version %u, %zu payload bytes, signed by %s\n", a.out.c_str(),
              version->to_string().c_str(), a.security, payload->size(), hex(std::span(key->data() + 32, 32)).c_str());
  return kExitOk;
}

struct VerifyArgs {
  std::string image, key;
  bool json = false;
};

int verify(const VerifyArgs& a) {
  auto image = read_file(a.image, kMaxFirmwareImageBytes + 1);
  if (!image) return fail(kTool, a.image, image.error());
  std::optional<FirmwarePublicKey> pub;
  if (!a.key.empty()) {
    auto k = read_key<32>(a.key, "public");
    if (!k) return fail(kTool, "--key", k.error());
    pub = *k;
  }
  auto info = inspect_firmware_image(*image, pub ? &*pub : nullptr);
  if (!info) return fail(kTool, a.image, info.error());
  if (a.json) {
    print_json({{"image", a.image},
                {"vendor_id", info->vendor_id},
                {"device_id", info->device_id},
                {"model", info->model},
                {"version", info->version.to_string()},
                {"security_version", info->security_version},
                {"digest", info->digest == FirmwareDigest::kSha512 ? "sha512" : "blake2b"},
                {"payload_bytes", info->payload_bytes},
                {"image_bytes", info->image_bytes},
                {"signer_key", hex(info->signer_key)},
                {"signature_verified", info->signature_checked}});
    return kExitOk;
  }
  std::printf("%s: NPO firmware image, format 1\n", a.image.c_str());
  std::printf("  target %04x:%04x model %s\n", info->vendor_id, info->device_id,
              info->model.empty() ? "(any)" : info->model.c_str());
  std::printf("  firmware %s, security version %u\n", info->version.to_string().c_str(), info->security_version);
  std::printf("  payload %llu bytes, %s digest OK\n", static_cast<unsigned long long>(info->payload_bytes),
              info->digest == FirmwareDigest::kSha512 ? "SHA-512" : "BLAKE2b-512");
  std::printf("  signer %s\n", hex(info->signer_key).c_str());
  std::printf("  signature %s\n", info->signature_checked ? "verified with --key"
                                                          : "not checked (give --key PUB, or let the card check it)");
  return kExitOk;
}

struct KeygenArgs {
  std::string out;
  bool force = false;
};

int keygen(const KeygenArgs& a) {
  const std::string pub = a.out + ".pub", sec = a.out + ".sec";
  if (!a.force && (std::filesystem::exists(pub) || std::filesystem::exists(sec))) {
    std::fprintf(stderr, "npo-fw keygen: %s or %s exists; --force overwrites\n", pub.c_str(), sec.c_str());
    return kExitError;
  }
  auto k = generate_firmware_key();
  if (!k) return fail(kTool, "keygen", k.error());
  if (auto w = write_file(sec, k->secret_key, 0600); !w) return fail(kTool, w.error());
  if (auto w = write_file(pub, k->public_key, 0644); !w) return fail(kTool, w.error());
  std::printf("%s (secret, mode 0600) and %s (public): key %s\n", sec.c_str(), pub.c_str(), hex(k->public_key).c_str());
  return kExitOk;
}

}  // namespace

void add_card_commands(CLI::App& app, std::vector<Command>& out) {
  static QueryArgs q;
  static UpdateArgs u;
  static SignArgs s;
  static VerifyArgs v;
  static KeygenArgs g;
  static TrialArgs c, rb;
  const std::string backend_help =
      std::string("backend URI: emu:N, emu-remote:DIR (a running npo-emud), vfio:all, vfio:BDF (") +
      kBackendDefaultHelp + ")";

  CLI::App* qa = app.add_subcommand("query", "show each card's firmware slots, versions, update state and key");
  add_backend_option(*qa, q.backend, "--backend", backend_help);
  qa->add_option("--card", q.cards, "only these cards (N or N,M,...)")->delimiter(',');
  qa->add_flag("--json", q.json, "print JSON");
  out.push_back({qa, [] { return query(q); }});

  CLI::App* ua = app.add_subcommand(
      "update",
      "update one card: check IMAGE against the card (key, signature, target, version, security version) before "
      "writing anything, write it to the inactive slot, activate it on trial, wait for ready, commit");
  add_backend_option(*ua, u.backend, "--backend", backend_help);
  ua->add_option("--card", u.card, "the card to update (one at a time: docs/firmware.md)")->required();
  ua->add_option("IMAGE", u.image, "signed image (npo-fw sign)")->required();
  ua->add_flag("--allow-downgrade", u.allow_downgrade,
               "accept a firmware version older than the running one (never a lower security version)");
  ua->add_flag("--force", u.force,
               "update although DMA queues of the card are open in this process, or re-install the running version");
  ua->add_flag("--no-commit", u.no_commit, "leave the new image on trial (a reset or power cut rolls it back)");
  ua->add_option("--ready-timeout", u.ready_timeout_s, "seconds to wait for the new image to report ready (10)");
  ua->add_flag("-q,--quiet", u.quiet, "no progress lines on stderr");
  out.push_back({ua, [] { return update(u); }});

  CLI::App* ca = app.add_subcommand("commit", "make the image on trial permanent (after update --no-commit)");
  add_backend_option(*ca, c.backend, "--backend", backend_help);
  ca->add_option("--card", c.card, "the card")->required();
  out.push_back({ca, [] { return end_trial(c, true); }});
  CLI::App* ra = app.add_subcommand(
      "rollback", "end an update: drop a staged image, or leave a trial for the committed slot (FW_ABORT)");
  add_backend_option(*ra, rb.backend, "--backend", backend_help);
  ra->add_option("--card", rb.card, "the card")->required();
  out.push_back({ra, [] { return end_trial(rb, false); }});

  CLI::App* sa = app.add_subcommand("sign", "build a signed image from PAYLOAD (for vendors and tests)");
  sa->add_option("--key", s.key, "secret key file (64 bytes, npo-fw keygen)")->required();
  sa->add_option("--out", s.out, "image file to write")->required();
  sa->add_option("PAYLOAD", s.payload, "the firmware payload")->required();
  sa->add_option("--fw-version", s.version, "firmware version X.Y.Z (--version prints the tool's)")->required();
  sa->add_option("--security", s.security, "security version (anti-rollback counter, default 1)");
  sa->add_option("--vendor", s.vendor, "target PCI vendor ID (default 0x1ee7)");
  sa->add_option("--device", s.device, "target PCI device ID (default 0x0a01)");
  sa->add_option("--model", s.model, "target board model (default NPO-REF-1; \"\" for any)");
  sa->add_option("--digest", s.digest, "payload digest")->check(CLI::IsMember({"sha512", "blake2b"}));
  out.push_back({sa, [] { return sign(s); }});

  CLI::App* va = app.add_subcommand("verify", "check IMAGE on its own: layout, size, digest; with --key the signature");
  va->add_option("IMAGE", v.image, "image file")->required();
  va->add_option("--key", v.key, "public key file (32 bytes) to verify the signature with");
  va->add_flag("--json", v.json, "print JSON");
  out.push_back({va, [] { return verify(v); }});

  CLI::App* ga = app.add_subcommand("keygen", "make an Ed25519 signing key pair PREFIX.sec / PREFIX.pub");
  ga->add_option("--out", g.out, "file name prefix")->required();
  ga->add_flag("--force", g.force, "overwrite existing files");
  out.push_back({ga, [] { return keygen(g); }});
}

}  // namespace npo::tools::fw
