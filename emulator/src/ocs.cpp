// SPDX-License-Identifier: Apache-2.0
// EmulatedOcs: an emulated optical circuit switch behind the HAL's switch interface
// (npo/emu/ocs.hpp).
#include "npo/emu/ocs.hpp"

#include <mutex>

#include <fmt/format.h>

namespace npo::emu {

EmulatedOcs::EmulatedOcs(std::shared_ptr<Emulator> emulator, std::string name, unsigned radix, std::vector<bool> cabled)
    : emu_(std::move(emulator)), name_(std::move(name)), radix_(radix), cabled_(std::move(cabled)) {}

Result<std::unique_ptr<EmulatedOcs>> EmulatedOcs::open(std::shared_ptr<Emulator> emulator, std::string_view name) {
  const auto& cfg = emulator->config();
  for (std::size_t i = 0; i < cfg.switches.size(); ++i) {
    const auto& sw = cfg.switches[i];
    if (sw.name != name) continue;
    std::vector<bool> cabled(sw.ports, false);
    for (const auto& c : cfg.switch_cables) {
      for (const auto& e : {c.a, c.b}) {
        if (e.on_switch && e.node == i && e.port < sw.ports) cabled[e.port] = true;
      }
    }
    return std::unique_ptr<EmulatedOcs>(new EmulatedOcs(std::move(emulator), sw.name, sw.ports, std::move(cabled)));
  }
  return fail(Code::kNotFound, fmt::format("emulator has no optical switch '{}'", name));
}

std::vector<std::unique_ptr<EmulatedOcs>> EmulatedOcs::open_all(const std::shared_ptr<Emulator>& emulator) {
  std::vector<std::unique_ptr<EmulatedOcs>> out;
  for (const auto& sw : emulator->config().switches) {
    if (auto o = open(emulator, sw.name)) out.push_back(std::move(*o));
  }
  return out;
}

Result<void> EmulatedOcs::connect(unsigned a, unsigned b) { return emu_->connect(name_, a, b); }

Result<void> EmulatedOcs::disconnect(unsigned port) { return emu_->disconnect(name_, port); }

Result<std::vector<CrossConnect>> EmulatedOcs::cross_connects() const { return emu_->cross_connects(name_); }

Result<void> EmulatedOcs::apply(const std::vector<OcsChange>& changes) {
  static std::mutex batch_mu;  // batches of every EmulatedOcs run one at a time
  std::lock_guard lock(batch_mu);
  auto now = cross_connects();
  if (!now) return std::unexpected(std::move(now.error()));
  if (auto after = ocs_after(radix_, std::move(*now), changes); !after) {
    return std::unexpected(std::move(Error(after.error())).prefixed(fmt::format("{}: apply", name_)));
  }
  for (std::size_t i = 0; i < changes.size(); ++i) {
    const auto& c = changes[i];
    if (c.kind == OcsChange::Kind::kConnect && (!cabled_[c.a] || !cabled_[c.b])) {
      return fail(Code::kFailedPrecondition, fmt::format("{}: apply change {} ({}): port {} has no cable", name_, i,
                                                         ocs_change_text(c), cabled_[c.a] ? c.b : c.a));
    }
  }
  return OpticalCircuitSwitch::apply(changes);  // every step now succeeds (or undoes itself)
}

}  // namespace npo::emu
