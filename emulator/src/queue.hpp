// SPDX-License-Identifier: Apache-2.0
// Emulator internals: the DMA engines -- one QueueModel per queue (submission and completion
// ring in host memory, registers.md §5, docs/spec/dma.md). Implemented in engine.cpp; a queue
// reaches its card and the fabric through its EngineHost and the shared FabricState (remote-op
// routing, registers.md §8: FabricState::route_reachable).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

#include "engine_host.hpp"
#include "iommu.hpp"
#include "npo/fw/dma.hpp"
#include "npo/fw/regs.hpp"
#include "sched.hpp"

namespace npo::emu {

/// One DMA queue (submission + completion ring) of one engine. Its registers and state live in
/// the shared QueueState (shared_state.hpp), so several QueueModels -- one per process that may
/// run the engine, each with its own EngineHost -- can drive one queue; its QueueLock makes the
/// batches and configuration changes of all of them take turns.
class QueueModel final : public Runnable {
 public:
  QueueModel(EngineHost& host, QueueState& st, unsigned index) : host_(host), st_(st), index_(index) {}
  bool run_once() override;
  [[nodiscard]] bool has_work() const noexcept override;

  // Register access (BAR0 queue block).
  std::uint64_t read(std::uint32_t reg, unsigned width);
  void write(std::uint32_t reg, unsigned width, std::uint64_t value);
  /// Returns the queue to its reset state (card reset). Waits for a running batch.
  void reset_state();
  /// Fault injection.
  void inject_hang(std::uint64_t now);
  void inject_completion_errors(std::uint32_t count) { st_.inject_errors.fetch_add(count); }
  /// Returns once no batch is running (a batch started after CardState::kDmaStopped is set
  /// writes nothing).
  void quiesce() {
    st_.lock.lock(host_.lock_tag());
    st_.lock.unlock();
  }
  /// Runs batches on the calling thread until the queue has no runnable work, unless another
  /// thread or process is running it (then that one sees the new work: the check after its
  /// unlock). What an owner's doorbell does when it runs its own card's engines.
  void run_inline();
  /// The window a batch stopped at (EngineHost::WindowAccess::kImport) is imported, or refused:
  /// the queue has work again. Thread-safety: any thread; run_inline() after it.
  void import_done() noexcept { import_blocked_.store(false, std::memory_order_seq_cst); }
  [[nodiscard]] bool hung() const noexcept { return st_.hung.load() != 0; }
  [[nodiscard]] bool pending() const noexcept;
  [[nodiscard]] std::uint64_t hung_since() const noexcept { return st_.hung_since.load(); }
  [[nodiscard]] std::uint32_t sq_head() const noexcept { return st_.sq_head.load(); }
  [[nodiscard]] unsigned index() const noexcept { return index_; }
  /// Card reset: OPS_OK, OPS_ERROR and BYTES (registers.md §9) back to 0. Neither a queue
  /// reset nor reset_state() clears them.
  void reset_counters() noexcept;

 private:
  void queue_reset_locked();
  /// Both rings back to index 0 with nothing pending, COMPLETED and ERR cleared (registers.md
  /// §5.2: enable; a queue reset). Under st_.lock.
  void restart_rings() noexcept;
  /// One batch of up to 64 descriptors, under st_.lock: true when more work is runnable now.
  bool run_batch_locked();
  /// Executes one descriptor; returns status and info.
  fw::dma::Status execute(const fw::dma::Descriptor& d, std::uint64_t* info);
  /// REMOTE_WRITE / REMOTE_READ through a window of another card (registers.md §8, §6).
  fw::dma::Status remote(const fw::dma::Descriptor& d, std::uint64_t* info);
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

  EngineHost& host_;
  QueueState& st_;
  unsigned index_;
  /// Translations of the running batch (used under st_.lock; cleared when run_once takes the
  /// IOMMU guard, so an unmap between batches is always seen). This process's own.
  IommuCache xlate_;
  /// Set by remote() when the op's window is not imported in this process yet: the batch
  /// stops before the op (under st_.lock).
  bool import_wait_ = false;
  /// The queue waits for its host to import a window (import_wait_): no work until
  /// import_done(). This process's own.
  std::atomic<bool> import_blocked_{false};
};

}  // namespace npo::emu
