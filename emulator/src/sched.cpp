// SPDX-License-Identifier: Apache-2.0
#include "sched.hpp"

namespace npo::emu {

namespace {
constexpr unsigned kMaxReruns = 16;   // batches a worker runs back to back before re-checking the list
constexpr unsigned kInlineRuns = 16;  // batches a ringing thread runs before it hands the rest to a worker
}  // namespace

Scheduler::Scheduler(ClockMode mode) : mode_(mode), start_(std::chrono::steady_clock::now()) {
  if (mode_ == ClockMode::kRealtime) timer_ = std::thread([this] { timer_loop(); });
}

Scheduler::~Scheduler() { stop(); }

void Scheduler::stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (timer_.joinable()) timer_.join();
}

std::uint64_t Scheduler::now_ns() const noexcept {
  if (mode_ == ClockMode::kVirtual) return virtual_now_.load(std::memory_order_acquire);
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_).count());
}

void Scheduler::schedule_at(std::uint64_t at_ns, std::function<void(std::uint64_t)> fn) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    events_.push(Event{at_ns, seq_++, std::move(fn)});
  }
  cv_.notify_all();
}

void Scheduler::advance(std::uint64_t ns) {
  std::lock_guard serial(advance_mu_);
  const std::uint64_t target = virtual_now_.load() + ns;
  for (;;) {
    std::unique_lock lock(mu_);
    if (events_.empty() || events_.top().at > target) break;
    Event ev = std::move(const_cast<Event&>(events_.top()));
    events_.pop();
    lock.unlock();
    if (ev.at > virtual_now_.load()) virtual_now_.store(ev.at, std::memory_order_release);
    ev.fn(virtual_now_.load());
  }
  virtual_now_.store(target, std::memory_order_release);
}

void Scheduler::timer_loop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    if (events_.empty()) {
      cv_.wait(lock);
      continue;
    }
    const std::uint64_t now = now_ns();
    if (events_.top().at > now) {
      cv_.wait_for(lock, std::chrono::nanoseconds(events_.top().at - now));
      continue;
    }
    Event ev = std::move(const_cast<Event&>(events_.top()));
    events_.pop();
    lock.unlock();
    ev.fn(now_ns());
    lock.lock();
  }
}

WorkerPool::WorkerPool(unsigned threads, std::uint64_t spin_ns, bool inline_doorbells)
    : spin_ns_(spin_ns), inline_(inline_doorbells) {
  if (threads == 0) threads = 1;
  for (unsigned i = 0; i < threads; ++i) threads_.emplace_back([this] { loop(); });
}

WorkerPool::~WorkerPool() { stop(); }

void WorkerPool::stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

void WorkerPool::post(Runnable& r) {
  if (r.scheduled.exchange(true, std::memory_order_acq_rel)) return;
  bool wake;
  {
    std::lock_guard lock(mu_);
    ready_.push_back(&r);
    ready_count_.store(ready_.size(), std::memory_order_release);
    wake = sleepers_ > 0;
  }
  if (wake) cv_.notify_one();
}

void WorkerPool::ring(Runnable& r) {
  if (!inline_) return post(r);
  if (r.scheduled.exchange(true, std::memory_order_acq_rel)) return;
  for (unsigned run = 0; run < kInlineRuns; ++run) {
    if (r.run_once()) continue;
    // Same clear-then-recheck as a worker (loop()): a doorbell after the clear runs or posts
    // the Runnable itself; one that landed before it is seen by has_work().
    r.scheduled.store(false, std::memory_order_seq_cst);
    if (!r.has_work() || r.scheduled.exchange(true, std::memory_order_acq_rel)) return;
  }
  {  // still busy after the budget: a worker continues (r stays scheduled)
    std::lock_guard lock(mu_);
    ready_.push_back(&r);
    ready_count_.store(ready_.size(), std::memory_order_release);
  }
  cv_.notify_one();
}

bool WorkerPool::linger(Runnable& r, bool* timed_out) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(spin_ns_);
  for (unsigned i = 1;; ++i) {
    if (r.has_work()) return true;
    if (ready_count_.load(std::memory_order_acquire) != 0) return false;
    if ((i & 63u) == 0 && std::chrono::steady_clock::now() >= until) {
      *timed_out = true;
      return false;
    }
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
}

void WorkerPool::loop() {
  std::unique_lock lock(mu_);
  bool spun = false;  // the last Runnable was lingered on for spin_ns: sleep without spinning again
  for (;;) {
    if (ready_.empty() && !stopping_ && spin_ns_ > 0 && !spun) {
      lock.unlock();
      const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(spin_ns_);
      for (unsigned i = 0; ready_count_.load(std::memory_order_acquire) == 0; ++i) {
        if ((i & 63u) == 0 && std::chrono::steady_clock::now() >= until) break;
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
      }
      lock.lock();
    }
    while (ready_.empty() && !stopping_) {
      ++sleepers_;
      cv_.wait(lock);
      --sleepers_;
    }
    if (stopping_) return;
    Runnable* r = ready_.front();
    ready_.pop_front();
    ready_count_.store(ready_.size(), std::memory_order_release);
    lock.unlock();
    bool more = false;
    spun = false;
    // While no other Runnable waits, run `r` again without going through the list (bounded,
    // so stop() is seen). Lingering keeps it scheduled, so a doorbell meanwhile only stores
    // its tail: no post, no lock, no wake-up.
    for (unsigned rerun = 0; rerun < kMaxReruns; ++rerun) {
      more = r->run_once();
      if (!more && spin_ns_ > 0) more = linger(*r, &spun);
      if (!more || ready_count_.load(std::memory_order_acquire) != 0) break;
    }
    if (!more) {
      // Clear the flag, then re-check: a doorbell after the clear posts the Runnable itself;
      // one that landed between run_once() and the clear is caught by has_work().
      r->scheduled.store(false, std::memory_order_seq_cst);
      if (r->has_work() && !r->scheduled.exchange(true, std::memory_order_acq_rel)) more = true;
    }
    lock.lock();
    if (more) {
      ready_.push_back(r);
      ready_count_.store(ready_.size(), std::memory_order_release);
    }
  }
}

}  // namespace npo::emu
