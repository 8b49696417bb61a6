// SPDX-License-Identifier: Apache-2.0
// drivers/gpu: topology discovery from the ports' NEIGHBOR registers (registers.md §7.1).
#include "npo/hal/topology.hpp"

#include <algorithm>
#include <bit>
#include <deque>
#include <map>

#include <fmt/format.h>

#include "gpu/device_impl.hpp"
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
    auto& d = system.device(c).impl();
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
  std::map<std::uint32_t, std::vector<std::uint32_t>> adj;
  for (const auto& l : links) {
    if (!l.up) continue;
    adj[l.a_fabric_id].push_back(l.b_fabric_id);
    adj[l.b_fabric_id].push_back(l.a_fabric_id);
  }
  std::map<std::uint32_t, int> dist{{from, 0}};
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
  for (std::size_t i = 0; i < cards.size(); ++i) {
    for (std::size_t j = 0; j < cards.size(); ++j) m[i][j] = hops(cards[i], cards[j]);
  }
  return m;
}

unsigned Topology::direct_links(std::uint32_t a, std::uint32_t b) const {
  unsigned n = 0;
  for (const auto& l : links) {
    if (l.up && ((l.a_fabric_id == a && l.b_fabric_id == b) || (l.a_fabric_id == b && l.b_fabric_id == a))) ++n;
  }
  return n;
}

}  // namespace npo
