// SPDX-License-Identifier: Apache-2.0
// The window translation table (registers.md §6).
#include "window_table.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

#include "hbm_windows.hpp"
#include "npo/fw/regs.hpp"

namespace npo::emu {

namespace regs = fw::regs;

WindowTable::WindowTable(std::uint64_t hbm_bytes, FabricState& fabric, std::uint32_t card, HbmWindows* backing)
    : hbm_bytes_(hbm_bytes),
      fabric_(fabric),
      card_(card),
      entries_(fabric.card(card).windows),
      backing_(backing),
      open_(regs::kWindowEntries) {}

WindowTable::Committed WindowTable::committed(unsigned w) const {
  std::lock_guard lock(mu_);
  return w < open_.size() ? open_[w] : Committed{};
}

void WindowTable::drain(unsigned w) {
  // The remote ops admitted before the close finish their chunk (at most 256 KiB) and stop; wait
  // for them before the range's bytes move, so that none lands in the closed window's memfd.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (fabric_.window_inflight(card_, w) != 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

std::uint64_t WindowTable::read(unsigned w, std::uint32_t reg) {
  namespace wr = regs::window;
  auto& e = entries_[w];
  switch (reg) {
    case wr::kHbmOffset: return e.hbm_offset.load();
    case wr::kSize: return e.size.load();
    case wr::kKey: return e.key.load();
    case wr::kCtrl: return e.ctrl.load();
    case wr::kStatus:
      return e.status.load() |
             wr::kStatusInflight.make(std::min<std::uint32_t>(fabric_.window_inflight(card_, w), 0xffff));
    default: return 0;
  }
}

void WindowTable::write(unsigned w, std::uint32_t reg, std::uint64_t value) {
  namespace wr = regs::window;
  auto& e = entries_[w];
  switch (reg) {
    case wr::kHbmOffset: e.hbm_offset.store(value); break;
    case wr::kSize: e.size.store(value); break;
    case wr::kKey: e.key.store(value); break;
    case wr::kCtrl: {
      // Commit: validate the entry; an invalid one is refused (STATUS.BAD_ENTRY) and left inactive.
      const auto ctrl = static_cast<std::uint32_t>(value) & (wr::kCtrlValid.mask() | wr::kCtrlRead.mask() |
                                                             wr::kCtrlWrite.mask() | wr::kCtrlGeneration.mask());
      const std::uint64_t off = e.hbm_offset.load();
      const std::uint64_t size = e.size.load();
      const bool valid = wr::kCtrlValid.get(ctrl) != 0;
      bool ok = !valid || (size > 0 && off % wr::kAlign == 0 && size % wr::kAlign == 0 && off <= hbm_bytes_ &&
                           size <= hbm_bytes_ - off);
      std::unique_lock lock(mu_);
      const Committed held = open_[w];
      // npo-emud: the range moves into a memfd of its own before the entry opens (hbm_windows.hpp).
      const bool moves = held.off != off || held.size != size;
      if (backing_ != nullptr && valid && ok && moves) ok = backing_->open(card_, off, size).has_value();
      const std::uint32_t stored = ok ? ctrl : ctrl & ~wr::kCtrlValid.mask();
      // The exchange pairs each entry's VALID transitions with the count (GLOBAL.WINDOWS_VALID):
      // exact even when two writers race on one entry.
      const std::uint32_t before = e.ctrl.exchange(stored);
      e.status.store(!ok ? wr::kStatusBadEntry.mask() : valid ? wr::kStatusActive.mask() : 0);
      const bool was = wr::kCtrlValid.get(before) != 0;
      const bool is = wr::kCtrlValid.get(stored) != 0;
      if (is && !was) valid_.fetch_add(1, std::memory_order_relaxed);
      if (was && !is) valid_.fetch_sub(1, std::memory_order_relaxed);
      const Committed now = is ? Committed{off, size, e.key.load(), stored} : Committed{};
      if (backing_ != nullptr && held.size != 0 && (now.off != held.off || now.size != held.size)) {
        // Closed or moved: the old range goes back to the card once its ops drained. An entry
        // re-opened over another range drains too (its old range's ops carry its generation).
        drain(w);
        backing_->close(card_, held.off, held.size);
      }
      open_[w] = now;
      break;
    }
    default: break;
  }
}

void WindowTable::reset() {
  {
    std::lock_guard lock(mu_);
    for (auto& r : open_) r = {};
    if (backing_ != nullptr) backing_->close_all(card_);
  }
  for (unsigned w = 0; w < regs::kWindowEntries; ++w) {
    auto& e = entries_[w];
    e.hbm_offset.store(0);
    e.size.store(0);
    e.key.store(0);
    e.ctrl.store(0);
    e.status.store(0);
  }
  valid_.store(0, std::memory_order_relaxed);
}

}  // namespace npo::emu
