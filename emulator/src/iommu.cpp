// SPDX-License-Identifier: Apache-2.0
#include "iommu.hpp"

#include <fmt/format.h>

namespace npo::emu {

Result<void> Iommu::map(const void* vaddr, std::uint64_t iova, std::uint64_t length, backend::DmaAccess access) {
  const auto va = reinterpret_cast<std::uintptr_t>(vaddr);
  if (length == 0 || (va % kPage) != 0 || (iova % kPage) != 0 || (length % kPage) != 0) {
    return fail(Code::kInvalidArgument,
                fmt::format("dma_map: vaddr 0x{:x}, iova 0x{:x} and length {} must be non-zero multiples of 4 KiB", va,
                            iova, length));
  }
  if (iova < kIovaFirst || iova > kIovaLast || length - 1 > kIovaLast - iova) {
    return fail(Code::kOutOfRange, fmt::format("dma_map: IOVA range 0x{:x}+{} outside [0x{:x}, 0x{:x}]", iova, length,
                                               kIovaFirst, kIovaLast));
  }
  return insert(iova, Mapping{length, reinterpret_cast<std::byte*>(va), access});
}

Result<void> Iommu::map_process(int pid, int pidfd, std::uint64_t vaddr, std::uint64_t iova, std::uint64_t length,
                                backend::DmaAccess access) {
  if (pid <= 0) return fail(Code::kInvalidArgument, fmt::format("dma_map: process memory of pid {}", pid));
  if (length == 0 || (vaddr % kPage) != 0 || (iova % kPage) != 0 || (length % kPage) != 0 || vaddr + length < vaddr) {
    return fail(Code::kInvalidArgument,
                fmt::format("dma_map: process vaddr 0x{:x}, iova 0x{:x} and length {} must be non-zero multiples of "
                            "4 KiB",
                            vaddr, iova, length));
  }
  if (iova < kIovaFirst || iova > kIovaLast || length - 1 > kIovaLast - iova) {
    return fail(Code::kOutOfRange, fmt::format("dma_map: IOVA range 0x{:x}+{} outside [0x{:x}, 0x{:x}]", iova, length,
                                               kIovaFirst, kIovaLast));
  }
  return insert(iova, Mapping{length, reinterpret_cast<std::byte*>(vaddr), access, pid, pidfd});
}

Result<void> Iommu::insert(std::uint64_t iova, Mapping m) {
  const std::uint64_t length = m.length;
  std::unique_lock lock(mu_);
  auto next = maps_.lower_bound(iova);
  if (next != maps_.end() && next->first < iova + length) {
    return fail(Code::kAlreadyExists,
                fmt::format("dma_map: IOVA 0x{:x}+{} overlaps the mapping at 0x{:x}", iova, length, next->first));
  }
  if (next != maps_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second.length > iova) {
      return fail(Code::kAlreadyExists,
                  fmt::format("dma_map: IOVA 0x{:x}+{} overlaps the mapping at 0x{:x}", iova, length, prev->first));
    }
  }
  maps_.emplace(iova, m);
  return {};
}

Result<void> Iommu::unmap(std::uint64_t iova, std::uint64_t length) {
  std::unique_lock lock(mu_);
  auto it = maps_.find(iova);
  if (it == maps_.end() || it->second.length != length) {
    return fail(Code::kNotFound, fmt::format("dma_unmap: no mapping of exactly {} bytes at IOVA 0x{:x}", length, iova));
  }
  maps_.erase(it);
  return {};
}

void Iommu::clear() {
  std::unique_lock lock(mu_);
  maps_.clear();
}

std::size_t Iommu::mapping_count() const {
  std::shared_lock lock(mu_);
  return maps_.size();
}

bool Iommu::find(std::uint64_t iova, MappingView* out) const {
  auto it = maps_.upper_bound(iova);
  if (it == maps_.begin()) return false;
  --it;
  if (iova - it->first >= it->second.length) return false;
  *out =
      MappingView{it->first, it->second.length, it->second.host, it->second.access, it->second.pid, it->second.pidfd};
  return true;
}

XlateResult Iommu::translate(std::uint64_t iova, std::uint64_t length, bool write, std::byte** host,
                             std::uint64_t* contiguous, std::uint64_t* fault_iova, Foreign* pid) const {
  MappingView m;
  if (!find(iova, &m)) {
    *fault_iova = iova;
    return XlateResult::kUnmapped;
  }
  return resolve(m, iova, length, write, host, contiguous, fault_iova, pid);
}

}  // namespace npo::emu
