// SPDX-License-Identifier: Apache-2.0
// Emulator internals: the IOMMU model. Every device access to host memory is translated
// here; an access to an unmapped IOVA, or a write through a read-only mapping, is a fault
// and touches no memory.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <vector>

#include "npo/hal/backend/backend.hpp"

namespace npo::emu {

/// Result of translating one access. kForeign: the IOVA is mapped to another process's memory
/// (Iommu::map_process) and the caller asked for an address it can dereference.
enum class XlateResult : std::uint8_t { kOk, kUnmapped, kPermission, kForeign };

/// One card's IOMMU domain: IOVA -> host virtual address mappings with access rights.
/// Thread-safety: map/unmap take the lock exclusively and so wait for in-flight device
/// accesses (which hold an AccessGuard) to finish; translations hold it shared.
class Iommu {
 public:
  /// The IOVA aperture the model accepts: [4 KiB, 2^48 - 1] (page 0 is never mapped, so a
  /// zero IOVA always faults, as on typical hardware).
  static constexpr std::uint64_t kIovaFirst = 0x1000;
  static constexpr std::uint64_t kIovaLast = (std::uint64_t{1} << 48) - 1;
  static constexpr std::uint64_t kPage = 4096;

  Result<void> map(const void* vaddr, std::uint64_t iova, std::uint64_t length, backend::DmaAccess access);
  /// Maps [iova, iova+length) to the virtual addresses [vaddr, vaddr+length) of process `pid`
  /// (npo-emud: a client's own memory, DMA_MAP flag PROCESS_MEMORY, emud-protocol.md §5.2;
  /// in-process: this process). The engine reaches such memory with process_vm_readv/writev
  /// only, for data (copy, fill and gather sources and destinations, gather lists, the local
  /// side of remote ops); descriptor fetches, completion writes and statistics blocks there
  /// fault (kForeign). Same errors as map(); pid > 0.
  /// `pidfd`: a pidfd of that process taken when it asked (npo-emud), -1 for this process; the
  /// engine copies nothing once it reports the process exited (its pid may be reused).
  Result<void> map_process(int pid, int pidfd, std::uint64_t vaddr, std::uint64_t iova, std::uint64_t length,
                           backend::DmaAccess access);
  /// Another process's memory behind a translation (map_process): pid 0 = this process's own.
  struct Foreign {
    int pid = 0;
    int pidfd = -1;
  };
  Result<void> unmap(std::uint64_t iova, std::uint64_t length);
  /// Drops every mapping (device close).
  void clear();
  [[nodiscard]] std::size_t mapping_count() const;

  /// Holds translations stable while a device access is in progress.
  [[nodiscard]] std::shared_lock<std::shared_mutex> guard() const { return std::shared_lock(mu_); }

  /// Translates [iova, iova+length) for a read (write=false) or write. Caller holds guard().
  /// On success `*host` points at the first byte and the range is contiguous in host memory
  /// (a range spanning two mappings with non-contiguous host addresses is split by the caller
  /// via `*contiguous`, the number of bytes valid from `*host`). `*fault_iova` gets the first
  /// faulting IOVA on failure.
  /// `pid` null: a mapping of another process is kForeign. Non-null: it gets the process of
  /// such a mapping (then `*host` is an address in that process, not to be dereferenced), or
  /// pid 0.
  XlateResult translate(std::uint64_t iova, std::uint64_t length, bool write, std::byte** host,
                        std::uint64_t* contiguous, std::uint64_t* fault_iova, Foreign* pid = nullptr) const;

  /// One mapping as translate() sees it: IOVAs [first, first + length) at `host`.
  struct MappingView {
    std::uint64_t first = 0;
    std::uint64_t length = 0;
    std::byte* host = nullptr;
    backend::DmaAccess access{};
    int pid = 0;     ///< > 0: `host` is an address in that process (map_process)
    int pidfd = -1;  ///< that process's pidfd, -1: none (this process)
  };
  /// The mapping that contains `iova`; false when none does. Caller holds guard().
  bool find(std::uint64_t iova, MappingView* out) const;
  /// translate() against the mapping `m` that contains `iova` (found by find()): the same
  /// permission check and results.
  static XlateResult resolve(const MappingView& m, std::uint64_t iova, std::uint64_t length, bool write,
                             std::byte** host, std::uint64_t* contiguous, std::uint64_t* fault_iova,
                             Foreign* pid = nullptr) noexcept {
    if (m.pid != 0 && pid == nullptr) {
      *fault_iova = iova;
      return XlateResult::kForeign;
    }
    if (pid != nullptr) *pid = Foreign{m.pid, m.pidfd};
    const auto need = write ? backend::DmaAccess::kWrite : backend::DmaAccess::kRead;
    if ((static_cast<unsigned>(m.access) & static_cast<unsigned>(need)) == 0) {
      *fault_iova = iova;
      return XlateResult::kPermission;
    }
    const std::uint64_t off = iova - m.first;
    *host = m.host + off;
    *contiguous = std::min(length, m.length - off);
    return XlateResult::kOk;
  }

 private:
  struct Mapping {
    std::uint64_t length;
    std::byte* host;
    backend::DmaAccess access;
    int pid = 0;
    int pidfd = -1;
  };
  Result<void> insert(std::uint64_t iova, Mapping m);
  mutable std::shared_mutex mu_;
  std::map<std::uint64_t, Mapping> maps_;  // key: first IOVA
};

/// The last few mappings one device-side user (a DMA queue) translated through, so an op's
/// second look at the same buffer, and the rings, cost a compare instead of a map walk.
/// Results are identical to Iommu::translate(). Valid only while the owner holds the
/// Iommu's guard() (map and unmap wait for it): clear() it each time the guard is taken.
/// Not thread-safe (one per queue, used under the queue's lock).
class IommuCache {
 public:
  void clear() noexcept { used_ = 0; }
  /// Iommu::translate() through the cache. Caller holds mmu.guard() since the last clear().
  XlateResult translate(const Iommu& mmu, std::uint64_t iova, std::uint64_t length, bool write, std::byte** host,
                        std::uint64_t* contiguous, std::uint64_t* fault_iova, Iommu::Foreign* pid = nullptr) {
    for (unsigned i = 0; i < used_; ++i) {
      if (iova - e_[i].first < e_[i].length) {
        return Iommu::resolve(e_[i], iova, length, write, host, contiguous, fault_iova, pid);
      }
    }
    Iommu::MappingView m;
    if (!mmu.find(iova, &m)) {
      *fault_iova = iova;
      return XlateResult::kUnmapped;
    }
    e_[used_ < e_.size() ? used_++ : (next_++ % e_.size())] = m;
    return Iommu::resolve(m, iova, length, write, host, contiguous, fault_iova, pid);
  }

 private:
  std::array<Iommu::MappingView, 4> e_{};
  unsigned used_ = 0;
  unsigned next_ = 0;  ///< replacement cursor once all entries are used
};

}  // namespace npo::emu
