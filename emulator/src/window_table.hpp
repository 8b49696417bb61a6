// SPDX-License-Identifier: Apache-2.0
// Emulator internals: the window translation table (registers.md §6) -- the entries through
// which other cards' remote ops reach this card's HBM. The BAR0 window block is decoded by
// read()/write(); the DMA engines of every card read entries lock-free (WindowEntry in
// shared_state.hpp).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "shared_state.hpp"

namespace npo::emu {
class HbmWindows;
}

namespace npo::emu {

/// The table of one card, whose entries live in the shared engine state (CardState::windows),
/// where the engines of every process read them. Thread-safe (entry fields are atomics).
class WindowTable {
 public:
  /// `hbm_bytes`: the card's HBM size, the bound a committed entry is validated against;
  /// `card`: the card's index in `fabric`; `backing`: npo-emud's window memfds (hbm_windows.hpp),
  /// which every open window's range moves into, or null (one process: nothing to isolate).
  WindowTable(std::uint64_t hbm_bytes, FabricState& fabric, std::uint32_t card, HbmWindows* backing = nullptr);

  /// Register `reg` of entry `w` (BAR0 window block).
  std::uint64_t read(unsigned w, std::uint32_t reg);
  /// Writes register `reg` of entry `w`; a CTRL write commits and validates the entry.
  void write(unsigned w, std::uint32_t reg, std::uint64_t value);
  /// Entry `w` (< regs::kWindowEntries), for the DMA engines' remote ops.
  [[nodiscard]] WindowEntry& entry(unsigned w) noexcept { return entries_[w]; }
  /// Card reset: every entry cleared (ops in flight finish their chunk and stop at the next).
  void reset();
  /// What entry `w` was last committed open with, as the card keeps it (the copy in the shared
  /// engine state is what engines read, and an owner process maps it); all zero when closed.
  struct Committed {
    std::uint64_t off = 0;   ///< HBM offset, bytes
    std::uint64_t size = 0;  ///< bytes; 0: the entry is closed
    std::uint64_t key = 0;
    std::uint32_t ctrl = 0;  ///< CTRL as committed (VALID, READ, WRITE, GENERATION)
  };
  /// Thread-safe.
  [[nodiscard]] Committed committed(unsigned w) const;
  /// GLOBAL.WINDOWS_VALID (registers.md §9): entries whose CTRL.VALID is 1 now, kept up to
  /// date by every CTRL write. Thread-safe.
  [[nodiscard]] std::uint32_t valid_count() const noexcept { return valid_.load(std::memory_order_relaxed); }

 private:
  /// Waits (at most 1 s) until no remote op is inside entry `w` (STATUS.INFLIGHT = 0).
  void drain(unsigned w);

  std::uint64_t hbm_bytes_;
  FabricState& fabric_;
  std::uint32_t card_;
  WindowEntry* entries_;
  HbmWindows* backing_;
  std::atomic<std::uint32_t> valid_{0};
  /// Each open entry as committed, and so the range it holds in `backing_` (the host may
  /// restage HBM_OFFSET and SIZE while the entry is open; the range moves only at a commit).
  /// Under mu_.
  mutable std::mutex mu_;
  std::vector<Committed> open_;
};

}  // namespace npo::emu
