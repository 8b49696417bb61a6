// SPDX-License-Identifier: Apache-2.0
// drivers/card: topology discovery from the ports' NEIGHBOR registers (registers.md §7.1).
#include "npo/hal/topology.hpp"

#include <algorithm>
#include <bit>
#include <deque>
#include <map>
#include <unordered_map>

#include <fmt/format.h>

#include "card/device_impl.hpp"
#include "npo/fw/regs.hpp"
#include "npo/hal/system.hpp"

namespace npo {

namespace regs = fw::regs;
namespace pr = fw::regs::port;

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
    for (unsigned p = 0; p < d.info.num_ports; ++p) {
      const std::uint32_t st = d.bar0->read32(regs::port_reg(p, pr::kStatus));
      if (st == 0xffffffffu) return fail(Code::kUnavailable, "card removed", {.card = d.info.index, .port = p});
      const std::uint64_t nb = d.bar0->read64(regs::port_reg(p, pr::kNeighbor));
      if (!pr::kNeighborValid.get(nb)) continue;
      const unsigned lanes = static_cast<unsigned>(std::popcount(pr::kStatusLanesUp.get(st)));
      seen[{d.info.fabric_id, p}] =
          End{static_cast<std::uint32_t>(pr::kNeighborFabricId.get(nb)),
              static_cast<unsigned>(pr::kNeighborPort.get(nb)), pr::kStatusLinkUp.get(st) != 0, lanes};
    }
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

int Topology::hops(std::uint32_t from, std::uint32_t to) const {
  if (!std::binary_search(cards.begin(), cards.end(), from) || !std::binary_search(cards.begin(), cards.end(), to)) {
    return -1;
  }
  if (from == to) return 0;
  std::unordered_map<std::uint32_t, std::vector<std::uint32_t>> adj;
  for (const auto& l : links) {
    if (!l.up) continue;
    adj[l.a_fabric_id].push_back(l.b_fabric_id);
    adj[l.b_fabric_id].push_back(l.a_fabric_id);
  }
  std::unordered_map<std::uint32_t, int> dist{{from, 0}};
  std::deque<std::uint32_t> q{from};
  while (!q.empty()) {
    const auto u = q.front();
    q.pop_front();
    for (auto v : adj[u]) {
      if (dist.contains(v)) continue;
      dist[v] = dist[u] + 1;
      if (v == to) return dist[v];
      q.push_back(v);
    }
  }
  return -1;
}

std::vector<std::vector<int>> Topology::hop_matrix() const {
  std::vector<std::vector<int>> m(cards.size(), std::vector<int>(cards.size(), -1));
  auto rt = RouteTable::compute(*this);
  if (!rt) {  // fabric IDs outside the route table's range: fall back to one search per pair
    for (std::size_t i = 0; i < cards.size(); ++i) {
      for (std::size_t j = 0; j < cards.size(); ++j) m[i][j] = hops(cards[i], cards[j]);
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
  const std::size_t n = rt.cards_.size();
  rt.adj_.assign(n, {});
  for (const auto& l : topology.links) {
    if (!l.up) continue;
    if (l.a_port >= regs::kMaxPorts || l.b_port >= regs::kMaxPorts) {
      return fail(Code::kInvalidArgument,
                  fmt::format("route table: link {}:{} - {}:{} has a port beyond {}", l.a_fabric_id, l.a_port,
                              l.b_fabric_id, l.b_port, regs::kMaxPorts - 1));
    }
    const int a = rt.index_of(l.a_fabric_id);
    const int b = rt.index_of(l.b_fabric_id);
    if (a < 0 || b < 0 || a == b) continue;  // unknown card or a loopback: no route through it
    rt.adj_[a].emplace_back(b, l.a_port);
    rt.adj_[b].emplace_back(a, l.b_port);
  }
  // One breadth-first search per destination gives every card's distance to it; the ECMP
  // set of (u, dst) is every port of u leading to a neighbour one hop closer.
  rt.hops_.assign(n * n, -1);
  rt.ecmp_.assign(n * n, 0);
  std::vector<int> dist(n);
  std::vector<int> queue(n);
  for (std::size_t dst = 0; dst < n; ++dst) {
    std::fill(dist.begin(), dist.end(), -1);
    dist[dst] = 0;
    std::size_t head = 0;
    std::size_t tail = 0;
    queue[tail++] = static_cast<int>(dst);
    while (head < tail) {
      const int u = queue[head++];
      for (const auto& [v, port] : rt.adj_[u]) {
        if (dist[v] >= 0) continue;
        dist[v] = dist[u] + 1;
        queue[tail++] = v;
      }
    }
    for (std::size_t u = 0; u < n; ++u) {
      rt.hops_[u * n + dst] = static_cast<std::int16_t>(dist[u]);
      if (dist[u] <= 0) continue;
      std::uint16_t mask = 0;
      for (const auto& [v, port] : rt.adj_[u]) {
        if (dist[v] == dist[u] - 1) mask |= static_cast<std::uint16_t>(1u << port);
      }
      rt.ecmp_[u * n + dst] = mask;
    }
  }
  return rt;
}

int RouteTable::index_of(std::uint32_t fid) const noexcept { return fid < index_.size() ? index_[fid] : -1; }

int RouteTable::hops(std::uint32_t from, std::uint32_t to) const noexcept {
  const int a = index_of(from);
  const int b = index_of(to);
  if (a < 0 || b < 0) return -1;
  return hops_[static_cast<std::size_t>(a) * cards_.size() + static_cast<std::size_t>(b)];
}

std::uint16_t RouteTable::egress_ports(std::uint32_t from, std::uint32_t to) const noexcept {
  const int a = index_of(from);
  const int b = index_of(to);
  if (a < 0 || b < 0) return 0;
  return ecmp_[static_cast<std::size_t>(a) * cards_.size() + static_cast<std::size_t>(b)];
}

std::vector<std::uint32_t> RouteTable::path(std::uint32_t from, std::uint32_t to) const {
  std::vector<std::uint32_t> out;
  int u = index_of(from);
  const int dst = index_of(to);
  if (u < 0 || dst < 0 || hops(from, to) < 0) return out;
  const std::size_t n = cards_.size();
  out.push_back(from);
  while (u != dst) {
    const std::uint16_t mask = ecmp_[static_cast<std::size_t>(u) * n + static_cast<std::size_t>(dst)];
    const auto port = static_cast<unsigned>(std::countr_zero(mask));
    int next = -1;
    for (const auto& [v, p] : adj_[u]) {
      if (p == port && hops_[static_cast<std::size_t>(v) * n + static_cast<std::size_t>(dst)] ==
                           hops_[static_cast<std::size_t>(u) * n + static_cast<std::size_t>(dst)] - 1) {
        next = v;
        break;
      }
    }
    if (next < 0) return {};  // unreachable by construction; defensive
    u = next;
    out.push_back(cards_[static_cast<std::size_t>(u)]);
  }
  return out;
}

std::uint32_t RouteTable::path_count(std::uint32_t from, std::uint32_t to) const {
  const int src = index_of(from);
  const int dst = index_of(to);
  if (src < 0 || dst < 0 || hops(from, to) < 0) return 0;
  const std::size_t n = cards_.size();
  // Count paths on the shortest-path DAG towards dst, nearest cards first.
  std::vector<std::size_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = i;
  auto d = [&](std::size_t u) { return hops_[u * n + static_cast<std::size_t>(dst)]; };
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return d(a) < d(b); });
  std::vector<std::uint64_t> count(n, 0);
  count[static_cast<std::size_t>(dst)] = 1;
  constexpr std::uint64_t kMax = 0xffffffffu;
  for (const std::size_t u : order) {
    if (d(u) <= 0) continue;
    std::uint64_t c = 0;
    for (const auto& [v, port] : adj_[u]) {
      if (d(static_cast<std::size_t>(v)) == d(u) - 1) c = std::min(kMax, c + count[static_cast<std::size_t>(v)]);
    }
    count[u] = c;
  }
  return static_cast<std::uint32_t>(count[static_cast<std::size_t>(src)]);
}

int RouteTable::diameter() const noexcept {
  int best = 0;
  for (const auto h : hops_) best = std::max<int>(best, h);
  return best;
}

Result<void> program_routes(System& system, const RouteTable& routes) {
  for (std::size_t c = 0; c < system.device_count(); ++c) {
    auto& d = impl_of(system.device(c));
    const std::uint32_t self = d.info.fabric_id;
    if (d.bar0->read32(regs::global::kMagic) == 0xffffffffu) {
      return fail(Code::kUnavailable, "card removed", {.card = d.info.index});
    }
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
