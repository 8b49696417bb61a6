// SPDX-License-Identifier: Apache-2.0
// npo-hal public API: MemoryRegion -- host memory registered for DMA (pinned and mapped
// through the IOMMU). Status: declared; implemented by the DMA issue. Until then the
// functions below return kUnimplemented.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "npo/hal/error.hpp"

namespace npo {

class Device;

/// Where a region's pages came from.
enum class PageKind : std::uint8_t { kHugetlb2M, kTransparentHuge, kSmall4K, kUser };

/// Host memory the card can reach by DMA at iova() .. iova()+size()-1.
/// Thread-safety: immutable after creation; destruction unmaps (callers ensure no DMA is in flight).
class MemoryRegion {
 public:
  virtual ~MemoryRegion() = default;
  [[nodiscard]] virtual std::span<std::byte> bytes() noexcept = 0;  ///< CPU view
  [[nodiscard]] virtual std::uint64_t iova() const noexcept = 0;     ///< device view
  [[nodiscard]] virtual std::size_t size() const noexcept = 0;       ///< bytes
  [[nodiscard]] virtual PageKind page_kind() const noexcept = 0;
  [[nodiscard]] virtual int numa_node() const noexcept = 0;          ///< -1 unknown
};

/// Allocates `size` bytes of DMA-able host memory for `device`: hugetlbfs pages, else THP,
/// else 4 KiB pages; on the card's NUMA node. Errors: kResourceExhausted (pinned-bytes or
/// IOVA budget, naming it), kUnimplemented (not built yet).
Result<std::unique_ptr<MemoryRegion>> allocate_host_memory(Device& device, std::size_t size);

/// Registers caller-owned memory (pins and IOMMU-maps it). `bytes` must stay valid while the
/// region lives. Errors: kInvalidArgument (empty), kResourceExhausted, kUnimplemented.
Result<std::unique_ptr<MemoryRegion>> register_host_memory(Device& device, std::span<std::byte> bytes);

}  // namespace npo
