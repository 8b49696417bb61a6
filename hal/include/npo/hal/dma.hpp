// SPDX-License-Identifier: Apache-2.0
// npo-hal public API: DmaQueue -- one submission/completion queue pair of a card's DMA
// engine (docs/spec/dma.md, docs/spec/registers.md §5).
//
// Model: enqueue_* write 64-byte descriptors into the queue's submission ring in host
// memory without touching the device; submit() rings the SQ_TAIL doorbell once for all of
// them; poll() reaps 16-byte completions (phase bit) and returns one OpCompletion per op,
// in submission order, each with its own status. Nothing on enqueue/submit/poll takes a
// lock, allocates, or makes a system call.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string_view>

#include "npo/hal/error.hpp"

namespace npo {

struct WindowHandle;

/// How completions are noticed.
enum class CompletionMode : std::uint8_t {
  kPolled,     ///< the caller polls; wait() spins (yielding) on the completion ring
  kInterrupt,  ///< the queue's MSI-X vector is routed to an eventfd; wait() blocks on it
};

/// Options of Device::open_queue.
struct QueueOptions {
  unsigned engine = 0;    ///< 0 .. num_engines-1
  unsigned depth = 256;   ///< ring entries, power of two, 4 .. 65536
  unsigned priority = 0;  ///< traffic class 0 (lowest) .. 7
  CompletionMode mode = CompletionMode::kPolled;
  /// An op outstanding this long without any completion of the queue means a hung engine:
  /// poll() resets the queue and completes every op in flight with OpStatus::kTimeout.
  /// Measured on the platform clock (System::clock()); on the emulator's virtual clock,
  /// whose engines run in wall time, it also passes after this much wall time, so a caller
  /// that only polls sees a hang without moving emulated time. A queue the card throttles
  /// to its power limit (QUEUE.STATUS.THROTTLED, registers.md §5.9) is slow, not hung: the
  /// window starts again while it is throttled.
  std::chrono::nanoseconds hang_timeout = std::chrono::seconds(1);
};

/// Status of one completed op (docs/spec/dma.md §3.2); mirrors npo::fw::dma::Status.
enum class OpStatus : std::uint8_t {
  kOk = 0x00,
  kBadOpcode = 0x01,
  kBadDescriptor = 0x02,
  kIommuFault = 0x03,       ///< info = faulting IOVA
  kIommuPermission = 0x04,  ///< info = faulting IOVA
  kHbmRange = 0x05,         ///< info = HBM offset
  kSgError = 0x06,
  kFenceSkipped = 0x07,  ///< fenced op not run because an earlier op failed
  kRemoteUnreachable = 0x08,
  kWindowInvalid = 0x09,
  kWindowKey = 0x0a,
  kWindowRange = 0x0b,
  kWindowRights = 0x0c,
  kWindowRevoked = 0x0d,
  kEngineError = 0x0e,
  kPartitionDenied = 0x0f,  ///< the target card is in another partition; info = remote card (dma.md §3.2)
  kTimeout = 0x80,          ///< driver: the engine hung with the op in flight; the queue was reset
  kAborted = 0x81,          ///< driver: enqueued but not yet submitted when the queue was reset
};
/// Stable lower-case name, e.g. "iommu_fault".
[[nodiscard]] std::string_view op_status_name(OpStatus s) noexcept;

/// Identifies an op: the queue's 64-bit sequence number, never reused.
using OpHandle = std::uint64_t;

/// One completion as returned by poll().
struct OpCompletion {
  OpHandle handle = 0;
  OpStatus status = OpStatus::kOk;
  std::uint64_t info = 0;  ///< bytes moved on success; fault address etc. on error (dma.md §3.2)
};

/// Where a DMA address points.
enum class AddressSpace : std::uint8_t { kHostIova, kHbm };

/// A DMA address: a host IOVA (MemoryRegion::iova() + offset) or an HBM offset.
struct DmaAddress {
  AddressSpace space = AddressSpace::kHostIova;
  std::uint64_t addr = 0;
  [[nodiscard]] static constexpr DmaAddress host(std::uint64_t iova) noexcept {
    return {AddressSpace::kHostIova, iova};
  }
  [[nodiscard]] static constexpr DmaAddress hbm(std::uint64_t offset) noexcept { return {AddressSpace::kHbm, offset}; }
};

/// One scatter-gather entry as the card reads it (docs/spec/dma.md §2.4): 16 bytes.
struct SgEntry {
  std::uint64_t iova = 0;
  std::uint32_t length = 0;
  std::uint32_t reserved = 0;
};
static_assert(sizeof(SgEntry) == 16);

/// What the card's DMA engines can do (in the spirit of DPDK's rte_dma_info).
struct DmaCapabilities {
  bool copy = false, fill = false, gather = false, fence = false, remote_write = false, remote_read = false;
  std::uint32_t max_transfer_bytes = 0;   ///< per descriptor
  std::uint32_t alignment = 1;            ///< required address/length alignment, bytes
  unsigned min_depth = 0, max_depth = 0;  ///< ring entries
  unsigned engines = 0, queues_per_engine = 0;
  unsigned max_sg_entries = 0;
};

/// A single-producer DMA queue.
/// Thread-safety: one thread at a time per queue (it is both the producer and the consumer);
/// different queues may be used from different threads concurrently.
class DmaQueue {
 public:
  virtual ~DmaQueue() = default;

  /// Enqueues a copy of `length` bytes (1 .. max_transfer_bytes) from `src` to `dst`.
  /// Errors: kResourceExhausted when the ring holds `depth` ops not yet reaped (poll first);
  /// kInvalidArgument for a zero or oversized length; kUnavailable once the queue found its
  /// card removed (every op it held then completed with kTimeout or kAborted). Nothing is
  /// enqueued on error.
  virtual Result<OpHandle> enqueue_copy(DmaAddress src, DmaAddress dst, std::uint32_t length) = 0;
  /// Enqueues a fill of `length` bytes at `dst` with the little-endian 8-byte `pattern`
  /// repeated. Errors as enqueue_copy.
  virtual Result<OpHandle> enqueue_fill(DmaAddress dst, std::uint64_t pattern, std::uint32_t length) = 0;
  /// Enqueues a gather: `count` (1..256) SgEntry records at host IOVA `sg_list` are copied,
  /// in order, to contiguous `dst`; their lengths must sum to `length` (else the op completes
  /// with kSgError). Errors as enqueue_copy.
  virtual Result<OpHandle> enqueue_gather(std::uint64_t sg_list, std::uint16_t count, DmaAddress dst,
                                          std::uint32_t length) = 0;
  /// Enqueues a remote write of `length` bytes from local `src` into window `dst` at
  /// `dst_offset`, routed over the fabric to the window's card (a card's own windows work
  /// too). The owner card checks key, range, rights and generation: a failed check completes
  /// the op with kWindowKey / kWindowRange / kWindowRights / kWindowRevoked / kWindowInvalid,
  /// an unreachable card with kRemoteUnreachable; no byte moves. Errors as enqueue_copy.
  virtual Result<OpHandle> enqueue_remote_write(DmaAddress src, const WindowHandle& dst, std::uint64_t dst_offset,
                                                std::uint32_t length) = 0;
  /// Enqueues a remote read of `length` bytes from window `src` at `src_offset` into local
  /// `dst`. Checks and errors as enqueue_remote_write.
  virtual Result<OpHandle> enqueue_remote_read(const WindowHandle& src, std::uint64_t src_offset, DmaAddress dst,
                                               std::uint32_t length) = 0;
  /// Enqueues a fence: it completes after every earlier op of the queue, and completes with
  /// kFenceSkipped if one of them failed since the previous fence.
  virtual Result<OpHandle> enqueue_fence() = 0;
  /// Marks the next op enqueued as fenced (the descriptor's FENCE flag, registers.md §5.7): it
  /// starts only after every earlier op completed, and completes with kFenceSkipped, moving
  /// nothing, if any of them failed since the previous fence. Unlike enqueue_fence(), which is
  /// an op of its own (the op after it runs regardless), this guards that op itself: write a
  /// message's payload, then its header fenced, and no header lands over a payload that did
  /// not. Cleared by the next enqueue (also one that fails).
  virtual void fence_next_op() noexcept = 0;
  /// Rings the doorbell once for every op enqueued since the last submit. Cheap when there
  /// is nothing new. Errors: kUnavailable if the card was removed.
  virtual Result<void> submit() = 0;
  /// Writes up to out.size() completions, oldest first, and returns how many. Never blocks.
  /// Also the hang watchdog: when ops are outstanding and the queue made no progress for
  /// QueueOptions::hang_timeout, the queue is reset and those ops complete with kTimeout.
  virtual std::size_t poll(std::span<OpCompletion> out) noexcept = 0;
  /// Blocks until at least one completion can be polled or `timeout` passes (platform clock;
  /// on a virtual clock also wall time: waiting never moves emulated time, as the engines
  /// run in wall time). Returns early when the card is found removed: the next poll()
  /// completes every outstanding op (kTimeout / kAborted).
  /// Errors: kDeadlineExceeded; kUnavailable (the queue already found its card removed).
  virtual Result<void> wait(std::chrono::nanoseconds timeout) = 0;

  /// Ops enqueued and not yet reaped by poll().
  [[nodiscard]] virtual std::uint64_t outstanding() const noexcept = 0;
  [[nodiscard]] virtual unsigned depth() const noexcept = 0;
  /// Times the driver reset this queue after a hang.
  [[nodiscard]] virtual std::uint64_t resets() const noexcept = 0;
};

}  // namespace npo
