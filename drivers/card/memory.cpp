// SPDX-License-Identifier: Apache-2.0
#include "card/memory.hpp"

#include <linux/memfd.h>
#include <numa.h>
#include <sys/mman.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string_view>

#include <fmt/format.h>

#include "card/device_impl.hpp"
#include "npo/hal/backend/host_memory.hpp"
#include "npo/hal/log.hpp"

namespace npo::card {

namespace {
constexpr std::uint64_t kPage = 4096;
constexpr std::uint64_t kHuge = 2u << 20;
}  // namespace

// ==== RangeAllocator =======================================================================

void RangeAllocator::add_range(std::uint64_t first, std::uint64_t last) {
  std::lock_guard lock(mu_);
  if (last < first) return;
  const std::uint64_t size = last - first + 1;  // callers keep ranges below 2^64 - 1
  free_.emplace(first, size);
}

std::optional<std::uint64_t> RangeAllocator::alloc(std::uint64_t size, std::uint64_t align) {
  if (size == 0 || align == 0 || !std::has_single_bit(align)) return std::nullopt;
  std::lock_guard lock(mu_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    const std::uint64_t start = it->first, bsize = it->second;
    const std::uint64_t aligned = (start + align - 1) & ~(align - 1);
    if (aligned < start) continue;  // wrapped
    const std::uint64_t pad = aligned - start;
    if (pad > bsize || bsize - pad < size) continue;
    free_.erase(it);
    if (pad > 0) free_.emplace(start, pad);
    if (bsize - pad > size) free_.emplace(aligned + size, bsize - pad - size);
    used_.emplace(aligned, size);
    return aligned;
  }
  return std::nullopt;
}

bool RangeAllocator::free(std::uint64_t start, std::uint64_t size) {
  std::lock_guard lock(mu_);
  auto u = used_.find(start);
  if (u == used_.end() || u->second != size) return false;
  used_.erase(u);
  auto [it, ok] = free_.emplace(start, size);
  (void)ok;
  // Coalesce with the next and previous free blocks.
  if (auto next = std::next(it); next != free_.end() && it->first + it->second == next->first) {
    it->second += next->second;
    free_.erase(next);
  }
  if (it != free_.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second == it->first) {
      prev->second += it->second;
      free_.erase(it);
    }
  }
  return true;
}

RangeAllocator::Stats RangeAllocator::stats() const {
  std::lock_guard lock(mu_);
  Stats s;
  for (const auto& [start, size] : free_) {
    s.free += size;
    s.largest_free = std::max(s.largest_free, size);
    ++s.free_blocks;
  }
  s.allocations = used_.size();
  return s;
}

// ==== DMA mapping with budgets ===============================================================

Result<std::uint64_t> map_for_dma(backend::Device& dev, MemoryState& mem, std::uint32_t card, const void* start,
                                  std::uint64_t length, backend::DmaAccess access) {
  const ErrorContext ctx{.card = card};
  // Budgets first: reserve, then roll back on any later failure.
  const std::uint64_t plimit = mem.pinned_limit.load();
  std::uint64_t pused = mem.pinned_used.load();
  do {
    if (pused + length > plimit) {
      return fail(Code::kResourceExhausted,
                  fmt::format("pinned-memory budget of card {} exhausted: limit {} MiB, in use {} MiB, asked {} KiB",
                              card, plimit >> 20, pused >> 20, length >> 10),
                  ctx);
    }
  } while (!mem.pinned_used.compare_exchange_weak(pused, pused + length));
  const std::uint64_t ilimit = mem.iova_limit.load();
  std::uint64_t iused = mem.iova_used.load();
  do {
    if (iused + length > ilimit) {
      mem.pinned_used.fetch_sub(length);
      return fail(Code::kResourceExhausted,
                  fmt::format("IOVA budget of card {} exhausted: limit {} MiB, in use {} MiB, asked {} KiB", card,
                              ilimit >> 20, iused >> 20, length >> 10),
                  ctx);
    }
  } while (!mem.iova_used.compare_exchange_weak(iused, iused + length));
  auto rollback = [&] {
    mem.pinned_used.fetch_sub(length);
    mem.iova_used.fetch_sub(length);
  };
  const std::uint64_t align = length >= kHuge ? kHuge : kPage;
  auto iova = mem.iova.alloc(length, align);
  if (!iova) {
    rollback();
    return fail(Code::kResourceExhausted,
                fmt::format("IOVA space of card {} has no free block of {} KiB", card, length >> 10), ctx);
  }
  if (auto r = dev.dma_map(start, *iova, length, access); !r) {
    mem.iova.free(*iova, length);
    rollback();
    return std::unexpected(Error(r.error()).with(ctx));
  }
  return *iova;
}

void unmap_for_dma(backend::Device& dev, MemoryState& mem, std::uint64_t iova, std::uint64_t length) {
  if (auto r = dev.dma_unmap(iova, length); !r) {
    npo::log::get(npo::log::Subsystem::kMemory)
        .error("dma_unmap of IOVA 0x{:x}+{}: {}", iova, length, r.error().to_string());
    return;  // keep the IOVA and budget reserved: the mapping may still exist
  }
  mem.iova.free(iova, length);
  mem.pinned_used.fetch_sub(length);
  mem.iova_used.fetch_sub(length);
}

}  // namespace npo::card

// ==== Public API ==============================================================================

namespace npo {

namespace {

class HostRegion final : public MemoryRegion {
 public:
  HostRegion(DeviceImpl& dev, std::byte* map_base, std::size_t map_len, std::size_t user_off, std::size_t user_len,
             std::uint64_t iova, PageKind kind, int node, int memfd, bool owned)
      : dev_(dev),
        map_base_(map_base),
        map_len_(map_len),
        user_off_(user_off),
        user_len_(user_len),
        iova_(iova),
        kind_(kind),
        node_(node),
        memfd_(memfd),
        owned_(owned) {}
  ~HostRegion() override {
    card::unmap_for_dma(*dev_.dev, dev_.mem, iova_, map_len_);
    if (memfd_ >= 0) backend::unregister_host_memory_fd(map_base_);
    if (owned_) ::munmap(map_base_, map_len_);
    if (memfd_ >= 0) ::close(memfd_);
  }
  std::span<std::byte> bytes() noexcept override { return {map_base_ + user_off_, user_len_}; }
  std::uint64_t iova() const noexcept override { return iova_ + user_off_; }
  std::size_t size() const noexcept override { return user_len_; }
  PageKind page_kind() const noexcept override { return kind_; }
  int numa_node() const noexcept override { return node_; }

 private:
  DeviceImpl& dev_;
  std::byte* map_base_;
  std::size_t map_len_;
  std::size_t user_off_;
  std::size_t user_len_;
  std::uint64_t iova_;
  PageKind kind_;
  int node_;
  int memfd_;
  bool owned_;
};

/// User virtual addresses a ProcessMemoryMap covers: [4 KiB, 2^47), x86-64 and arm64 with
/// 4-level page tables (5-level ones hand out higher addresses only when asked).
constexpr std::uint64_t kProcessFirst = 0x1000;
constexpr std::uint64_t kProcessEnd = std::uint64_t{1} << 47;

class ProcessMap final : public ProcessMemoryMap {
 public:
  ProcessMap(DeviceImpl& dev, std::uint64_t iova, bool writable) : dev_(dev), iova_(iova), writable_(writable) {}
  ~ProcessMap() override {
    const std::uint64_t len = kProcessEnd - kProcessFirst;
    std::lock_guard lock(dev_.mem.process_mu);  // a new map waits until this one's IOVA is free
    if (auto r = dev_.dev->dma_unmap(iova_, len); !r) {
      npo::log::get(npo::log::Subsystem::kMemory)
          .warn("dma_unmap of the process memory map at IOVA 0x{:x}: {}", iova_, r.error().to_string());
    }
    dev_.mem.iova.free(iova_, len);
  }
  std::uint64_t iova_of(const void* p) const noexcept override {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    return a >= kProcessFirst && a < kProcessEnd ? iova_ + (a - kProcessFirst) : 0;
  }
  bool writable() const noexcept override { return writable_; }

 private:
  DeviceImpl& dev_;
  std::uint64_t iova_;
  bool writable_;
};

/// What a caller of map_process_memory holds: a share of the card's one map of that kind.
class SharedProcessMap final : public ProcessMemoryMap {
 public:
  explicit SharedProcessMap(std::shared_ptr<ProcessMemoryMap> core) : core_(std::move(core)) {}
  std::uint64_t iova_of(const void* p) const noexcept override { return core_->iova_of(p); }
  bool writable() const noexcept override { return core_->writable(); }

 private:
  std::shared_ptr<ProcessMemoryMap> core_;
};

std::once_flag g_huge_note;

/// Whether shared memory (memfd) gets transparent huge pages on MADV_HUGEPAGE.
bool shmem_thp_enabled() {
  static const bool enabled = [] {
    std::FILE* f = std::fopen("/sys/kernel/mm/transparent_hugepage/shmem_enabled", "r");
    if (f == nullptr) return false;
    char buf[128] = {};
    const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    const std::string_view s(buf, n);
    return s.find("[never]") == std::string_view::npos && s.find("[deny]") == std::string_view::npos;
  }();
  return enabled;
}
std::once_flag g_numa_note;

/// Binds [p, p+len) to `node` before first touch. Returns the node bound, or -1.
int bind_numa(void* p, std::size_t len, int node) {
  if (node < 0 || numa_available() < 0 || node > numa_max_node()) {
    if (node >= 0) {
      std::call_once(g_numa_note, [node] {
        npo::log::get(npo::log::Subsystem::kMemory)
            .info("card NUMA node {} does not exist on this host ({} nodes); DMA memory is not bound", node,
                  numa_available() < 0 ? 1 : numa_max_node() + 1);
      });
    }
    return -1;
  }
  numa_tonode_memory(p, len, node);
  return node;
}

}  // namespace

Result<std::unique_ptr<MemoryRegion>> allocate_host_memory(Device& device, std::size_t size) {
  auto& impl = impl_of(device);
  const ErrorContext ctx{.card = impl.info.index};
  if (size == 0) return fail(Code::kInvalidArgument, "allocate_host_memory: size 0", ctx);
  const int node = impl.info.numa_node;
  std::byte* base = nullptr;
  std::size_t len = 0;
  PageKind kind = PageKind::kSmall;
  int memfd = -1;
  // DMA memory is a memfd (sealable), so a backend whose device lives in another process
  // (emu-remote) can hand it over by fd (backend/host_memory.hpp).
  // 1. hugetlbfs pages through a memfd. memfd_create succeeds even with no hugepages
  //    reserved; the mmap is what fails (ENOMEM), so fall back on either.
  len = (size + (2u << 20) - 1) & ~std::size_t{(2u << 20) - 1};
  memfd = ::memfd_create("npo-dma", MFD_CLOEXEC | MFD_HUGETLB | MFD_ALLOW_SEALING);
  if (memfd >= 0 && ::ftruncate(memfd, static_cast<off_t>(len)) == 0) {
    void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
    if (p != MAP_FAILED) {
      base = static_cast<std::byte*>(p);
      kind = PageKind::kHugetlb;
    }
  }
  if (base == nullptr) {
    const int err = errno;
    if (memfd >= 0) ::close(memfd);
    memfd = -1;
    std::call_once(g_huge_note, [err] {
      npo::log::get(npo::log::Subsystem::kMemory)
          .info(
              "hugetlbfs pages unavailable ({}); DMA memory is a regular memfd with transparent huge pages "
              "where shmem THP is enabled (/sys/kernel/mm/transparent_hugepage/shmem_enabled), else 4 KiB pages",
              std::strerror(err));
    });
    // 2. a regular memfd, mapped 2 MiB aligned, with MADV_HUGEPAGE when large enough.
    const bool huge = size >= (2u << 20);
    len = huge ? len : (size + 4095) & ~std::size_t{4095};
    memfd = ::memfd_create("npo-dma", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (memfd < 0) return fail_errno(errno, "memfd_create for DMA memory", ctx);
    if (::ftruncate(memfd, static_cast<off_t>(len)) != 0) {
      const int e = errno;
      ::close(memfd);
      return fail_errno(e, fmt::format("ftruncate of a {}-byte DMA memfd", len), ctx);
    }
    const std::size_t over = huge ? len + (2u << 20) : len;
    void* r = ::mmap(nullptr, over, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED) {
      const int e = errno;
      ::close(memfd);
      return fail_errno(e, fmt::format("mmap of {} bytes of DMA memory", over), ctx);
    }
    auto* b = static_cast<std::byte*>(r);
    auto* aligned = huge ? reinterpret_cast<std::byte*>((reinterpret_cast<std::uintptr_t>(b) + (2u << 20) - 1) &
                                                        ~std::uintptr_t{(2u << 20) - 1})
                         : b;
    if (aligned > b) ::munmap(b, static_cast<std::size_t>(aligned - b));
    const std::size_t tail = static_cast<std::size_t>((b + over) - (aligned + len));
    if (tail > 0) ::munmap(aligned + len, tail);
    void* p = ::mmap(aligned, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, memfd, 0);
    if (p == MAP_FAILED) {
      const int e = errno;
      ::munmap(aligned, len);
      ::close(memfd);
      return fail_errno(e, fmt::format("mmap of a {}-byte DMA memfd", len), ctx);
    }
    base = aligned;
    kind = PageKind::kSmall;
    if (huge && ::madvise(base, len, MADV_HUGEPAGE) == 0 && shmem_thp_enabled()) kind = PageKind::kTransparentHuge;
  }
  const int bound = bind_numa(base, len, node);
  std::memset(base, 0, len);  // first touch after binding: pages land on the node, and are resident
  backend::register_host_memory_fd(base, len, memfd, 0);
  auto iova = card::map_for_dma(*impl.dev, impl.mem, impl.info.index, base, len, backend::DmaAccess::kReadWrite);
  if (!iova) {
    backend::unregister_host_memory_fd(base);
    ::munmap(base, len);
    if (memfd >= 0) ::close(memfd);
    return std::unexpected(iova.error());
  }
  return std::unique_ptr<MemoryRegion>(
      std::make_unique<HostRegion>(impl, base, len, 0, size, *iova, kind, bound, memfd, true));
}

Result<std::unique_ptr<MemoryRegion>> register_host_memory(Device& device, std::span<std::byte> bytes, bool writable) {
  auto& impl = impl_of(device);
  const ErrorContext ctx{.card = impl.info.index};
  if (bytes.empty()) return fail(Code::kInvalidArgument, "register_host_memory: empty buffer", ctx);
  const auto addr = reinterpret_cast<std::uintptr_t>(bytes.data());
  const std::uintptr_t first = addr & ~std::uintptr_t{4095};
  const std::uintptr_t last = (addr + bytes.size() + 4095) & ~std::uintptr_t{4095};
  auto* base = reinterpret_cast<std::byte*>(first);
  const std::size_t len = last - first;
  auto iova = card::map_for_dma(*impl.dev, impl.mem, impl.info.index, base, len,
                                writable ? backend::DmaAccess::kReadWrite : backend::DmaAccess::kRead);
  if (!iova) return std::unexpected(iova.error());
  return std::unique_ptr<MemoryRegion>(
      std::make_unique<HostRegion>(impl, base, len, addr - first, bytes.size(), *iova, PageKind::kUser, -1, -1, false));
}

Result<std::unique_ptr<ProcessMemoryMap>> map_process_memory(Device& device, bool writable) {
  auto& impl = impl_of(device);
  const ErrorContext ctx{.card = impl.info.index};
  std::lock_guard lock(impl.mem.process_mu);
  auto& slot = impl.mem.process_maps[writable ? 1 : 0];
  if (auto core = slot.lock()) return std::unique_ptr<ProcessMemoryMap>(std::make_unique<SharedProcessMap>(core));
  const std::uint64_t len = kProcessEnd - kProcessFirst;
  auto iova = impl.mem.iova.alloc(len, std::uint64_t{4096});
  if (!iova) {
    return fail(Code::kResourceExhausted,
                fmt::format("IOVA space of card {} has no free block of 128 TiB for a {} process memory map (it "
                            "holds one: a {} map of this process is in use, or registered memory takes the room)",
                            impl.info.index, writable ? "writable" : "read-only", writable ? "read-only" : "writable"),
                ctx);
  }
  auto r = impl.dev->dma_map_process(kProcessFirst, *iova, len,
                                     writable ? backend::DmaAccess::kReadWrite : backend::DmaAccess::kRead);
  if (!r) {
    impl.mem.iova.free(*iova, len);
    return std::unexpected(Error(r.error()).with(ctx));
  }
  auto core = std::make_shared<ProcessMap>(impl, *iova, writable);
  slot = core;
  return std::unique_ptr<ProcessMemoryMap>(std::make_unique<SharedProcessMap>(std::move(core)));
}

MemoryBudget memory_budget(Device& device) {
  auto& m = impl_of(device).mem;
  return MemoryBudget{m.pinned_limit.load(), m.pinned_used.load(), m.iova_limit.load(), m.iova_used.load()};
}

void set_memory_limits(Device& device, std::uint64_t pinned_limit, std::uint64_t iova_limit) {
  auto& m = impl_of(device).mem;
  if (pinned_limit != 0) m.pinned_limit.store(pinned_limit);
  if (iova_limit != 0) m.iova_limit.store(iova_limit);
}

Result<HbmRange> allocate_hbm(Device& device, std::uint64_t size, std::uint64_t alignment) {
  auto& impl = impl_of(device);
  const ErrorContext ctx{.card = impl.info.index};
  if (size == 0) return fail(Code::kInvalidArgument, "allocate_hbm: size 0", ctx);
  if (alignment < 64 || !std::has_single_bit(alignment)) {
    return fail(Code::kInvalidArgument,
                fmt::format("allocate_hbm: alignment {} must be a power of two >= 64", alignment), ctx);
  }
  auto off = impl.mem.hbm.alloc(size, alignment);
  if (!off) {
    const auto st = impl.mem.hbm.stats();
    return fail(Code::kResourceExhausted,
                fmt::format("HBM of card {}: no free block of {} bytes aligned to {}; {} bytes free, largest block {}",
                            impl.info.index, size, alignment, st.free, st.largest_free),
                ctx);
  }
  return HbmRange{*off, size};
}

Result<void> free_hbm(Device& device, HbmRange range) {
  auto& impl = impl_of(device);
  if (!impl.mem.hbm.free(range.offset, range.size)) {
    return fail(Code::kNotFound,
                fmt::format("free_hbm: [0x{:x}, +{}) is not an allocated HBM range", range.offset, range.size),
                {.card = impl.info.index});
  }
  return {};
}

HbmStats hbm_stats(Device& device) {
  auto& impl = impl_of(device);
  const auto st = impl.mem.hbm.stats();
  HbmStats h;
  h.total = impl.mem.hbm_total;
  h.free = st.free;
  h.used = h.total - st.free;
  h.largest_free = st.largest_free;
  h.free_blocks = st.free_blocks;
  h.allocations = st.allocations;
  h.fragmentation = st.free == 0 ? 0.0 : 1.0 - static_cast<double>(st.largest_free) / static_cast<double>(st.free);
  return h;
}

}  // namespace npo
