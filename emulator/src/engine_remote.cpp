// SPDX-License-Identifier: Apache-2.0
// The DMA engine model's remote ops (docs/spec/dma.md §2.1, §3.2; registers.md §3.8, §6, §8):
// routed over the fabric, admitted by the target card's partition, then checked against
// the target's window entry (generation, key, rights, range) and moved in chunks that each
// re-check a revocation.
#include <algorithm>
#include <cstring>

#include "queue.hpp"

namespace npo::emu {

namespace regs = fw::regs;
namespace dma = fw::dma;
using dma::Status;

namespace {
constexpr std::uint64_t kChunk = 256u << 10;  // bytes per remote-window revocation check
}  // namespace

Status QueueModel::remote(const dma::Descriptor& d, std::uint64_t* info) {
  const bool is_write = d.opcode() == dma::Opcode::kRemoteWrite;
  const std::uint32_t len = d.length();
  const std::uint8_t fl = d.op_flags();
  FabricState& fab = host_.fabric();
  const std::uint32_t ti = card_index_of(d.remote_card());
  const std::uint32_t self = host_.card_index();
  // Routed through the fabric (registers.md §8): hop by hop over Up links, following each
  // card's route table, or a direct link when the source has no entry for the target.
  bool reachable = ti == self;  // a card's own windows: loopback, no link needed
  if (!reachable && ti < fab.cards() && !fab.card(ti).has(CardState::kRemoved)) {
    reachable = fab.route_reachable(self, d.remote_card(), index_);
  }
  const std::uint64_t target_hbm = reachable ? fab.card(ti).hbm_bytes.load(std::memory_order_relaxed) : 0;
  if (target_hbm == 0) {
    *info = d.remote_card();
    return Status::kRemoteUnreachable;
  }
  // The target admits only its own partition (registers.md §3.8), before it looks at the window.
  if (fab.card(ti).partition.load(std::memory_order_acquire) !=
      host_.state().partition.load(std::memory_order_acquire)) {
    *info = d.remote_card();
    return Status::kPartitionDenied;
  }
  const unsigned w = d.window();
  if (w >= regs::kWindowEntries) return Status::kWindowInvalid;
  WindowEntry& e = fab.card(ti).windows[w];
  // In flight on the window from here (STATUS.INFLIGHT, FabricState::window_inflight): the
  // record before the first look at CTRL, so a revoker that saw no record also made us see the
  // revoke (both seq_cst: the host writes CTRL, then reads STATUS).
  st_.remote_window.store(((std::uint64_t{ti} + 1) << 32) | w, std::memory_order_seq_cst);
  struct Release {
    std::atomic<std::uint64_t>& r;
    ~Release() { r.store(0, std::memory_order_release); }
  } release{st_.remote_window};
  namespace wr = regs::window;
  auto check = [&]() -> Status {
    const std::uint32_t ctrl = e.ctrl.load(std::memory_order_seq_cst);
    if (!wr::kCtrlValid.get(ctrl)) {
      // Generation 0: the entry was never used since reset. Otherwise it was revoked.
      const auto g = wr::kCtrlGeneration.get(ctrl);
      return g != 0 && g != d.generation() ? Status::kWindowRevoked : Status::kWindowInvalid;
    }
    if (wr::kCtrlGeneration.get(ctrl) != d.generation()) return Status::kWindowRevoked;
    return Status::kOk;
  };
  if (auto st = check(); st != Status::kOk) return st;
  if (e.key.load() != d.key()) return Status::kWindowKey;
  const std::uint32_t ctrl = e.ctrl.load();
  if (is_write ? !wr::kCtrlWrite.get(ctrl) : !wr::kCtrlRead.get(ctrl)) return Status::kWindowRights;
  const std::uint64_t woff = is_write ? d.dst() : d.src();
  const std::uint64_t wsize = e.size.load();
  const std::uint64_t wbase = e.hbm_offset.load();
  // The entry was checked against the card's HBM when committed; it is checked here too.
  if (woff > wsize || len > wsize - woff || wbase > target_hbm || wsize > target_hbm - wbase) {
    *info = woff;
    return Status::kWindowRange;
  }
  std::span<std::byte> window;
  switch (host_.window_hbm(index_, ti, w, d.generation(), d.key(), wbase, wsize, &window)) {
    case EngineHost::WindowAccess::kMapped: break;
    case EngineHost::WindowAccess::kImport: import_wait_ = true; return Status::kOk;  // not completed: see run()
    case EngineHost::WindowAccess::kRefused: return Status::kWindowRevoked;
  }
  std::byte* remote = window.data() + woff;
  const std::uint64_t local = is_write ? d.src() : d.dst();
  const bool local_hbm = (fl & (is_write ? dma::flags::kSrcHbm : dma::flags::kDstHbm)) != 0;
  const auto hbm = host_.hbm();
  if (local_hbm && (local > hbm.size() || len > hbm.size() - local)) {
    *info = local;
    return Status::kHbmRange;
  }
  for (std::uint64_t done = 0; done < len;) {
    if (auto st = check(); st != Status::kOk) return st;  // revoked mid-transfer: stop here
    const std::uint64_t n = std::min<std::uint64_t>(kChunk, len - done);
    if (local_hbm) {
      if (is_write) {
        std::memmove(remote + done, hbm.data() + local + done, n);
      } else {
        std::memmove(hbm.data() + local + done, remote + done, n);
      }
    } else {
      const auto st = host_access(local + done, n, !is_write, false, remote + done, info);
      if (st != Status::kOk) return st;
    }
    done += n;
  }
  *info = len;
  return Status::kOk;
}

}  // namespace npo::emu
