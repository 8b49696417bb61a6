// SPDX-License-Identifier: Apache-2.0
// Emulator internals: the clock with its event scheduler, and the worker pool that runs
// DMA engines and firmware off the caller's thread (woken by doorbells, never spinning).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <queue>
#include <thread>
#include <vector>

#include "npo/emu/emulator.hpp"

namespace npo::emu {

/// a + b, or the largest time when that overflows (a duration that large means "never").
[[nodiscard]] constexpr std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) noexcept {
  return b > ~std::uint64_t{0} - a ? ~std::uint64_t{0} : a + b;
}

/// Time source and timed events. In kVirtual mode events fire inside advance(), on the
/// caller's thread, in (time, scheduling order). In kRealtime mode a timer thread fires them.
class Scheduler {
 public:
  explicit Scheduler(ClockMode mode);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  [[nodiscard]] ClockMode mode() const noexcept { return mode_; }
  [[nodiscard]] std::uint64_t now_ns() const noexcept;
  /// Runs `fn(now)` at time `at_ns` (immediately-due events fire on the next advance/tick).
  void schedule_at(std::uint64_t at_ns, std::function<void(std::uint64_t)> fn);
  /// Runs `fn(now)` `delay_ns` from now (saturating: a huge delay is "never").
  void schedule_in(std::uint64_t delay_ns, std::function<void(std::uint64_t)> fn) {
    schedule_at(saturating_add(now_ns(), delay_ns), std::move(fn));
  }
  /// Virtual mode only: moves time forward, firing due events.
  void advance(std::uint64_t ns);
  /// Stops the timer thread (realtime); pending events are dropped.
  void stop();

 private:
  struct Event {
    std::uint64_t at;
    std::uint64_t seq;
    std::function<void(std::uint64_t)> fn;
    bool operator>(const Event& o) const { return at != o.at ? at > o.at : seq > o.seq; }
  };
  void timer_loop();

  ClockMode mode_;
  std::chrono::steady_clock::time_point start_;
  std::atomic<std::uint64_t> virtual_now_{0};
  std::mutex mu_;
  std::mutex advance_mu_;  // serialises advance() callers
  std::condition_variable cv_;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  std::uint64_t seq_ = 0;
  bool stopping_ = false;
  std::thread timer_;
};

/// Something a worker can run: a DMA queue or a mailbox. At most one worker runs a given
/// Runnable at a time (the `scheduled` flag stays set while it runs).
class Runnable {
 public:
  virtual ~Runnable() = default;
  /// Does a bounded amount of work. Returns true when more work is pending right now.
  virtual bool run_once() = 0;
  /// Cheap, lock-free probe: is there work that run_once() would do?
  [[nodiscard]] virtual bool has_work() const noexcept = 0;
  std::atomic<bool> scheduled{false};
};

/// A small pool of threads that sleep on a condition variable until a Runnable is posted.
/// When a Runnable runs out of work its worker keeps it scheduled and polls its has_work()
/// for up to `spin_ns` while no other Runnable is ready, so a doorbell rung shortly after the
/// previous batch costs the ringer no post (lock, queue push) and the worker no futex
/// wake-up (the cross-core wake costs ~1.5 us or more on these VMs); otherwise a worker with
/// nothing to run polls the ready list for `spin_ns` before it sleeps. The spin is bounded;
/// idle workers sleep.
class WorkerPool {
 public:
  /// `inline_doorbells`: ring() runs the Runnable on the ringing thread (see ring()).
  explicit WorkerPool(unsigned threads, std::uint64_t spin_ns = 50'000, bool inline_doorbells = false);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;
  /// Makes `r` run soon unless it is already scheduled. Cheap when already scheduled.
  void post(Runnable& r);
  /// A doorbell for `r`: post(r), or with inline doorbells, unless `r` is already scheduled
  /// (a worker or another ringer has it), runs it on the calling thread for up to
  /// kInlineRuns batches and hands what is left to a worker. Inline, the ringing thread (an
  /// npo-emud session thread) is the engine, so a doorbell costs no cross-thread wake-up.
  /// The caller must hold no lock that run_once() takes. Thread-safety: any thread.
  void ring(Runnable& r);
  [[nodiscard]] bool inline_doorbells() const noexcept { return inline_; }
  void stop();

 private:
  void loop();
  /// Polls `r` (still scheduled) for new work for up to spin_ns_: true when it has some,
  /// false when another Runnable became ready or the time ran out (then *timed_out is set).
  bool linger(Runnable& r, bool* timed_out);
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Runnable*> ready_;
  std::atomic<std::size_t> ready_count_{0};
  std::uint64_t spin_ns_;
  bool inline_;
  bool stopping_ = false;
  unsigned sleepers_ = 0;
  std::vector<std::thread> threads_;
};

}  // namespace npo::emu
