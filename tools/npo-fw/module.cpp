// SPDX-License-Identifier: Apache-2.0
// npo-fw module query|update (module.hpp): public API only (npo/hal/module_firmware.hpp).
#include "module.hpp"

#include <cerrno>
#include <cstdio>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "npo/hal/device.hpp"
#include "npo/hal/module_firmware.hpp"

namespace npo::tools::firmware {

namespace {

std::string version(const ModuleImage& im) {
  return im.valid ? fmt::format("{}.{} build {}", im.major, im.minor, im.build) : std::string("-");
}

nlohmann::json image_json(const ModuleImage& im) {
  return {{"valid", im.valid}, {"running", im.running}, {"committed", im.committed}, {"major", im.major},
          {"minor", im.minor}, {"build", im.build},     {"extra", im.extra}};
}

void print_info(unsigned port, const ModuleFirmwareInfo& info, bool json) {
  if (json) {
    nlohmann::json j = {{"port", port},
                        {"running", info.running == 0 ? "A" : "B"},
                        {"committed", info.committed == 0 ? "A" : "B"},
                        {"images", {{"A", image_json(info.images[0])}, {"B", image_json(info.images[1])}}}};
    fmt::print("{}\n", j.dump());
    return;
  }
  fmt::print("port {}: module firmware\n", port);
  for (unsigned b = 0; b < 2; ++b) {
    const auto& im = info.images[b];
    std::string flags;
    if (im.running) flags += " running";
    if (im.committed) flags += " committed";
    if (!im.valid) flags += " invalid";
    fmt::print("  image {}  {:<18} {:<12}{}\n", b == 0 ? 'A' : 'B', version(im), im.extra, flags);
  }
}

int report(const Error& e) {
  std::fprintf(stderr, "npo-fw: %s\n", e.to_string().c_str());
  return e.sys_errno() == EBUSY ? 2 : 1;
}

}  // namespace

int module_query(Device& device, unsigned port, bool json) {
  auto info = query_module_firmware(device, port);
  if (!info) return report(info.error());
  print_info(port, *info, json);
  return 0;
}

int module_update(Device& device, unsigned port, std::span<const std::byte> header, std::span<const std::byte> payload,
                  bool commit, bool json) {
  ModuleUpdateOptions o;
  o.commit = commit;
  std::size_t next_pct = 10;
  o.progress = [&](const ModuleUpdateProgress& p) {
    if (json) return;
    if (p.step == ModuleUpdateStep::kWrite) {
      const std::size_t pct = p.total_bytes == 0 ? 100 : p.bytes_written * 100 / p.total_bytes;
      if (pct < next_pct && p.bytes_written != p.total_bytes) return;
      while (next_pct <= pct) next_pct += 10;
      fmt::print("port {}: write {}/{} bytes ({}%)\n", port, p.bytes_written, p.total_bytes, pct);
      return;
    }
    fmt::print("port {}: {}\n", port, module_update_step_name(p.step));
  };
  std::fflush(stdout);
  auto r = update_module_firmware(device, port, header, payload, o);
  if (!r) return report(r.error());
  if (!json) {
    fmt::print("port {}: image {} runs {}{} ({} blocks, {:.1f} ms)\n", port, r->after.running == 0 ? 'A' : 'B',
               version(r->after.running_image()), r->after.committed == r->after.running ? ", committed" : "",
               r->blocks, static_cast<double>(r->elapsed_ns) / 1e6);
  }
  print_info(port, r->after, json);
  return 0;
}

}  // namespace npo::tools::firmware
