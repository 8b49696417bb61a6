// SPDX-License-Identifier: Apache-2.0
// Emulator internals: the DMA engines -- one QueueModel per queue (submission and completion
// ring in host memory, registers.md §5, docs/spec/dma.md) -- and remote-op routing
// (registers.md §8). Implemented in engine.cpp; a queue reaches the rest of the card
// (IOMMU, HBM, windows, errors, MSI-X, ports) through Card's public calls.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

#include "iommu.hpp"
#include "npo/fw/dma.hpp"
#include "npo/fw/regs.hpp"
#include "sched.hpp"

namespace npo::emu {

class Card;

/// One DMA queue (submission + completion ring) of one engine.
class QueueModel final : public Runnable {
 public:
  QueueModel(Card& card, unsigned index) : card_(card), index_(index) {}
  bool run_once() override;
  [[nodiscard]] bool has_work() const noexcept override;

  // Register access (BAR0 queue block).
  std::uint64_t read(std::uint32_t reg, unsigned width);
  void write(std::uint32_t reg, unsigned width, std::uint64_t value);
  /// Returns the queue to its reset state (card reset). Waits for a running batch.
  void reset_state();
  /// Fault injection.
  void inject_hang(std::uint64_t now);
  void inject_completion_errors(std::uint32_t count) { inject_errors_.fetch_add(count); }
  /// Returns once no batch is running (a batch started after Card::dma_stopped() is set
  /// writes nothing).
  void quiesce() { std::lock_guard lock(mu_); }
  [[nodiscard]] bool hung() const noexcept { return hung_.load(); }
  [[nodiscard]] bool pending() const noexcept;
  [[nodiscard]] std::uint64_t hung_since() const noexcept { return hung_since_.load(); }
  [[nodiscard]] std::uint32_t sq_head() const noexcept { return sq_head_.load(); }
  /// Card reset: OPS_OK, OPS_ERROR and BYTES (registers.md §9) back to 0. Neither a queue
  /// reset nor reset_state() clears them.
  void reset_counters() noexcept;

 private:
  void queue_reset_locked();
  /// Executes one descriptor; returns status and info.
  fw::dma::Status execute(const fw::dma::Descriptor& d, std::uint64_t* info);
  /// FILL of host memory at `dst` (out of line: its 4 KiB pattern buffer stays off the
  /// stack frame of every other op).
  [[gnu::noinline]] fw::dma::Status fill_host(std::uint64_t dst, std::uint32_t len, std::uint64_t pattern,
                                              std::uint64_t* info);
  /// GATHER (out of line, like fill_host: its SG list buffer).
  [[gnu::noinline]] fw::dma::Status gather(const fw::dma::Descriptor& d, std::uint64_t* info);
  /// Checks that [iova, iova+len) is mapped for the access; records the first fault.
  fw::dma::Status check_range(std::uint64_t iova, std::uint64_t len, bool write, std::uint64_t* info,
                              bool data = false);
  /// Copies between host memory at `iova` and `local` through the IOMMU. `ring`: a
  /// descriptor fetch (injected IOMMU faults apply to data accesses only).
  fw::dma::Status host_access(std::uint64_t iova, std::uint64_t len, bool write, bool ring, std::byte* local,
                              std::uint64_t* info);

  // Members are grouped by who writes them, one cache line per group, so the host's doorbell
  // (SQ_TAIL write: reads the configuration and SQ_HEAD) and the engine's per-op stores do
  // not pull each other's lines back and forth more than the handshake itself needs.
  Card& card_;
  unsigned index_;
  // Configuration and state, written rarely (enable, reset, faults); read on every doorbell.
  alignas(64) std::uint64_t sq_base_ = 0;
  std::uint64_t cq_base_ = 0;
  std::atomic<std::uint32_t> config_snapshot_{0};
  std::atomic<std::uint32_t> status_{fw::regs::queue::kStatusIdle.mask()};
  std::atomic<bool> enabled_{false};
  std::atomic<bool> hung_{false};
  std::atomic<bool> active_{false};  ///< this queue's GLOBAL.QUEUES_ACTIVE bit is set
  std::atomic<std::uint64_t> hung_since_{0};
  std::atomic<std::uint32_t> inject_errors_{0};
  // Written by the host (doorbells).
  alignas(64) std::atomic<std::uint32_t> sq_tail_{0};
  std::atomic<std::uint32_t> cq_head_{0};
  // Written by the engine as it completes ops.
  alignas(64) std::atomic<std::uint32_t> sq_head_{0};
  std::atomic<std::uint32_t> cq_tail_{0};
  std::atomic<std::uint32_t> err_{0};
  std::atomic<std::uint64_t> completed_{0};
  // Activity counters (registers.md §9): monotonic from card reset, saturating, updated once
  // per batch with relaxed adds (run_once).
  std::atomic<std::uint64_t> ops_ok_{0};
  std::atomic<std::uint64_t> ops_error_{0};
  std::atomic<std::uint64_t> bytes_{0};
  // The engine's own: taken for every batch.
  alignas(64) std::mutex mu_;        // config and processing
  bool failed_since_fence_ = false;  ///< the failure latch of registers.md §5.7 (guarded by mu_)
  /// Translations of the running batch (guarded by mu_; cleared when run_once takes the
  /// IOMMU guard, so an unmap between batches is always seen).
  IommuCache xlate_;
};

/// Remote-op routing (registers.md §8): walks from `src` towards fabric ID `dst_fid` over Up
/// links, following each card's route table (ECMP member chosen by a flow hash of source,
/// destination and `queue`), or a direct link where a card has no entry. False when no Up
/// path exists within kMaxHops (a missing entry, a down link, or a routing loop).
bool route_reachable(Card& src, std::uint32_t dst_fid, unsigned queue);

}  // namespace npo::emu
