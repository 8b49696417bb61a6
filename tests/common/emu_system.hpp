// SPDX-License-Identifier: Apache-2.0
// Tests: a System over an emulator the test keeps a handle on (to advance its virtual clock,
// inject faults, reconfigure switches), through a private backend registry.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <gtest/gtest.h>

#include "npo/emu/emulator.hpp"
#include "npo/hal/backend/registry.hpp"
#include "npo/hal/system.hpp"

namespace npo_test {

/// Opens every card of `emu` as a System (URI "emu:test"). Records a test failure and
/// returns null when the system cannot be opened.
inline std::unique_ptr<npo::System> open_system(const std::shared_ptr<npo::emu::Emulator>& emu) {
  npo::backend::Registry reg;
  auto keep = emu;
  EXPECT_TRUE(
      reg.add("emu", {"emu:test"},
              [keep](std::string_view, std::string_view uri) -> npo::Result<std::unique_ptr<npo::backend::Backend>> {
                return keep->make_backend(std::string(uri));
              })
          .has_value());
  npo::SystemOptions o;
  o.registry = &reg;
  auto s = npo::System::open("emu:test", o);
  EXPECT_TRUE(s.has_value()) << (s ? "" : s.error().to_string());
  return s ? std::move(*s) : nullptr;
}

}  // namespace npo_test
