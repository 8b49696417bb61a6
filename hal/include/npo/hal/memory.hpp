// SPDX-License-Identifier: Apache-2.0
// npo-hal public API: memory the cards can reach.
//  - MemoryRegion: host memory pinned and mapped through the IOMMU for one card's DMA.
//  - HBM ranges: device memory allocated on a card.
//  - Budgets: pinned bytes and IOVA space are accounted per card against limits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "npo/hal/error.hpp"

namespace npo {

class Device;

/// Where a region's pages came from.
enum class PageKind : std::uint8_t {
  kHugetlb,          ///< hugetlbfs 2 MiB pages (memfd MFD_HUGETLB)
  kTransparentHuge,  ///< anonymous memory with MADV_HUGEPAGE
  kSmall,            ///< 4 KiB pages
  kUser,             ///< caller's memory (register_host_memory)
};

/// Host memory the card can reach by DMA at iova() .. iova()+size()-1.
/// Thread-safety: immutable after creation. Destroying it unmaps it from the IOMMU and
/// unpins it; the caller must have no DMA in flight to it (in-flight device accesses
/// complete first: the unmap waits for them).
class MemoryRegion {
 public:
  virtual ~MemoryRegion() = default;
  [[nodiscard]] virtual std::span<std::byte> bytes() noexcept = 0;  ///< CPU view, size() bytes
  [[nodiscard]] virtual std::uint64_t iova() const noexcept = 0;    ///< device view of bytes()[0]
  [[nodiscard]] virtual std::size_t size() const noexcept = 0;      ///< bytes
  [[nodiscard]] virtual PageKind page_kind() const noexcept = 0;
  [[nodiscard]] virtual int numa_node() const noexcept = 0;  ///< node the pages were bound to; -1 unknown
};

/// Allocates `size` bytes (rounded up to 4 KiB, or 2 MiB for hugepages) of DMA-able host
/// memory for `device`, mapped read/write. Tries hugetlbfs pages first, then transparent
/// huge pages, then 4 KiB pages (logging one note per process the first time it falls
/// back); binds the pages to the card's NUMA node with libnuma when the node exists.
/// Errors: kInvalidArgument (size 0); kResourceExhausted naming the budget that is full
/// ("pinned-memory budget" or "IOVA budget") or when the host is out of memory.
Result<std::unique_ptr<MemoryRegion>> allocate_host_memory(Device& device, std::size_t size);

/// Registers caller-owned memory: pins it (mlock) and IOMMU-maps the 4 KiB pages that cover
/// it. `bytes` must stay valid while the region lives; iova() corresponds to bytes()[0]
/// (keeping its offset within the page). `writable`: whether the card may write it.
/// Errors: kInvalidArgument (empty span); kResourceExhausted (budgets, mlock limit).
Result<std::unique_ptr<MemoryRegion>> register_host_memory(Device& device, std::span<std::byte> bytes,
                                                           bool writable = true);

/// This process's user address space, [4 KiB, 128 TiB), mapped for one card's DMA in one
/// piece without pinning or sharing it (backend::Device::dma_map_process): the card reaches
/// virtual address p at iova_of(p), whatever the process has mapped there at the time of the
/// access; an address it has not mapped (or a write to read-only memory) completes the op
/// IOMMU_FAULT and touches nothing else. A zero-copy data path uses it to DMA from and to any
/// user buffer with no registration per buffer (drivers/libfabric: rendezvous sources). It
/// costs no pinned-memory or IOVA budget. Not for rings and completion queues (they fault).
/// Thread-safety: immutable; destroying it unmaps the range (no DMA to it may be in flight).
class ProcessMemoryMap {
 public:
  virtual ~ProcessMemoryMap() = default;
  /// IOVA of virtual address `p`; 0 (never mapped: always a fault) outside the mapped range.
  [[nodiscard]] virtual std::uint64_t iova_of(const void* p) const noexcept = 0;
  [[nodiscard]] virtual bool writable() const noexcept = 0;  ///< the card may write too
};

/// Maps this process's address space for `device` (see ProcessMemoryMap), read-only unless
/// `writable`. All callers on one device share one map of the kind they ask for (the last one
/// destroyed unmaps it); the IOVA space holds one, so a read-only and a writable map cannot
/// be in use at the same time (kResourceExhausted). Thread-safety: safe from any thread. Offered by the emulator
/// backends only (npo-emud reads the client with process_vm_readv: emud-protocol.md §5.2 "Process memory"). Errors:
/// kUnimplemented (VFIO: a real IOMMU maps pinned pages; use register_host_memory), kPermissionDenied (npo-emud may not
/// read this process: ptrace rules), kResourceExhausted (no 128 TiB hole left in the card's IOVA space), kUnavailable
/// (card removed, daemon gone), kFailedPrecondition (npo-emud: the connection was opened by another process, e.g. the
/// parent of a forked child).
Result<std::unique_ptr<ProcessMemoryMap>> map_process_memory(Device& device, bool writable = false);

/// Per-card accounting of host memory registered for DMA.
struct MemoryBudget {
  std::uint64_t pinned_limit = 0;  ///< bytes
  std::uint64_t pinned_used = 0;   ///< bytes
  std::uint64_t iova_limit = 0;    ///< bytes of IOVA space
  std::uint64_t iova_used = 0;     ///< bytes
};
/// Current budget figures of `device`. Thread-safety: safe from any thread.
[[nodiscard]] MemoryBudget memory_budget(Device& device);
/// Changes the limits (0 keeps a limit unchanged). Lowering below current use is allowed
/// and only blocks new registrations. Thread-safety: safe from any thread.
void set_memory_limits(Device& device, std::uint64_t pinned_limit, std::uint64_t iova_limit);

/// A range of a card's HBM.
struct HbmRange {
  std::uint64_t offset = 0;  ///< bytes from the start of HBM
  std::uint64_t size = 0;    ///< bytes
};

/// Allocates `size` bytes of HBM aligned to `alignment` (a power of two >= 64).
/// First fit over a sorted free list. Errors: kInvalidArgument (size 0, bad alignment);
/// kResourceExhausted ("HBM: no free block of N bytes aligned to A; largest free block M").
/// Thread-safety: safe from any thread.
Result<HbmRange> allocate_hbm(Device& device, std::uint64_t size, std::uint64_t alignment = 4096);
/// Frees a range returned by allocate_hbm. Errors: kNotFound if it is not an allocated range.
Result<void> free_hbm(Device& device, HbmRange range);

/// HBM allocator statistics.
struct HbmStats {
  std::uint64_t total = 0;         ///< bytes of HBM
  std::uint64_t used = 0;          ///< bytes allocated
  std::uint64_t free = 0;          ///< bytes not allocated
  std::uint64_t largest_free = 0;  ///< largest free block, bytes
  std::uint64_t free_blocks = 0;   ///< number of free blocks
  std::uint64_t allocations = 0;   ///< live allocations
  /// 1 - largest_free / free (0 = one free block, -> 1 = free space in crumbs); 0 when free == 0.
  double fragmentation = 0;
};
[[nodiscard]] HbmStats hbm_stats(Device& device);

}  // namespace npo
