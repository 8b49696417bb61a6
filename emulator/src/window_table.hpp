// SPDX-License-Identifier: Apache-2.0
// Emulator internals: the window translation table (registers.md §6) -- the entries through
// which other cards' remote ops reach this card's HBM. The BAR0 window block is decoded by
// read()/write(); the DMA engines of every card read entries lock-free through entry().
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

namespace npo::emu {

/// One window translation table entry. Fields are atomics: remote engines read them while
/// the host rewrites them; `inflight` counts remote ops using the entry now.
struct WindowEntry {
  std::atomic<std::uint64_t> hbm_offset{0};
  std::atomic<std::uint64_t> size{0};
  std::atomic<std::uint64_t> key{0};
  std::atomic<std::uint32_t> ctrl{0};
  std::atomic<std::uint32_t> status{0};
  std::atomic<std::uint32_t> inflight{0};
};

/// The table of one card. Thread-safe (entry fields are atomics).
class WindowTable {
 public:
  /// `hbm_bytes`: the card's HBM size, the bound a committed entry is validated against.
  explicit WindowTable(std::uint64_t hbm_bytes);

  /// Register `reg` of entry `w` (BAR0 window block).
  std::uint64_t read(unsigned w, std::uint32_t reg);
  /// Writes register `reg` of entry `w`; a CTRL write commits and validates the entry.
  void write(unsigned w, std::uint32_t reg, std::uint64_t value);
  /// Entry `w` (< regs::kWindowEntries), for the DMA engines' remote ops.
  [[nodiscard]] WindowEntry& entry(unsigned w) noexcept { return entries_[w]; }
  /// Card reset: every entry cleared (in-flight counts are left to their ops).
  void reset();
  /// GLOBAL.WINDOWS_VALID (registers.md §9): entries whose CTRL.VALID is 1 now, kept up to
  /// date by every CTRL write. Thread-safe.
  [[nodiscard]] std::uint32_t valid_count() const noexcept { return valid_.load(std::memory_order_relaxed); }

 private:
  std::uint64_t hbm_bytes_;
  std::unique_ptr<WindowEntry[]> entries_;
  std::atomic<std::uint32_t> valid_{0};
};

}  // namespace npo::emu
