// SPDX-License-Identifier: Apache-2.0
// npo-hal public API: DmaQueue -- one submission/completion queue pair of a card's DMA
// engine (docs/spec/dma.md). Status: declared; the implementation arrives with the DMA
// issue, until then Device::open_queue returns kUnimplemented.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>

#include "npo/hal/error.hpp"

namespace npo {

class MemoryRegion;

/// How completions are noticed.
enum class CompletionMode : std::uint8_t {
  kPolled,     ///< the caller polls; no interrupt
  kInterrupt,  ///< MSI-X per completion batch; wait() blocks on the queue's eventfd
};

/// Options of Device::open_queue.
struct QueueOptions {
  unsigned engine = 0;              ///< 0 .. num_engines-1
  unsigned depth = 256;             ///< descriptors, power of two, 4 .. 65536
  unsigned priority = 0;            ///< traffic class 0 (lowest) .. 7
  CompletionMode mode = CompletionMode::kPolled;
};

/// Status of one completed op (docs/spec/dma.md §3.2); mirrors npo::fw::dma::Status.
enum class OpStatus : std::uint8_t {
  kOk = 0x00, kBadOpcode = 0x01, kBadDescriptor = 0x02, kIommuFault = 0x03, kIommuPermission = 0x04,
  kHbmRange = 0x05, kSgError = 0x06, kFenceSkipped = 0x07, kRemoteUnreachable = 0x08,
  kWindowInvalid = 0x09, kWindowKey = 0x0a, kWindowRange = 0x0b, kWindowRights = 0x0c,
  kWindowRevoked = 0x0d, kEngineError = 0x0e, kTimeout = 0x80, kAborted = 0x81,
};

/// Identifies an op inside its queue: a 64-bit sequence number, never reused.
using OpHandle = std::uint64_t;

/// One completion as returned by poll().
struct OpCompletion {
  OpHandle handle = 0;
  OpStatus status = OpStatus::kOk;
  std::uint64_t info = 0;  ///< bytes moved on success; fault address on kIommuFault etc.
};

/// Where a DMA address points.
enum class AddressSpace : std::uint8_t { kHostIova, kHbm };

/// A DMA address: a host IOVA (from a registered MemoryRegion) or an HBM offset.
struct DmaAddress {
  AddressSpace space = AddressSpace::kHostIova;
  std::uint64_t addr = 0;
};

/// A single-producer DMA queue. enqueue_* write descriptors into the ring without touching
/// the device; submit() rings the doorbell once for everything enqueued; poll() reaps
/// completions. No locks, heap allocations or system calls on enqueue/submit/poll.
/// Thread-safety: one thread at a time per queue (single producer, single consumer).
class DmaQueue {
 public:
  virtual ~DmaQueue() = default;
  /// Enqueues a copy of `length` bytes. Errors: kResourceExhausted (ring full: poll first),
  /// kInvalidArgument (length 0 or > max transfer).
  virtual Result<OpHandle> enqueue_copy(DmaAddress src, DmaAddress dst, std::uint32_t length) = 0;
  /// Enqueues a fill of `length` bytes with the repeated 8-byte `pattern`. Errors as copy.
  virtual Result<OpHandle> enqueue_fill(DmaAddress dst, std::uint64_t pattern, std::uint32_t length) = 0;
  /// Enqueues a fence: completes after every earlier op; later ops start after it.
  virtual Result<OpHandle> enqueue_fence() = 0;
  /// Rings the doorbell for all enqueued ops. Errors: kFailedPrecondition (queue halted or reset).
  virtual Result<void> submit() = 0;
  /// Writes up to out.size() completions, oldest first; returns how many. Never blocks.
  virtual std::size_t poll(std::span<OpCompletion> out) noexcept = 0;
  /// Blocks until a completion is available or `timeout` passes (kInterrupt mode: on the
  /// eventfd; kPolled: polling). Errors: kDeadlineExceeded.
  virtual Result<void> wait(std::chrono::nanoseconds timeout) = 0;
};

}  // namespace npo
