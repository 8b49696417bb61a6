// SPDX-License-Identifier: Apache-2.0
// npo-hal: the default platform clock (CLOCK_MONOTONIC).
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
