// SPDX-License-Identifier: Apache-2.0
// drivers/card: the DMA queue driver (docs/spec/dma.md, docs/spec/registers.md §5).
//
// Ring bookkeeping: every op gets a 64-bit handle (next_). The card's SQ index of an op is
// (handle - dev_base_) mod 2^32, where dev_base_ is the first handle after the last queue
// reset (the card restarts its indexes at 0). The SQ slot is that index & mask. The card
// completes a queue's ops in order, writing completion k of the ring's pass p with phase
// bit = (p even). The hot path (enqueue, submit, poll) touches only host memory plus one
// MMIO write per submit and per non-empty poll.
#include <poll.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "card/deadline.hpp"
#include "card/device_impl.hpp"
#include "npo/fw/dma.hpp"
#include "npo/fw/pci.hpp"
#include "npo/fw/regs.hpp"
#include "npo/hal/log.hpp"
#include "npo/hal/memory.hpp"
#include "npo/hal/window.hpp"

namespace npo {

namespace regs = fw::regs;
namespace qr = fw::regs::queue;
namespace dma = fw::dma;

std::string_view op_status_name(OpStatus s) noexcept { return dma::status_name(static_cast<dma::Status>(s)); }

namespace {

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

class QueueImpl final : public DmaQueue {
 public:
  QueueImpl(DeviceImpl& d, unsigned qid, const QueueOptions& o) : d_(d), qid_(qid), opts_(o), bar0_(*d.bar0) {}

  ~QueueImpl() override {
    // Stop the queue before its rings go away: disable, reset (aborts anything pending on
    // the card), unroute the interrupt. The rings' unmap then waits for any device access
    // still in progress.
    bar0_.write32(reg(qr::kCtrl), 0);
    bar0_.write32(reg(qr::kReset), qr::kResetQueue.mask());
    if (efd_ >= 0) {
      const int none = -1;
      (void)d_.dev->set_msix_eventfds(fw::pci::kMsixVectorQueueBase + qid_, std::span<const int>(&none, 1));
      ::close(efd_);
    }
    std::lock_guard lock(d_.queues_mu);
    d_.queue_open[qid_] = false;
  }

  Result<void> init(Device& device) {
    const ErrorContext ctx = context();
    depth_ = opts_.depth;
    log2_ = static_cast<unsigned>(std::countr_zero(depth_));
    mask_ = depth_ - 1;
    const std::size_t sq_bytes = std::size_t{depth_} * dma::desc::kSize;
    cq_off_ = (sq_bytes + 4095) & ~std::size_t{4095};
    const std::size_t cq_bytes = std::size_t{depth_} * dma::cpl::kSize;
    auto rings = allocate_host_memory(device, cq_off_ + cq_bytes);
    if (!rings) return std::unexpected(Error(rings.error()).with(ctx));
    rings_ = std::move(*rings);
    sq_ = rings_->bytes().data();
    cq_ = sq_ + cq_off_;
    pending_.resize(depth_);
    if (opts_.mode == CompletionMode::kInterrupt) {
      efd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
      if (efd_ < 0) return fail_errno(errno, "eventfd for the queue's MSI-X vector", ctx);
      if (auto r = d_.dev->set_msix_eventfds(fw::pci::kMsixVectorQueueBase + qid_, std::span<const int>(&efd_, 1));
          !r) {
        return std::unexpected(Error(r.error()).with(ctx));
      }
    }
    bar0_.write32(reg(qr::kReset), qr::kResetQueue.mask());
    return program();
  }

  // ---- hot path ---------------------------------------------------------------------------
  Result<OpHandle> enqueue_copy(DmaAddress src, DmaAddress dst, std::uint32_t length) override {
    if (length == 0 || length > d_.info.max_transfer_bytes) return bad_length(length);
    std::uint8_t fl = 0;
    if (src.space == AddressSpace::kHbm) fl |= dma::flags::kSrcHbm;
    if (dst.space == AddressSpace::kHbm) fl |= dma::flags::kDstHbm;
    return push(dma::Opcode::kCopy, fl, length, src.addr, dst.addr, 0);
  }
  Result<OpHandle> enqueue_fill(DmaAddress dst, std::uint64_t pattern, std::uint32_t length) override {
    if (length == 0 || length > d_.info.max_transfer_bytes) return bad_length(length);
    const std::uint8_t fl = dst.space == AddressSpace::kHbm ? dma::flags::kDstHbm : 0;
    return push(dma::Opcode::kFill, fl, length, pattern, dst.addr, 0);
  }
  Result<OpHandle> enqueue_gather(std::uint64_t sg_list, std::uint16_t count, DmaAddress dst,
                                  std::uint32_t length) override {
    if (length == 0 || length > d_.info.max_transfer_bytes) return bad_length(length);
    if (count == 0 || count > dma::sg::kMaxEntries) {
      return fail(Code::kInvalidArgument, fmt::format("gather of {} entries: need 1..{}", count, dma::sg::kMaxEntries),
                  context());
    }
    const std::uint8_t fl = dst.space == AddressSpace::kHbm ? dma::flags::kDstHbm : 0;
    return push(dma::Opcode::kGather, fl, length, sg_list, dst.addr, count);
  }
  Result<OpHandle> enqueue_remote_write(DmaAddress src, const WindowHandle& dst, std::uint64_t dst_offset,
                                        std::uint32_t length) override {
    if (length == 0 || length > d_.info.max_transfer_bytes) return bad_length(length);
    const std::uint8_t fl = src.space == AddressSpace::kHbm ? dma::flags::kSrcHbm : 0;
    return push_remote(dma::Opcode::kRemoteWrite, fl, length, src.addr, dst_offset, dst);
  }
  Result<OpHandle> enqueue_remote_read(const WindowHandle& src, std::uint64_t src_offset, DmaAddress dst,
                                       std::uint32_t length) override {
    if (length == 0 || length > d_.info.max_transfer_bytes) return bad_length(length);
    const std::uint8_t fl = dst.space == AddressSpace::kHbm ? dma::flags::kDstHbm : 0;
    return push_remote(dma::Opcode::kRemoteRead, fl, length, src_offset, dst.addr, src);
  }
  Result<OpHandle> enqueue_fence() override { return push(dma::Opcode::kFence, dma::flags::kFence, 0, 0, 0, 0); }
  void fence_next_op() noexcept override { fence_next_ = true; }

  Result<void> submit() override {
    if (dead_) return fail(Code::kUnavailable, "card removed", context());
    if (next_ == submitted_) return {};
      // Mmio writes are release operations (backend.hpp); streaming stores additionally need
      // an sfence to be ordered before the doorbell.
#if defined(__x86_64__)
    _mm_sfence();
#endif
    // The card may only be told about CQ space lazily (poll()); make sure it never sees a
    // full CQ because of that.
    if (static_cast<std::uint32_t>(next_ - dev_base_) - cq_head_written_ > depth_) write_cq_head();
    bar0_.write32(reg(qr::kSqTail), static_cast<std::uint32_t>(next_ - dev_base_));
    submitted_ = next_;
    return {};
  }

  std::size_t poll(std::span<OpCompletion> out) noexcept override {
    std::size_t n = 0;
    while (n < out.size() && pending_head_ < pending_count_) out[n++] = pending_[pending_head_++];
    if (pending_head_ == pending_count_) pending_head_ = pending_count_ = 0;
    std::size_t from_card = 0;
    while (n < out.size() && reaped_ < submitted_) {
      const std::byte* c = cq_ + std::size_t{cq_consumed_ & mask_} * dma::cpl::kSize;
      // Start fetching the next lines of completions while this one is decoded (the card's
      // writes left them in another core's cache).
      if ((cq_consumed_ & 3u) == 0) {
        __builtin_prefetch(cq_ + std::size_t{(cq_consumed_ + 4) & mask_} * dma::cpl::kSize);
        __builtin_prefetch(cq_ + std::size_t{(cq_consumed_ + 8) & mask_} * dma::cpl::kSize);
      }
      const bool want = ((cq_consumed_ >> log2_) & 1u) == 0;
      const auto flags =
          __atomic_load_n(reinterpret_cast<const std::uint16_t*>(c + dma::cpl::kFlags), __ATOMIC_ACQUIRE);
      if (((flags & dma::cpl::kPhase) != 0) != want) break;
      OpCompletion& oc = out[n++];
      oc.info = fw::load_le<std::uint64_t>(c, dma::cpl::kInfo);
      oc.status = static_cast<OpStatus>(fw::load_le<std::uint8_t>(c, dma::cpl::kStatus));
      // In-order completion: the SQ index names the op; rebuild the 64-bit handle from it.
      const auto idx = fw::load_le<std::uint32_t>(c, dma::cpl::kSqIndex);
      oc.handle = dev_base_ + ((reaped_ - dev_base_) & ~std::uint64_t{0xffffffff}) + idx;
      ++reaped_;
      ++cq_consumed_;
      ++from_card;
    }
    if (from_card > 0) {
      // CQ_HEAD is one MMIO write; tell the card every quarter ring, not every poll.
      if (cq_consumed_ - cq_head_written_ >= (depth_ >> 2)) write_cq_head();
      empty_polls_ = 0;
      hang_.reset();
    } else if (n == 0 && reaped_ < submitted_) {
      watchdog();
      while (n < out.size() && pending_head_ < pending_count_) out[n++] = pending_[pending_head_++];
    }
    return n;
  }

  Result<void> wait(std::chrono::nanoseconds timeout) override {
    // On the platform clock. Completions come from the engines as fast as they go: a
    // kCardWork deadline, which never moves emulated time (card/deadline.hpp).
    const card::Deadline deadline(*d_.clock, static_cast<std::uint64_t>(std::max<std::int64_t>(timeout.count(), 0)),
                                  card::WaitFor::kCardWork);
    if (ready()) return {};
    if (dead_) return fail(Code::kUnavailable, "card removed", context());
    if (reaped_ == next_) {
      return fail(Code::kFailedPrecondition, "wait() with no op outstanding", context());
    }
    if (reaped_ == submitted_) {
      return fail(Code::kFailedPrecondition, "wait() with ops enqueued but not submitted: call submit()", context());
    }
    for (unsigned spins = 0;; ++spins) {
      if (efd_ >= 0) {
        std::uint64_t cnt = 0;
        [[maybe_unused]] auto rd = ::read(efd_, &cnt, sizeof cnt);  // drain before checking
      }
      if (ready() || watchdog_due()) return {};
      // A removed card reads all-ones: return now so poll() fails the ops (watchdog()).
      if ((spins == 0 || ((spins & 255u) == 0 && removal_check_due())) &&
          bar0_.read32(reg(qr::kStatus)) == 0xffffffffu) {
        empty_polls_ = 0;  // the next empty poll checks the card
        probe_now_ = true;
        return {};
      }
      if (deadline.expired()) {
        return fail(Code::kDeadlineExceeded,
                    fmt::format("no completion within {} us ({} ops outstanding)", timeout.count() / 1000,
                                submitted_ - reaped_),
                    context());
      }
      if (efd_ >= 0) {
        pollfd p{efd_, POLLIN, 0};
        const auto ms = static_cast<int>(std::min<std::uint64_t>((deadline.remaining_ns() + 999'999) / 1'000'000, 100));
        (void)::poll(&p, 1, ms);
      } else if (spins < 2048) {
        cpu_relax();
      } else {
        std::this_thread::yield();
      }
    }
  }

  std::uint64_t outstanding() const noexcept override { return next_ - reaped_ + (pending_count_ - pending_head_); }
  unsigned depth() const noexcept override { return depth_; }
  std::uint64_t resets() const noexcept override { return resets_; }

 private:
  [[nodiscard]] std::uint32_t reg(std::uint32_t r) const noexcept { return regs::queue_reg(qid_, r); }
  void write_cq_head() noexcept {
    bar0_.write32(reg(qr::kCqHead), cq_consumed_);
    cq_head_written_ = cq_consumed_;
  }
  [[nodiscard]] ErrorContext context() const {
    return {
        .card = d_.info.index, .engine = qid_ / d_.info.queues_per_engine, .queue = qid_ % d_.info.queues_per_engine};
  }
  std::unexpected<Error> bad_length(std::uint32_t length) const {
    return fail(Code::kInvalidArgument,
                fmt::format("DMA length {} outside 1..{} bytes", length, d_.info.max_transfer_bytes), context());
  }

  Result<OpHandle> push_remote(dma::Opcode op, std::uint8_t fl, std::uint32_t len, std::uint64_t src, std::uint64_t dst,
                               const WindowHandle& w) {
    return push(op, fl, len, src, dst, 0, &w);
  }

  Result<OpHandle> push(dma::Opcode op, std::uint8_t fl, std::uint32_t len, std::uint64_t src, std::uint64_t dst,
                        std::uint16_t sg, const WindowHandle* w = nullptr) {
    if (fence_next_) {  // fence_next_op(): this op carries the FENCE flag
      fl |= dma::flags::kFence;
      fence_next_ = false;
    }
    if (dead_) return fail(Code::kUnavailable, "card removed", context());
    if (next_ - reaped_ >= depth_) return fail(Code::kResourceExhausted, "queue full", context());
    dma::Descriptor d;
    if (w != nullptr) {
      d.set_remote_card(w->fabric_id);
      d.set_window(w->window_id);
      d.set_generation(w->generation);
      d.set_key(w->key);
    }
    d.set_opcode(op);
    d.set_flags(fl);
    d.set_sg_count(sg);
    d.set_length(len);
    d.set_src(src);
    d.set_dst(dst);
    write_descriptor(sq_ + std::size_t{static_cast<std::uint32_t>(next_ - dev_base_) & mask_} * dma::desc::kSize, d);
    return next_++;
  }

  // Descriptors are written with non-temporal stores on x86-64: the ring line is consumed by
  // the device, not by this CPU, and a streaming store does not wait for the line to be
  // taken back from the device's side (an RFO costs 100+ ns per descriptor otherwise).
  // submit() fences them (sfence) before the doorbell.
  static void write_descriptor(std::byte* slot, const dma::Descriptor& d) noexcept {
#if defined(__x86_64__)
    const auto* s = reinterpret_cast<const __m128i*>(d.raw.data());
    auto* t = reinterpret_cast<__m128i*>(slot);
    _mm_stream_si128(t + 0, _mm_load_si128(s + 0));
    _mm_stream_si128(t + 1, _mm_load_si128(s + 1));
    _mm_stream_si128(t + 2, _mm_load_si128(s + 2));
    _mm_stream_si128(t + 3, _mm_load_si128(s + 3));
#else
    std::memcpy(slot, d.raw.data(), dma::desc::kSize);
#endif
  }

  [[nodiscard]] bool ready() const noexcept {
    if (pending_head_ < pending_count_) return true;
    if (reaped_ >= submitted_) return false;
    const std::byte* c = cq_ + std::size_t{cq_consumed_ & mask_} * dma::cpl::kSize;
    const bool want = ((cq_consumed_ >> log2_) & 1u) == 0;
    const auto flags = __atomic_load_n(reinterpret_cast<const std::uint16_t*>(c + dma::cpl::kFlags), __ATOMIC_ACQUIRE);
    return ((flags & dma::cpl::kPhase) != 0) == want;
  }

  [[nodiscard]] bool watchdog_due() noexcept {
    if (reaped_ >= submitted_) return false;
    // No progress for hang_timeout of platform time (kCardWork: on a virtual clock also
    // hang_timeout of wall time, so a caller that only polls still sees a hang).
    if (!hang_)
      hang_.emplace(*d_.clock, static_cast<std::uint64_t>(opts_.hang_timeout.count()), card::WaitFor::kCardWork);
    if (!hang_->expired()) return false;
    // A queue the power limit holds is slow, not hung (registers.md §5.9): start again.
    // (A removed card reads all-ones: that is not a throttle.)
    const std::uint32_t st = bar0_.read32(reg(qr::kStatus));
    if (st != 0xffffffffu && qr::kStatusThrottled.get(st) != 0) {
      hang_.reset();
      return false;
    }
    return true;
  }

  // Called from poll() when ops are outstanding and none completed. Reads the clock only
  // every 64 empty polls.
  void watchdog() noexcept {
    if ((++empty_polls_ & 63u) != 1u) return;
    if (!watchdog_due()) {
      // A removed card reads all-ones: fail everything now rather than after the timeout.
      if (!removal_check_due() || bar0_.read32(reg(qr::kStatus)) != 0xffffffffu) return;
    }
    recover();
  }

  // The removed-card probe is an MMIO read: free in process, a socket round trip on
  // emu-remote (it wakes the daemon's server thread, which then competes with the engine
  // doing this very transfer). Probe at most once per kRemovalProbeInterval of wall time,
  // and always on the next check after wait() saw the card gone.
  [[nodiscard]] bool removal_check_due() noexcept {
    const auto now = std::chrono::steady_clock::now();
    if (!probe_now_ && now < next_removal_probe_) return false;
    probe_now_ = false;
    next_removal_probe_ = now + kRemovalProbeInterval;
    return true;
  }

  // Hung engine (or removed card): reset the queue, salvage completions the card wrote,
  // complete every other op with kTimeout (submitted) or kAborted (not submitted), re-enable.
  void recover() noexcept {
    const bool removed = bar0_.read32(reg(qr::kStatus)) == 0xffffffffu;
    bar0_.write32(reg(qr::kCtrl), 0);
    bar0_.write32(reg(qr::kReset), qr::kResetQueue.mask());
    pending_head_ = pending_count_ = 0;
    while (reaped_ < submitted_) {  // completions that landed before the reset
      const std::byte* c = cq_ + std::size_t{cq_consumed_ & mask_} * dma::cpl::kSize;
      const bool want = ((cq_consumed_ >> log2_) & 1u) == 0;
      const auto flags =
          __atomic_load_n(reinterpret_cast<const std::uint16_t*>(c + dma::cpl::kFlags), __ATOMIC_ACQUIRE);
      if (((flags & dma::cpl::kPhase) != 0) != want) break;
      pending_[pending_count_++] =
          OpCompletion{reaped_, static_cast<OpStatus>(fw::load_le<std::uint8_t>(c, dma::cpl::kStatus)),
                       fw::load_le<std::uint64_t>(c, dma::cpl::kInfo)};
      ++reaped_;
      ++cq_consumed_;
    }
    const std::uint64_t timed_out = submitted_ - reaped_;
    const std::uint64_t aborted = next_ - submitted_;
    for (; reaped_ < next_; ++reaped_) {
      pending_[pending_count_++] =
          OpCompletion{reaped_, reaped_ < submitted_ ? OpStatus::kTimeout : OpStatus::kAborted, 0};
    }
    submitted_ = next_;
    dev_base_ = next_;
    cq_consumed_ = 0;
    cq_head_written_ = 0;
    std::memset(cq_, 0, std::size_t{depth_} * dma::cpl::kSize);
    ++resets_;
    hang_.reset();
    empty_polls_ = 0;
    auto& lg = npo::log::get(npo::log::Subsystem::kDma);
    if (removed) {
      dead_ = true;
      lg.error("card {} engine {} queue {}: card removed; {} ops failed ({} submitted: timeout, {} not: aborted)",
               d_.info.index, qid_ / d_.info.queues_per_engine, qid_ % d_.info.queues_per_engine, timed_out + aborted,
               timed_out, aborted);
      return;
    }
    lg.warn("card {} engine {} queue {}: no progress for {} ms; queue reset, {} ops timed out, {} aborted",
            d_.info.index, qid_ / d_.info.queues_per_engine, qid_ % d_.info.queues_per_engine,
            opts_.hang_timeout.count() / 1'000'000, timed_out, aborted);
    if (auto r = program(); !r) {
      dead_ = true;
      lg.error("queue re-enable after reset failed: {}", r.error().to_string());
    }
  }

  Result<void> program() {
    bar0_.write64(reg(qr::kSqBase), rings_->iova());
    bar0_.write64(reg(qr::kCqBase), rings_->iova() + cq_off_);
    bar0_.write32(reg(qr::kConfig), qr::kConfigDepthLog2.make(log2_) | qr::kConfigPriority.make(opts_.priority) |
                                        qr::kConfigIrqEnable.make(opts_.mode == CompletionMode::kInterrupt ? 1 : 0));
    bar0_.write32(reg(qr::kCtrl), qr::kCtrlEnable.mask());
    const std::uint32_t st = bar0_.read32(reg(qr::kStatus));
    if (st == 0xffffffffu) return fail(Code::kUnavailable, "card removed", context());
    if (qr::kStatusConfigError.get(st) || !qr::kStatusEnabled.get(st)) {
      return fail(Code::kFailedPrecondition,
                  fmt::format("card refused the queue configuration (QUEUE.STATUS 0x{:x})", st), [&] {
                    auto c = context();
                    c.reg = reg(qr::kStatus);
                    c.value = st;
                    return c;
                  }());
    }
    return {};
  }

  DeviceImpl& d_;
  unsigned qid_;
  QueueOptions opts_;
  backend::Mmio& bar0_;
  std::unique_ptr<MemoryRegion> rings_;
  std::byte* sq_ = nullptr;
  std::byte* cq_ = nullptr;
  std::size_t cq_off_ = 0;
  std::uint32_t depth_ = 0;
  std::uint32_t mask_ = 0;
  unsigned log2_ = 0;
  std::uint64_t next_ = 0;       // handle of the next op to enqueue
  std::uint64_t submitted_ = 0;  // ops covered by a doorbell
  std::uint64_t reaped_ = 0;     // ops handed out by poll (or staged in pending_)
  std::uint64_t dev_base_ = 0;   // handle at SQ index 0
  std::uint32_t cq_consumed_ = 0;
  std::uint32_t cq_head_written_ = 0;  // last CQ_HEAD value told to the card
  bool fence_next_ = false;            // fence_next_op(): flag the next descriptor
  std::vector<OpCompletion> pending_;  // completions staged by recover(), sized depth at open
  std::size_t pending_head_ = 0;
  std::size_t pending_count_ = 0;
  std::uint64_t empty_polls_ = 0;
  static constexpr std::chrono::microseconds kRemovalProbeInterval{500};
  std::chrono::steady_clock::time_point next_removal_probe_{};  ///< see removal_check_due()
  bool probe_now_ = false;
  std::optional<card::Deadline> hang_;  ///< armed at the first empty poll, cleared on progress
  std::uint64_t resets_ = 0;
  bool dead_ = false;
  int efd_ = -1;
};

}  // namespace

Result<std::unique_ptr<DmaQueue>> Device::open_queue(const QueueOptions& options) {
  auto& d = *impl_;
  const ErrorContext ctx{.card = d.info.index, .engine = options.engine};
  if (d.info.read_only) return read_only_refusal(d.info, "opening a DMA queue");
  if (options.engine >= d.info.num_engines) {
    return fail(Code::kInvalidArgument, fmt::format("engine {} outside 0..{}", options.engine, d.info.num_engines - 1),
                ctx);
  }
  const auto caps = dma_capabilities();
  if (!std::has_single_bit(options.depth) || options.depth < caps.min_depth || options.depth > caps.max_depth) {
    return fail(
        Code::kInvalidArgument,
        fmt::format("queue depth {} must be a power of two in {}..{}", options.depth, caps.min_depth, caps.max_depth),
        ctx);
  }
  if (options.priority > 7) {
    return fail(Code::kInvalidArgument, fmt::format("queue priority {} outside 0..7", options.priority), ctx);
  }
  if (options.hang_timeout.count() <= 0) return fail(Code::kInvalidArgument, "hang_timeout must be positive", ctx);
  unsigned qid = 0;
  {
    std::lock_guard lock(d.queues_mu);
    const unsigned first = options.engine * d.info.queues_per_engine;
    unsigned q = 0;
    while (q < d.info.queues_per_engine && d.queue_open[first + q]) ++q;
    if (q == d.info.queues_per_engine) {
      return fail(Code::kResourceExhausted,
                  fmt::format("all {} queues of engine {} are open", d.info.queues_per_engine, options.engine), ctx);
    }
    qid = first + q;
    d.queue_open[qid] = true;
  }
  auto q = std::make_unique<QueueImpl>(d, qid, options);
  if (auto r = q->init(*this); !r) return std::unexpected(r.error());  // ~QueueImpl releases the slot
  return std::unique_ptr<DmaQueue>(std::move(q));
}

}  // namespace npo
