// SPDX-License-Identifier: Apache-2.0
// drivers/card: per-card memory bookkeeping -- the IOVA allocator, pinned/IOVA budgets and
// the HBM allocator. Each is a plain first-fit allocator over a sorted free map.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "npo/hal/backend/backend.hpp"
#include "npo/hal/memory.hpp"

namespace npo::card {

/// First-fit range allocator over [first, last] ranges, with alignment. Thread-safe.
class RangeAllocator {
 public:
  void add_range(std::uint64_t first, std::uint64_t last);
  /// Returns the start of a free block of `size` bytes aligned to `align`, or nullopt.
  std::optional<std::uint64_t> alloc(std::uint64_t size, std::uint64_t align);
  /// Frees [start, start+size); returns false if it was not allocated exactly so.
  bool free(std::uint64_t start, std::uint64_t size);
  struct Stats {
    std::uint64_t free = 0, largest_free = 0, free_blocks = 0, allocations = 0;
  };
  [[nodiscard]] Stats stats() const;

 private:
  mutable std::mutex mu_;
  std::map<std::uint64_t, std::uint64_t> free_;  // start -> size
  std::map<std::uint64_t, std::uint64_t> used_;  // start -> size
};

/// Per-card memory state.
struct MemoryState {
  RangeAllocator iova;
  RangeAllocator hbm;
  std::uint64_t hbm_total = 0;
  std::atomic<std::uint64_t> pinned_limit{8ULL << 30};
  std::atomic<std::uint64_t> iova_limit{256ULL << 30};
  std::atomic<std::uint64_t> pinned_used{0};
  std::atomic<std::uint64_t> iova_used{0};
  /// The process memory maps (map_process_memory) in use, read-only [0] and writable [1]:
  /// every caller shares one (the IOVA space holds one 128 TiB map). Guarded by process_mu.
  std::mutex process_mu;
  std::weak_ptr<ProcessMemoryMap> process_maps[2];
};

/// Maps `bytes` (page-aligned start and length) for `dev`: accounts the budgets, allocates
/// an IOVA, calls dma_map. On error nothing stays allocated. Returns the IOVA.
Result<std::uint64_t> map_for_dma(backend::Device& dev, MemoryState& mem, std::uint32_t card, const void* start,
                                  std::uint64_t length, backend::DmaAccess access);
/// Undoes map_for_dma.
void unmap_for_dma(backend::Device& dev, MemoryState& mem, std::uint64_t iova, std::uint64_t length);

}  // namespace npo::card
