// SPDX-License-Identifier: Apache-2.0
// DPDK memory registered with a card (docs/dpdk.md "IOVA"): every memseg-contiguous range
// through npo::register_host_memory (pinned, IOMMU-mapped; zero-copy), and the VA -> card IOVA
// table the fast path reads without a lock.

#include <rte_log.h>
#include <rte_memory.h>

#include <algorithm>
#include <cinttypes>

#include "internal.hpp"
#include "npo/hal/backend/host_memory.hpp"

namespace npo::dpdk {

bool MemTable::translate(std::uintptr_t va, std::size_t len, std::uint64_t& iova) const noexcept {
  auto it = std::upper_bound(entries.begin(), entries.end(), va,
                             [](std::uintptr_t v, const MemEntry& e) { return v < e.va; });
  if (it == entries.begin()) return false;
  --it;
  if (va - it->va > it->len || len > it->len - (va - it->va)) return false;
  iova = it->iova + (va - it->va);
  return true;
}

namespace {

void publish(CardMemory& m) {  // m.mu held
  auto t = std::make_unique<MemTable>();
  for (const auto& r : m.regions) {
    t->entries.push_back({reinterpret_cast<std::uintptr_t>(r->bytes().data()), r->size(), r->iova()});
  }
  std::sort(t->entries.begin(), t->entries.end(), [](const MemEntry& a, const MemEntry& b) { return a.va < b.va; });
  m.current.store(t.get(), std::memory_order_release);
  // Older tables stay alive until the card's memory is released: a fast-path reader may
  // still hold one (they are small and change only when DPDK's memory map changes).
  m.tables.push_back(std::move(t));
}

// DPDK memory that lives in one file over the whole range (a memfd with --no-huge) is
// recorded with that fd, so a backend whose card lives in another process (emu-remote) maps
// it by fd (docs/dpdk.md "emu-remote"). Called where DPDK's memory lock is held (a walk or a
// memory event), hence the thread-unsafe getters.
void record_fd(const void* addr, std::size_t len) {
  const rte_memseg_list* msl = rte_mem_virt2memseg_list(addr);
  const rte_memseg* first = rte_mem_virt2memseg(addr, msl);
  const rte_memseg* last = rte_mem_virt2memseg(static_cast<const std::byte*>(addr) + len - 1, msl);
  if (first == nullptr || last == nullptr) return;
  const int fd = rte_memseg_get_fd_thread_unsafe(first);
  std::size_t off = 0, last_off = 0;
  if (fd < 0 || rte_memseg_get_fd_thread_unsafe(last) != fd ||
      rte_memseg_get_fd_offset_thread_unsafe(first, &off) != 0 ||
      rte_memseg_get_fd_offset_thread_unsafe(last, &last_off) != 0) {
    return;
  }
  const auto span = reinterpret_cast<std::uintptr_t>(last->addr) - reinterpret_cast<std::uintptr_t>(first->addr);
  if (last_off - off != span) return;  // not one contiguous stretch of the file
  const auto skip = reinterpret_cast<std::uintptr_t>(addr) - reinterpret_cast<std::uintptr_t>(first->addr);
  backend::register_host_memory_fd(addr, len, fd, off + skip);
}

}  // namespace

Result<void> CardMemory::add(std::uintptr_t va, std::size_t len) {
  std::lock_guard lock(mu);
  auto r = register_host_memory(*device, std::span(reinterpret_cast<std::byte*>(va), len), true);
  if (!r) return std::unexpected(r.error());
  registered_bytes += len;
  regions.push_back(std::move(*r));
  publish(*this);
  return {};
}

void CardMemory::remove(std::uintptr_t va, std::size_t len) {
  std::lock_guard lock(mu);
  const auto n = regions.size();
  std::erase_if(regions, [&](const std::unique_ptr<MemoryRegion>& r) {
    const auto a = reinterpret_cast<std::uintptr_t>(r->bytes().data());
    const bool inside = a >= va && a + r->size() <= va + len;
    if (inside) registered_bytes -= r->size();
    return inside;
  });
  if (regions.size() != n) publish(*this);
}

void mem_event(rte_mem_event type, const void* addr, std::size_t len, void* arg) {
  auto* m = static_cast<CardMemory*>(arg);
  const auto va = reinterpret_cast<std::uintptr_t>(addr);
  if (type == RTE_MEM_EVENT_ALLOC) {
    record_fd(addr, len);
    if (auto r = m->add(va, len); !r) {
      log(RTE_LOG_ERR, "registering new DPDK memory 0x%" PRIxPTR "+%zu with the card: %s", va, len,
          r.error().to_string().c_str());
    }
  } else {
    m->remove(va, len);
    backend::unregister_host_memory_fd(addr);
  }
}

int contig_walk(const rte_memseg_list* /*msl*/, const rte_memseg* ms, std::size_t len, void* arg) {
  auto* m = static_cast<CardMemory*>(arg);
  record_fd(ms->addr, len);
  if (auto r = m->add(reinterpret_cast<std::uintptr_t>(ms->addr), len); !r) {
    log(RTE_LOG_ERR, "registering DPDK memory 0x%" PRIxPTR "+%zu with the card: %s",
        reinterpret_cast<std::uintptr_t>(ms->addr), len, r.error().to_string().c_str());
    return -1;
  }
  return 0;
}

}  // namespace npo::dpdk
