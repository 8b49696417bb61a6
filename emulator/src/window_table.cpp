// SPDX-License-Identifier: Apache-2.0
// The window translation table (registers.md §6).
#include "window_table.hpp"

#include <algorithm>

#include "npo/fw/regs.hpp"

namespace npo::emu {

namespace regs = fw::regs;

WindowTable::WindowTable(std::uint64_t hbm_bytes)
    : hbm_bytes_(hbm_bytes), entries_(new WindowEntry[regs::kWindowEntries]) {}

std::uint64_t WindowTable::read(unsigned w, std::uint32_t reg) {
  namespace wr = regs::window;
  auto& e = entries_[w];
  switch (reg) {
    case wr::kHbmOffset: return e.hbm_offset.load();
    case wr::kSize: return e.size.load();
    case wr::kKey: return e.key.load();
    case wr::kCtrl: return e.ctrl.load();
    case wr::kStatus:
      return e.status.load() | wr::kStatusInflight.make(std::min<std::uint32_t>(e.inflight.load(), 0xffff));
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
      const bool ok = !valid || (size > 0 && off % wr::kAlign == 0 && size % wr::kAlign == 0 && off <= hbm_bytes_ &&
                                 size <= hbm_bytes_ - off);
      if (!ok) {
        e.ctrl.store(ctrl & ~wr::kCtrlValid.mask());
        e.status.store(wr::kStatusBadEntry.mask());
      } else {
        e.ctrl.store(ctrl);
        e.status.store(valid ? wr::kStatusActive.mask() : 0);
      }
      break;
    }
    default: break;
  }
}

void WindowTable::reset() {
  for (unsigned w = 0; w < regs::kWindowEntries; ++w) {
    auto& e = entries_[w];
    e.hbm_offset.store(0);
    e.size.store(0);
    e.key.store(0);
    e.ctrl.store(0);
    e.status.store(0);
  }
}

}  // namespace npo::emu
