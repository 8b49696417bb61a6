// SPDX-License-Identifier: Apache-2.0
// npo-hal public API: Clock -- the platform clock of a System (System::clock()).
#pragma once

#include <cstdint>

namespace npo {

namespace backend {
class Clock;
}  // namespace backend

class System;

/// The time base of one System: every deadline in the drivers (mailbox replies, card reset,
/// window revoke, the DMA hang watchdog, link training) is measured on it. On real cards and
/// on the emulator by default it is CLOCK_MONOTONIC; with the emulator's `clock=virtual` it is
/// emulated time, which only moves when someone sleeps on it (a sleep then runs the emulator's
/// timed events up to the wake-up time at once), so hours of link time take seconds.
/// A small handle (copy it freely); valid while its System lives.
/// Thread-safety: every method is safe from any thread.
class Clock {
 public:
  /// Current time in ns. Monotonic; the epoch is unspecified (compare only values of one
  /// System's clock).
  [[nodiscard]] std::uint64_t now_ns() const noexcept;
  /// Returns once now_ns() >= t_ns (at once when it already is). A real clock sleeps the
  /// thread; the virtual clock advances emulated time to t_ns, firing the events due on the way.
  void sleep_until(std::uint64_t t_ns) const noexcept;
  /// sleep_until(now_ns() + ns).
  void sleep_for(std::uint64_t ns) const noexcept;
  /// True for the emulator's virtual clock (`clock=virtual`).
  [[nodiscard]] bool is_virtual() const noexcept;

 private:
  friend class System;
  explicit Clock(backend::Clock& clock) noexcept : clock_(&clock) {}
  backend::Clock* clock_;
};

}  // namespace npo
