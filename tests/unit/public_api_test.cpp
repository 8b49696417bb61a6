// SPDX-License-Identifier: Apache-2.0
// The sealed public API (issue 12): no back door into the drivers' state or the backend from
// the public headers, a public platform clock, decoded port fields. Compile-time checks plus
// System::clock() on both emulator clocks.
#include <chrono>
#include <type_traits>

#include <gtest/gtest.h>

#include "npo/hal/hal.hpp"

namespace {

// No Device::impl(), no System::backend(), no public way to build a Device.
template <class T>
concept HasImpl = requires(T& t) {
  t.impl();
};
template <class T>
concept HasBackend = requires(T& t) {
  t.backend();
};
static_assert(!HasImpl<npo::Device>);
static_assert(!HasBackend<npo::System>);
static_assert(!std::is_constructible_v<npo::Device, std::nullptr_t>);
static_assert(!std::is_default_constructible_v<npo::Clock>);

// PortStatus carries decoded fields, not PORT.CTRL as a word.
template <class T>
concept HasCtrlWord = requires(T& t) {
  t.ctrl;
};
static_assert(!HasCtrlWord<npo::PortStatus>);
static_assert(std::is_same_v<decltype(npo::PortStatus{}.enabled), bool>);

TEST(PublicClock, VirtualClockMovesOnlyWhenSleptOn) {
  auto sys = npo::System::open("emu:2?clock=virtual&hbm=1M");
  ASSERT_TRUE(sys.has_value()) << sys.error().to_string();
  const npo::Clock clock = (*sys)->clock();
  EXPECT_TRUE(clock.is_virtual());
  const std::uint64_t t0 = clock.now_ns();
  EXPECT_EQ(clock.now_ns(), t0);  // nobody slept: emulated time stands still
  const auto w0 = std::chrono::steady_clock::now();
  clock.sleep_for(3'600'000'000'000ULL);  // one emulated hour
  EXPECT_EQ(clock.now_ns(), t0 + 3'600'000'000'000ULL);
  clock.sleep_until(t0);  // in the past: returns at once
  EXPECT_EQ(clock.now_ns(), t0 + 3'600'000'000'000ULL);
  EXPECT_LT(std::chrono::steady_clock::now() - w0, std::chrono::seconds(10));
}

TEST(PublicClock, RealtimeClockByDefault) {
  auto sys = npo::System::open("emu:1?hbm=1M");
  ASSERT_TRUE(sys.has_value()) << sys.error().to_string();
  const npo::Clock clock = (*sys)->clock();
  EXPECT_FALSE(clock.is_virtual());
  const std::uint64_t t0 = clock.now_ns();
  clock.sleep_for(2'000'000);
  EXPECT_GE(clock.now_ns() - t0, 2'000'000u);
}

}  // namespace
