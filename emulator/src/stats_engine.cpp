// SPDX-License-Identifier: Apache-2.0
// The port statistics engine: snapshot of every port, written to host memory through the
// IOMMU with the sequence number last (registers.md §7.5).
#include "stats_engine.hpp"

#include <cstddef>
#include <cstring>
#include <vector>

#include "card.hpp"
#include "npo/fw/stats.hpp"

namespace npo::emu {

namespace regs = fw::regs;

void StatsEngine::write_ctrl(std::uint32_t value) {
  ctrl_.store(value);
  if (value != 0) dma(value);  // synchronous: the block is in memory when the write returns
}

void StatsEngine::reset() noexcept {
  addr_.store(0);
  ctrl_.store(0);
  seq_.store(0);
}

void StatsEngine::dma(std::uint32_t seq) {
  namespace st = fw::stats;
  std::lock_guard slock(mu_);
  const auto np = card_.ports().size();
  std::vector<std::byte> block(st::block_bytes(np));
  st::StatsHeader h{};
  h.magic = st::kMagic;
  h.version = st::kVersion;
  h.num_ports = np;
  h.lanes_per_port = regs::kLanesPerPort;
  h.fabric_id = card_.fabric_id();
  h.timestamp_ns = card_.ports().fill_stats(block.data() + st::kHeaderBytes);
  h.seq = 0;  // written last, below
  std::memcpy(block.data(), &h, sizeof h);
  const std::uint64_t iova = addr_.load();
  // The stats engine is a card-internal DMA requester: faults report engine 4 (one past
  // the DMA engines), queue 0.
  constexpr unsigned kStatsRequester = regs::kNumQueues;
  if (!card_.bus_master()) return;
  if (card_.shared().take_injected_iommu_fault()) {
    card_.record_iommu_fault(iova, kStatsRequester, true, false);
    return;
  }
  auto& mmu = card_.iommu();
  auto guard = mmu.guard();
  std::byte* seq_host = nullptr;
  for (std::uint64_t done = 0; done < block.size();) {
    std::byte* host = nullptr;
    std::uint64_t contig = 0, fault = 0;
    const auto r = mmu.translate(iova + done, block.size() - done, true, &host, &contig, &fault);
    if (r != XlateResult::kOk) {
      guard.unlock();
      card_.record_iommu_fault(fault, kStatsRequester, true, r == XlateResult::kPermission);
      return;
    }
    done += contig;
  }
  for (std::uint64_t done = 0; done < block.size();) {
    std::byte* host = nullptr;
    std::uint64_t contig = 0, fault = 0;
    (void)mmu.translate(iova + done, block.size() - done, true, &host, &contig, &fault);
    const std::uint64_t seq_off = offsetof(st::StatsHeader, seq);
    if (done <= seq_off && seq_off < done + contig) seq_host = host + (seq_off - done);
    std::memcpy(host, block.data() + done, contig);
    done += contig;
  }
  // The release store orders every record byte above before `seq` (as the card's final
  // posted write would be ordered on PCIe).
  if (seq_host != nullptr && reinterpret_cast<std::uintptr_t>(seq_host) % 4 == 0) {
    std::atomic_ref<std::uint32_t>(*reinterpret_cast<std::uint32_t*>(seq_host)).store(seq, std::memory_order_release);
  }
  seq_.store(seq, std::memory_order_release);
}

}  // namespace npo::emu
