// SPDX-License-Identifier: Apache-2.0
// Emulator internals: the port statistics engine (registers.md §7.5, fw/stats.hpp). A write
// of a non-zero sequence number to GLOBAL.STATS_CTRL snapshots every port (PortSet) and
// writes the block to host memory at GLOBAL.STATS_ADDR through the IOMMU, `seq` last.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

namespace npo::emu {

class Card;

/// The card-internal DMA requester that writes the statistics block. Thread-safe.
class StatsEngine {
 public:
  explicit StatsEngine(Card& card) : card_(card) {}

  /// GLOBAL.STATS_ADDR / STATS_CTRL (last value written) / STATS_SEQ (last block written).
  [[nodiscard]] std::uint64_t addr() const noexcept { return addr_.load(); }
  [[nodiscard]] std::uint32_t ctrl() const noexcept { return ctrl_.load(); }
  [[nodiscard]] std::uint32_t seq() const noexcept { return seq_.load(std::memory_order_acquire); }
  /// STATS_ADDR write: kept 64-byte aligned.
  void set_addr(std::uint64_t value) noexcept { addr_.store(value & ~std::uint64_t{63}); }
  /// STATS_CTRL write: a non-zero value runs the DMA synchronously (the block is in memory,
  /// or an IOMMU fault recorded, when the write returns).
  void write_ctrl(std::uint32_t value);
  /// Card reset: the three registers to 0.
  void reset() noexcept;

 private:
  void dma(std::uint32_t seq);

  Card& card_;
  std::atomic<std::uint64_t> addr_{0};
  std::atomic<std::uint32_t> seq_{0};
  std::atomic<std::uint32_t> ctrl_{0};
  std::mutex mu_;  ///< one stats DMA at a time
};

}  // namespace npo::emu
