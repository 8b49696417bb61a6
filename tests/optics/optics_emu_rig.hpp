// SPDX-License-Identifier: Apache-2.0
// Optics tests over the emulator: a System on an emulator the test keeps a handle on (virtual
// clock, fault injection), and a detector for the emulator's physical port model.
#pragma once

#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "common/emu_system.hpp"
#include "npo/emu/emulator.hpp"
#include "npo/hal/port.hpp"
#include "npo/hal/system.hpp"

namespace optics_test {

struct EmuRig {
  std::shared_ptr<npo::emu::Emulator> emu;
  std::unique_ptr<npo::System> sys;

  /// `rest` is an emulator URI after "emu:" (e.g. "mesh8?clock=virtual&hbm=1M"), or a config.
  explicit EmuRig(const std::string& rest) {
    auto cfg = npo::emu::parse_uri(rest);
    EXPECT_TRUE(cfg.has_value()) << (cfg ? "" : cfg.error().to_string());
    if (cfg) init(*cfg);
  }
  explicit EmuRig(const npo::emu::SystemConfig& cfg) { init(cfg); }

  void init(const npo::emu::SystemConfig& cfg) {
    auto e = npo::emu::Emulator::create(cfg);
    EXPECT_TRUE(e.has_value()) << (e ? "" : e.error().to_string());
    if (!e) return;
    emu = *e;
    sys = npo_test::open_system(emu);
  }
  [[nodiscard]] bool ok() const { return sys != nullptr; }
  /// Moves emulated time forward (virtual clock).
  void advance_ms(std::uint64_t ms) { ASSERT_TRUE(emu->advance(ms * 1'000'000).has_value()); }
};

/// Whether the emulator models traffic on the lanes (the physical optics model): after the
/// link is up and 10 ms pass, lane 0 of `port` counts codewords. The port-model-less emulator
/// reads 0 there; tests that need the model fail with this reason.
inline bool has_lane_model(EmuRig& rig, unsigned card = 0, unsigned port = 0) {
  (void)rig.emu->advance(10'000'000);
  auto ps = npo::read_port(rig.sys->device(card), port);
  return ps && ps->state == npo::LinkState::kUp && !ps->lanes.empty() && ps->lanes[0].codewords > 0;
}

inline constexpr const char* kNoModel =
    "the emulator's lane model must count RS(544,514) codewords on an Up link (registers.md §7.3)";

}  // namespace optics_test
