// SPDX-License-Identifier: Apache-2.0
// npo-hal: the default platform clock (CLOCK_MONOTONIC) and the public npo::Clock handle.
#include "npo/hal/clock.hpp"

#include <chrono>
#include <thread>

#include "npo/hal/backend/backend.hpp"

namespace npo::backend {

namespace {
class MonotonicClock final : public Clock {
 public:
  std::uint64_t now_ns() noexcept override {
    return static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count());
  }
  void sleep_until(std::uint64_t t_ns) noexcept override {
    const std::uint64_t now = now_ns();
    if (t_ns > now) std::this_thread::sleep_for(std::chrono::nanoseconds(t_ns - now));
  }
};
}  // namespace

Clock& monotonic_clock() noexcept {
  static MonotonicClock clock;
  return clock;
}

}  // namespace npo::backend

namespace npo {

std::uint64_t Clock::now_ns() const noexcept { return clock_->now_ns(); }
void Clock::sleep_until(std::uint64_t t_ns) const noexcept { clock_->sleep_until(t_ns); }
void Clock::sleep_for(std::uint64_t ns) const noexcept { clock_->sleep_until(clock_->now_ns() + ns); }
bool Clock::is_virtual() const noexcept { return clock_->is_virtual(); }

}  // namespace npo
