// SPDX-License-Identifier: Apache-2.0
// drivers/card: topology discovery from the ports' NEIGHBOR registers (registers.md §7.1).
#include "npo/hal/topology.hpp"

#include <algorithm>
#include <bit>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "card/device_impl.hpp"
#include "npo/fw/regs.hpp"
#include "npo/hal/system.hpp"

namespace npo {

namespace regs = fw::regs;
namespace pr = fw::regs::port;

// The plan's limits (npo/hal/topology_plan.hpp) are the card's (registers.md).
static_assert(kFabricMaxCardPorts == regs::kMaxPorts);
static_assert(kFabricLanesPerPort == regs::kLanesPerPort);
static_assert(kFabricMaxCards < regs::kRouteEntries, "every plan card's fabric ID has a route entry");

Result<Topology> discover_topology(System& system) {
  Topology t;
  struct End {
    std::uint32_t fid;
    unsigned port;
    bool up;
    unsigned lanes;
  };
  // (fabric id, port) -> what that port learned about its neighbour
  std::map<std::pair<std::uint32_t, unsigned>, End> seen;
  for (std::size_t c = 0; c < system.device_count(); ++c) {
    auto& d = impl_of(system.device(c));
    t.cards.push_back(d.info.fabric_id);
    // A removed card answers all-ones: it stays a card of the fabric, without links (an island),
    // so the routes of the cards that remain are still computed around it.
    if (d.bar0->read32(regs::global::kMagic) == 0xffffffffu) continue;
    std::map<std::pair<std::uint32_t, unsigned>, End> mine;
    bool removed = false;
    for (unsigned p = 0; p < d.info.num_ports && !removed; ++p) {
      const std::uint32_t st = d.bar0->read32(regs::port_reg(p, pr::kStatus));
      removed = st == 0xffffffffu;  // removed between the reads: none of its ports is trusted
      const std::uint64_t nb = d.bar0->read64(regs::port_reg(p, pr::kNeighbor));
      if (removed || !pr::kNeighborValid.get(nb)) continue;
      const unsigned lanes = static_cast<unsigned>(std::popcount(pr::kStatusLanesUp.get(st)));
      mine[{d.info.fabric_id, p}] =
          End{static_cast<std::uint32_t>(pr::kNeighborFabricId.get(nb)),
              static_cast<unsigned>(pr::kNeighborPort.get(nb)), pr::kStatusLinkUp.get(st) != 0, lanes};
    }
    if (!removed) seen.merge(mine);
  }
  std::sort(t.cards.begin(), t.cards.end());
  for (const auto& [here, there] : seen) {
    const auto back = seen.find({there.fid, there.port});
    const bool mutual = back != seen.end() && back->second.fid == here.first && back->second.port == here.second;
    if (mutual && std::pair(there.fid, there.port) < here) continue;  // reported from the other end
    t.links.push_back(TopologyLink{here.first, here.second, there.fid, there.port, mutual && there.up, there.lanes});
  }
  return t;
}

namespace {

/// The graph of `t`'s Up links, vertices = positions in `cards` (ascending fabric IDs); links
/// to a card not in `cards` and loopbacks are left out (no route goes through them).
FabricGraph up_graph(const Topology& t, const std::vector<std::uint32_t>& cards) {
  FabricGraph g(cards.size());
  auto pos = [&](std::uint32_t fid) -> std::optional<std::uint32_t> {
    const auto it = std::lower_bound(cards.begin(), cards.end(), fid);
    if (it == cards.end() || *it != fid) return std::nullopt;
    return static_cast<std::uint32_t>(it - cards.begin());
  };
  for (const auto& l : t.links) {
    if (!l.up) continue;
    const auto a = pos(l.a_fabric_id), b = pos(l.b_fabric_id);
    if (!a || !b || *a == *b) continue;
    g.add_edge(*a, l.a_port, *b, l.b_port);
  }
  return g;
}

}  // namespace

int Topology::hops(std::uint32_t from, std::uint32_t to) const {
  const auto a = std::lower_bound(cards.begin(), cards.end(), from);
  const auto b = std::lower_bound(cards.begin(), cards.end(), to);
  if (a == cards.end() || *a != from || b == cards.end() || *b != to) return -1;
  if (from == to) return 0;
  const auto dist = up_graph(*this, cards).distances_from(static_cast<std::uint32_t>(a - cards.begin()));
  return dist[static_cast<std::size_t>(b - cards.begin())];
}

std::vector<std::vector<int>> Topology::hop_matrix() const {
  std::vector<std::vector<int>> m(cards.size(), std::vector<int>(cards.size(), -1));
  auto rt = RouteTable::compute(*this);
  if (!rt) {  // fabric IDs outside the route table's range: one search per card
    const FabricGraph g = up_graph(*this, cards);
    for (std::size_t i = 0; i < cards.size(); ++i) {
      const auto dist = g.distances_from(static_cast<std::uint32_t>(i));
      for (std::size_t j = 0; j < cards.size(); ++j) m[i][j] = dist[j];
    }
    return m;
  }
  for (std::size_t i = 0; i < cards.size(); ++i) {
    for (std::size_t j = 0; j < cards.size(); ++j) m[i][j] = rt->hops(cards[i], cards[j]);
  }
  return m;
}

// ==== Routing ==============================================================================

Result<RouteTable> RouteTable::compute(const Topology& topology) {
  RouteTable rt;
  rt.cards_ = topology.cards;
  std::sort(rt.cards_.begin(), rt.cards_.end());
  rt.cards_.erase(std::unique(rt.cards_.begin(), rt.cards_.end()), rt.cards_.end());
  rt.index_.assign(regs::kRouteEntries, -1);
  for (std::size_t i = 0; i < rt.cards_.size(); ++i) {
    const auto fid = rt.cards_[i];
    if (fid == 0 || fid >= regs::kRouteEntries) {
      return fail(Code::kInvalidArgument,
                  fmt::format("route table: fabric ID {} outside 1..{}", fid, regs::kRouteEntries - 1));
    }
    rt.index_[fid] = static_cast<int>(i);
  }
  for (const auto& l : topology.links) {
    if (l.up && (l.a_port >= regs::kMaxPorts || l.b_port >= regs::kMaxPorts)) {
      return fail(Code::kInvalidArgument,
                  fmt::format("route table: link {}:{} - {}:{} has a port beyond {}", l.a_fabric_id, l.a_port,
                              l.b_fabric_id, l.b_port, regs::kMaxPorts - 1));
    }
  }
  rt.paths_ = ShortestPaths(up_graph(topology, rt.cards_));
  return rt;
}

std::uint32_t RouteTable::index_of(std::uint32_t fid) const noexcept {
  return fid < index_.size() && index_[fid] >= 0 ? static_cast<std::uint32_t>(index_[fid]) : ~0u;
}

int RouteTable::hops(std::uint32_t from, std::uint32_t to) const noexcept {
  return paths_.hops(index_of(from), index_of(to));
}

std::uint16_t RouteTable::egress_ports(std::uint32_t from, std::uint32_t to) const noexcept {
  return paths_.egress_ports(index_of(from), index_of(to));
}

std::vector<std::uint32_t> RouteTable::path(std::uint32_t from, std::uint32_t to) const {
  std::vector<std::uint32_t> out = paths_.path(index_of(from), index_of(to));
  for (auto& v : out) v = cards_[v];
  return out;
}

std::uint32_t RouteTable::path_count(std::uint32_t from, std::uint32_t to) const {
  return paths_.path_count(index_of(from), index_of(to));
}

int RouteTable::diameter() const noexcept { return paths_.diameter(); }

std::size_t RouteTable::unreachable_pairs() const noexcept {
  std::size_t n = 0;
  for (const std::uint32_t a : cards_)
    for (const std::uint32_t b : cards_) n += a != b && hops(a, b) < 0 ? 1 : 0;
  return n;
}

Result<void> program_routes(System& system, const RouteTable& routes) {
  for (std::size_t c = 0; c < system.device_count(); ++c) {
    auto& d = impl_of(system.device(c));
    const std::uint32_t self = d.info.fabric_id;
    // A removed card takes no writes; the others are programmed all the same.
    if (d.bar0->read32(regs::global::kMagic) == 0xffffffffu) continue;
    for (std::uint32_t dst = 1; dst < regs::kRouteEntries; ++dst) {
      const std::uint16_t mask = dst == self ? 0 : routes.egress_ports(self, dst);
      const std::uint32_t v = mask != 0 ? (regs::route::kPortMask.make(mask) | regs::route::kValid.make(1)) : 0;
      d.bar0->write32(regs::route_reg(dst), v);
    }
  }
  return {};
}

Result<void> set_route(Device& device, std::uint32_t dst_fabric_id, std::uint16_t port_mask) {
  auto& d = impl_of(device);
  if (dst_fabric_id == 0 || dst_fabric_id >= regs::kRouteEntries) {
    return fail(Code::kOutOfRange,
                fmt::format("route to fabric ID {}: must be 1..{}", dst_fabric_id, regs::kRouteEntries - 1),
                {.card = d.info.index});
  }
  if ((port_mask >> d.info.num_ports) != 0) {
    return fail(Code::kOutOfRange,
                fmt::format("route port mask 0x{:x} names ports beyond the card's {}", port_mask, d.info.num_ports),
                {.card = d.info.index});
  }
  if (d.bar0->read32(regs::global::kMagic) == 0xffffffffu) {
    return fail(Code::kUnavailable, "card removed", {.card = d.info.index});
  }
  const std::uint32_t v = port_mask != 0 ? (regs::route::kPortMask.make(port_mask) | regs::route::kValid.make(1)) : 0;
  d.bar0->write32(regs::route_reg(dst_fabric_id), v);
  return {};
}

Result<RouteTable> route_fabric(System& system) {
  auto t = discover_topology(system);
  if (!t) return std::unexpected(t.error());
  auto rt = RouteTable::compute(*t);
  if (!rt) return rt;
  if (auto r = program_routes(system, *rt); !r) return std::unexpected(r.error());
  return rt;
}

unsigned Topology::direct_links(std::uint32_t a, std::uint32_t b) const {
  unsigned n = 0;
  for (const auto& l : links) {
    if (l.up && ((l.a_fabric_id == a && l.b_fabric_id == b) || (l.a_fabric_id == b && l.b_fabric_id == a))) ++n;
  }
  return n;
}

}  // namespace npo
