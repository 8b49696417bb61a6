// SPDX-License-Identifier: Apache-2.0
// The optical ports of one card together: construction, the route lookups of remote ops,
// the statistics snapshot, link-fault dispatch, reset and removal.
#include <cstring>

#include "card.hpp"
#include "port.hpp"
#include "system.hpp"

namespace npo::emu {

namespace regs = fw::regs;

PortSet::PortSet(Card& card, unsigned count) : card_(card) {
  ports_.reserve(count);
  for (unsigned p = 0; p < count; ++p) ports_.push_back(std::make_unique<Port>(card, mu_, p));
}

int PortSet::up_port_towards(std::uint32_t next_fid, std::uint16_t mask, std::uint32_t flow) {
  std::lock_guard lock(mu_);
  int candidates[regs::kMaxPorts];
  int n = 0;
  for (unsigned p = 0; p < ports_.size(); ++p) {
    if (mask != 0 && (mask & (1u << p)) == 0) continue;
    const Port& pm = *ports_[p];
    const std::uint64_t nb = pm.neighbor_locked();
    if (pm.state_locked() != regs::port::LinkState::kUp || !regs::port::kNeighborValid.get(nb)) continue;
    if (next_fid != 0 && regs::port::kNeighborFabricId.get(nb) != next_fid) continue;
    candidates[n++] = static_cast<int>(p);
  }
  return n == 0 ? -1 : candidates[flow % static_cast<std::uint32_t>(n)];
}

std::uint32_t PortSet::neighbor_of(unsigned p) {
  std::lock_guard lock(mu_);
  const std::uint64_t nb = ports_[p]->neighbor_locked();
  return regs::port::kNeighborValid.get(nb) ? static_cast<std::uint32_t>(regs::port::kNeighborFabricId.get(nb)) : 0;
}

std::uint64_t PortSet::fill_stats(std::byte* records) {
  namespace st = fw::stats;
  std::lock_guard lock(mu_);
  const std::uint64_t now = card_.system().sched.now_ns();
  for (unsigned p = 0; p < ports_.size(); ++p) {
    st::PortRecord r{};
    ports_[p]->fill_record_locked(r);
    std::memcpy(records + p * st::kPortRecordBytes, &r, sizeof r);
  }
  return now;
}

void PortSet::inject_fault(const Fault& f) {
  if (!f.port || *f.port >= ports_.size()) return;
  auto& sys = card_.system();
  const auto peer = sys.resolve_peer(card_.index(), *f.port);
  Port* far = nullptr;
  if (peer && peer->card < sys.cards.size() && peer->port < sys.cards[peer->card]->ports().size()) {
    far = &sys.cards[peer->card]->ports()[peer->port];
  }
  ports_[*f.port]->inject_fault(f, far);
}

void PortSet::reset() {
  std::lock_guard lock(mu_);
  for (auto& p : ports_) p->reset_locked();
}

void PortSet::remove() {
  std::lock_guard lock(mu_);
  for (auto& p : ports_) p->remove_locked();
}

}  // namespace npo::emu
