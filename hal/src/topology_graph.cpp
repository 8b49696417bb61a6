// SPDX-License-Identifier: Apache-2.0
// The graph module: light paths through optical circuit switches, breadth-first shortest
// paths with ECMP egress sets and path counts, and graph properties of a plan
// (docs/topology.md "Graph module"). No yaml-cpp.
#include "npo/hal/topology_graph.hpp"

#include <algorithm>
#include <bit>

namespace npo {

// ==== Light paths =============================================================================

LightPaths::LightPaths(const FabricSpec& plan) : cards_(plan.cards), cables_(plan.cables) {
  std::size_t total = std::size_t{plan.cards} * kFabricMaxCardPorts;
  for (const auto& sw : plan.switches) {
    switch_base_.push_back(total);
    switch_loss_.push_back(sw.insertion_loss_db);
    total += sw.ports;
  }
  cable_.assign(total, -1);
  is_b_.assign(total, 0);
  xc_.assign(total, -1);
  for (std::size_t i = 0; i < cables_.size(); ++i) {
    cable_[dense(cables_[i].a)] = static_cast<std::int32_t>(i);
    const auto b = dense(cables_[i].b);
    cable_[b] = static_cast<std::int32_t>(i);
    is_b_[b] = 1;
  }
  for (std::size_t w = 0; w < plan.switches.size(); ++w) {
    for (const auto& [x, y] : plan.switches[w].cross_connects) {
      xc_[switch_base_[w] + x] = static_cast<std::int64_t>(switch_base_[w] + y);
      xc_[switch_base_[w] + y] = static_cast<std::int64_t>(switch_base_[w] + x);
    }
  }
  for (std::size_t d = 0; d < std::size_t{plan.cards} * kFabricMaxCardPorts; ++d) {
    if (cable_[d] >= 0) {
      cabled_.push_back(CardPort{static_cast<std::uint32_t>(d / kFabricMaxCardPorts),
                                 static_cast<unsigned>(d % kFabricMaxCardPorts)});
    }
  }
}

std::size_t LightPaths::dense(const FabricEnd& e) const noexcept {
  return e.on_switch ? switch_base_[e.node] + e.port : std::size_t{e.node} * kFabricMaxCardPorts + e.port;
}

std::optional<FabricLightPath> LightPaths::trace(std::uint32_t card, unsigned port) const {
  if (card >= cards_ || port >= kFabricMaxCardPorts) return std::nullopt;
  std::size_t at = std::size_t{card} * kFabricMaxCardPorts + port;
  FabricLightPath p;
  p.channel = FabricChannel{0.0, 0.0, 0};
  // Each pass crosses one cross-connect; more passes than switch ports means a loop of
  // switch-to-switch cables, which has no card at its end.
  for (std::size_t guard = 0; guard <= xc_.size(); ++guard) {
    const std::int32_t ci = cable_[at];
    if (ci < 0) return std::nullopt;
    const auto& c = cables_[static_cast<std::size_t>(ci)];
    p.channel.loss_db += c.channel.loss_db;
    p.channel.snr_penalty_db += c.channel.snr_penalty_db;
    p.channel.dead_lanes |= c.channel.dead_lanes;
    const FabricEnd far = is_b_[at] ? c.a : c.b;
    if (!far.on_switch) {
      p.card = far.node;
      p.port = far.port;
      return p;
    }
    const std::int64_t next = xc_[dense(far)];
    if (next < 0) return std::nullopt;
    p.channel.loss_db += switch_loss_[far.node];
    ++p.switch_hops;
    at = static_cast<std::size_t>(next);
  }
  return std::nullopt;
}

std::optional<FabricLightPath> trace_light_path(const FabricSpec& spec, std::uint32_t card, unsigned port) {
  return LightPaths(spec).trace(card, port);
}

// ==== Graphs ===================================================================================

void FabricGraph::add_edge(std::uint32_t a, unsigned a_port, std::uint32_t b, unsigned b_port) {
  adj_[a].push_back(Arc{b, a_port});
  adj_[b].push_back(Arc{a, b_port});
  edge_list_.emplace_back(a, b);
  ++edges_;
}

std::vector<int> FabricGraph::distances_from(std::uint32_t src) const {
  std::vector<int> dist(adj_.size(), -1);
  if (src >= adj_.size()) return dist;
  std::vector<std::uint32_t> queue(adj_.size());
  std::size_t head = 0, tail = 0;
  dist[src] = 0;
  queue[tail++] = src;
  while (head < tail) {
    const auto u = queue[head++];
    for (const auto& arc : adj_[u]) {
      if (dist[arc.to] >= 0) continue;
      dist[arc.to] = dist[u] + 1;
      queue[tail++] = arc.to;
    }
  }
  return dist;
}

// ==== Shortest paths ===========================================================================

ShortestPaths::ShortestPaths(FabricGraph graph) : graph_(std::move(graph)) {
  const std::size_t n = graph_.vertex_count();
  hops_.assign(n * n, -1);
  ecmp_.assign(n * n, 0);
  // One breadth-first search per destination gives every vertex's distance to it (the graph
  // is undirected); the ECMP set of (u, dst) is every port of u leading one hop closer.
  for (std::size_t dst = 0; dst < n; ++dst) {
    const auto dist = graph_.distances_from(static_cast<std::uint32_t>(dst));
    for (std::size_t u = 0; u < n; ++u) {
      hops_[u * n + dst] = static_cast<std::int16_t>(dist[u]);
      if (dist[u] <= 0) continue;
      std::uint16_t mask = 0;
      for (const auto& arc : graph_.arcs(static_cast<std::uint32_t>(u))) {
        if (dist[arc.to] == dist[u] - 1 && arc.port < kFabricMaxCardPorts) {
          mask |= static_cast<std::uint16_t>(1u << arc.port);
        }
      }
      ecmp_[u * n + dst] = mask;
    }
  }
}

int ShortestPaths::hops(std::uint32_t from, std::uint32_t to) const noexcept {
  const std::size_t n = graph_.vertex_count();
  if (from >= n || to >= n) return -1;
  return hops_[std::size_t{from} * n + to];
}

std::uint16_t ShortestPaths::egress_ports(std::uint32_t from, std::uint32_t to) const noexcept {
  const std::size_t n = graph_.vertex_count();
  if (from >= n || to >= n) return 0;
  return ecmp_[std::size_t{from} * n + to];
}

std::vector<std::uint32_t> ShortestPaths::path(std::uint32_t from, std::uint32_t to) const {
  std::vector<std::uint32_t> out;
  if (hops(from, to) < 0) return out;
  out.push_back(from);
  std::uint32_t u = from;
  while (u != to) {
    const int here = hops(u, to);
    std::optional<std::uint32_t> next;
    unsigned best_port = ~0u;
    for (const auto& arc : graph_.arcs(u)) {  // the neighbour behind the lowest egress port
      if (hops(arc.to, to) == here - 1 && arc.port < best_port) {
        best_port = arc.port;
        next = arc.to;
      }
    }
    if (!next) return {};  // unreachable by construction; defensive
    u = *next;
    out.push_back(u);
  }
  return out;
}

std::uint32_t ShortestPaths::path_count(std::uint32_t from, std::uint32_t to) const {
  if (hops(from, to) < 0) return 0;
  const std::size_t n = graph_.vertex_count();
  // Count paths on the shortest-path DAG towards `to`, nearest vertices first.
  std::vector<std::uint32_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = static_cast<std::uint32_t>(i);
  auto d = [&](std::uint32_t u) { return hops(u, to); };
  std::sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) { return d(a) < d(b); });
  std::vector<std::uint64_t> count(n, 0);
  count[to] = 1;
  constexpr std::uint64_t kMax = 0xffffffffu;
  for (const auto u : order) {
    if (d(u) <= 0) continue;
    std::uint64_t c = 0;
    for (const auto& arc : graph_.arcs(u)) {
      if (d(arc.to) == d(u) - 1) c = std::min(kMax, c + count[arc.to]);
    }
    count[u] = c;
  }
  return static_cast<std::uint32_t>(count[from]);
}

int ShortestPaths::diameter() const noexcept {
  int best = 0;
  for (const auto h : hops_) best = std::max<int>(best, h);
  return best;
}

// ==== Graphs of a plan =========================================================================

FabricGraph fabric_graph(const FabricSpec& plan, FabricView view) {
  const std::uint32_t nc = plan.cards;
  if (view == FabricView::kPhysical) {
    FabricGraph g(std::size_t{nc} + plan.switches.size());
    auto vtx = [&](const FabricEnd& e) { return e.on_switch ? nc + e.node : e.node; };
    for (const auto& c : plan.cables) g.add_edge(vtx(c.a), c.a.port, vtx(c.b), c.b.port);
    return g;
  }
  FabricGraph g(nc);
  const LightPaths paths(plan);
  for (const auto& here : paths.cabled_card_ports()) {
    const auto lp = paths.trace(here.card, here.port);
    if (lp && here < CardPort{lp->card, lp->port}) g.add_edge(here.card, here.port, lp->card, lp->port);
  }
  return g;
}

namespace {

/// Fewest edges cut splitting the cards 0..nc-1 in halves; see analyze_fabric.
void bisection(const FabricGraph& g, std::size_t nc, FabricProperties& pr) {
  const std::size_t nv = g.vertex_count();
  const std::size_t half = nc / 2;
  const auto& edges = g.edges();
  unsigned best = ~0u;
  if (nc <= 20 && nv == nc) {
    const std::uint32_t full = (1u << nc) - 1;
    for (std::uint32_t m = 1; m <= full; m += 2) {  // card 0 always on side 1 (symmetry)
      const auto ones = static_cast<std::size_t>(std::popcount(m));
      if (ones != half && ones != nc - half) continue;
      unsigned cut = 0;
      for (auto [a, b] : edges) cut += ((m >> a) & 1u) != ((m >> b) & 1u);
      best = std::min(best, cut);
    }
    pr.bisection_width = best;
    pr.bisection_exact = true;
    return;
  }
  std::vector<std::uint8_t> side(nv, 0);
  const std::size_t step = nc > 1024 ? nc / 1024 : 1;
  for (std::size_t off = 0; off < nc; off += step) {
    for (std::size_t c = 0; c < nc; ++c) side[c] = ((c + nc - off) % nc) < half ? 1 : 0;
    // Switches: on the side most of their neighbours are, a few sweeps (leaves first, then spines).
    for (std::size_t v = nc; v < nv; ++v) side[v] = 0;
    for (int sweep = 0; sweep < 3; ++sweep) {
      for (std::size_t v = nc; v < nv; ++v) {
        int ones = 0, zeros = 0;
        for (const auto& arc : g.arcs(static_cast<std::uint32_t>(v))) {
          if (arc.to >= nc && sweep == 0 && arc.to > v) continue;  // not placed yet in the first sweep
          (side[arc.to] ? ones : zeros)++;
        }
        side[v] = ones > zeros ? 1 : 0;
      }
    }
    unsigned cut = 0;
    for (auto [a, b] : edges) cut += side[a] != side[b];
    best = std::min(best, cut);
  }
  pr.bisection_width = best;
  pr.bisection_exact = false;
}

}  // namespace

FabricProperties analyze_fabric(const FabricSpec& s, FabricView view) {
  FabricProperties pr;
  const std::size_t nc = s.cards;
  const FabricGraph g = fabric_graph(s, view);
  pr.edges = static_cast<unsigned>(g.edge_count());
  auto degree = [&](std::size_t v) { return static_cast<unsigned>(g.arcs(static_cast<std::uint32_t>(v)).size()); };
  for (std::size_t v = 0; v < nc; ++v) ++pr.card_degrees[degree(v)];
  for (const auto& sw : s.switches) ++pr.switch_radixes[sw.ports];
  if (view == FabricView::kPhysical) {
    for (std::size_t v = nc; v < g.vertex_count(); ++v) ++pr.switch_degrees[degree(v)];
  }
  // Diameter: breadth-first search from every card, over all vertices, measured between cards.
  for (std::uint32_t src = 0; src < nc && pr.diameter >= 0; ++src) {
    const auto dist = g.distances_from(src);
    for (std::size_t c = 0; c < nc; ++c) {
      if (dist[c] < 0) {
        pr.diameter = -1;
        break;
      }
      pr.diameter = std::max(pr.diameter, dist[c]);
    }
  }
  if (nc >= 2) bisection(g, nc, pr);
  return pr;
}

}  // namespace npo
