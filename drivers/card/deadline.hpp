// SPDX-License-Identifier: Apache-2.0
// drivers/card: Deadline -- the one way a driver waits for the card with a time limit. Every
// deadline is taken from the platform clock (backend::Clock; System::clock() publicly), so
// the emulator's virtual clock replays them (docs/getting-started.md, "Time").
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>

#include "npo/hal/backend/backend.hpp"

namespace npo::card {

/// What a wait waits for. It decides how waiting passes time on a virtual clock.
enum class WaitFor : std::uint8_t {
  /// State the card changes on its own time line (reset completing, link training steps):
  /// each pause sleeps on the platform clock, so on a virtual clock waiting advances
  /// emulated time and fires the emulator's timed events on the way.
  kCardTime,
  /// Work the card does as fast as it can (a mailbox reply, DMA completions, a window
  /// drain, a statistics DMA). The emulator does that work on its worker threads in wall
  /// time whatever the clock, so on a virtual clock:
  ///  - the deadline passes only after kWorkGraceNs of wall time (or the whole timeout when
  ///    shorter), so a reply is never late because another thread moved emulated time;
  ///  - it also passes after the whole timeout of wall time, so a hang is caught even when
  ///    nobody advances emulated time (a caller that only polls);
  ///  - pauses move emulated time toward the deadline only when the waiter asks for it
  ///    (`advance`, the mailbox: a lost request then fails after the timeout of emulated
  ///    time in a few ms of wall time); DMA waits never do, a large copy takes wall time.
  kCardWork,
};

/// Wall time a kCardWork wait on a virtual clock leaves the emulator's threads before the
/// deadline can pass: far above a reply's real latency (microseconds), far below 1 s.
/// For the mailbox (`advance`) it is not what keeps a slow reply from timing out: the
/// emulator's virtual clock does not move emulated time while a firmware still handles a
/// request, so however long its thread waits for a CPU (a loaded machine, ThreadSanitizer)
/// the reply comes first; only a request the firmware dropped times out.
inline constexpr std::uint64_t kWorkGraceNs = 20'000'000;

/// A deadline `timeout_ns` of platform time from its construction.
/// Thread-safety: none (one waiter); the clock itself is thread-safe.
class Deadline {
 public:
  Deadline(backend::Clock& clock, std::uint64_t timeout_ns, WaitFor what, bool advance = false) noexcept
      : clock_(clock),
        timeout_ns_(timeout_ns),
        at_ns_(clock.now_ns() + timeout_ns),
        what_(what),
        virtual_(clock.is_virtual()),
        advance_(advance),
        wall0_(std::chrono::steady_clock::now()) {}

  /// Whether the deadline has passed (rules: WaitFor).
  [[nodiscard]] bool expired() const noexcept {
    const bool platform = clock_.now_ns() >= at_ns_;
    if (!virtual_ || what_ == WaitFor::kCardTime) return platform;
    const std::uint64_t wall = wall_ns();
    return wall >= std::min(kWorkGraceNs, timeout_ns_) && (platform || wall >= timeout_ns_);
  }

  /// Platform time left, ns (0 once the platform deadline passed).
  [[nodiscard]] std::uint64_t remaining_ns() const noexcept {
    const std::uint64_t now = clock_.now_ns();
    return now >= at_ns_ ? 0 : at_ns_ - now;
  }

  /// Waits a little before the next check; `attempt` counts the checks so far (the first 64
  /// only yield the CPU). `sleep_ns` is the pause once past the spin: wall time on a real
  /// clock and for kCardWork, platform time for kCardTime.
  void pause(unsigned attempt, std::uint64_t sleep_ns) const noexcept {
    if (what_ == WaitFor::kCardTime) {
      clock_.sleep_until(std::min(at_ns_, clock_.now_ns() + sleep_ns));
      return;
    }
    if (virtual_ && advance_ && wall_ns() >= kWorkGraceNs) {
      if (!settled_) {
        // First let the work in flight finish without moving emulated time (the emulator's
        // virtual clock waits for its firmwares' mailbox requests): a slow reply is then
        // seen before any emulated time passes.
        settled_ = true;
        clock_.sleep_until(clock_.now_ns());
        return;
      }
      // The work had its grace and finished without a reply: let emulated time run to the
      // deadline in four steps (the caller checks for the reply between them, and before
      // expired()).
      clock_.sleep_until(std::min(at_ns_, clock_.now_ns() + std::max<std::uint64_t>(timeout_ns_ / 4, sleep_ns)));
      return;
    }
    if (attempt < 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::nanoseconds(sleep_ns));
    }
  }

 private:
  [[nodiscard]] std::uint64_t wall_ns() const noexcept {
    return static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - wall0_).count());
  }

  backend::Clock& clock_;
  std::uint64_t timeout_ns_;
  std::uint64_t at_ns_;
  WaitFor what_;
  bool virtual_;
  bool advance_;
  mutable bool settled_ = false;  ///< pause() let the work in flight finish once (advance_)
  std::chrono::steady_clock::time_point wall0_;
};

}  // namespace npo::card
