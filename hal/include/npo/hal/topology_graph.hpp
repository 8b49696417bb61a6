// SPDX-License-Identifier: Apache-2.0
// npo-hal public API: the graph module -- the one place where the fabric is searched.
// Light paths through optical circuit switches (LightPaths), breadth-first shortest paths
// with hop counts, equal-cost egress sets and path counts (FabricGraph, ShortestPaths), and a
// plan's graph properties (analyze_fabric: degrees, diameter, bisection). Used by the topology
// files' checks, npo-emu, the emulator's wiring, discovery's comparison with the plan and
// routing (RouteTable). docs/topology.md "Graph module". No yaml-cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "npo/hal/topology_plan.hpp"

namespace npo {

// ---- Light paths ---------------------------------------------------------------------------

/// Where the light leaving one card port ends: card port -> cable -> (switch cross-connect ->
/// cable)* -> card port. Losses add: every cable's loss plus each switch's insertion loss;
/// SNR penalties add; dead lanes are OR-ed.
struct FabricLightPath {
  std::uint32_t card = 0;  ///< the far card
  unsigned port = 0;       ///< the far card's port
  FabricChannel channel{};
  unsigned switch_hops = 0;  ///< cross-connects passed through
  friend bool operator==(const FabricLightPath&, const FabricLightPath&) = default;
};

/// An index of a plan's cables and cross-connects for tracing many light paths: built once in
/// O(ports + cables), each trace then costs O(path length). Keeps a copy of the plan's
/// switches and cables, so it stays valid when the plan changes (build a new one to follow a
/// reconfiguration). Precondition: the plan validates. Value type; const methods thread-safe.
class LightPaths {
 public:
  /// An empty index: every trace is nullopt.
  LightPaths() = default;
  /// Indexes `plan`.
  explicit LightPaths(const FabricSpec& plan);
  /// The far end of card `card` port `port`, or nullopt when the port has no cable, the light
  /// ends at an idle switch port, or card/port lie outside the plan.
  [[nodiscard]] std::optional<FabricLightPath> trace(std::uint32_t card, unsigned port) const;
  /// Every card port with a cable, ascending (whether or not its light reaches a card).
  [[nodiscard]] const std::vector<CardPort>& cabled_card_ports() const noexcept { return cabled_; }

 private:
  [[nodiscard]] std::size_t dense(const FabricEnd& e) const noexcept;
  std::uint32_t cards_ = 0;
  std::vector<FabricCable> cables_;
  std::vector<double> switch_loss_;       ///< insertion loss per switch
  std::vector<std::size_t> switch_base_;  ///< dense index of each switch's port 0
  std::vector<std::int32_t> cable_;       ///< per dense port: cable index, -1 none
  std::vector<std::uint8_t> is_b_;        ///< per dense port: it is that cable's b end
  std::vector<std::int64_t> xc_;          ///< per dense switch port: partner's dense index, -1 idle
  std::vector<CardPort> cabled_;
};

/// The far end of card `card` port `port` through cables and cross-connects, or nullopt when
/// the port has no cable or the light ends at an idle switch port. Precondition: the spec
/// validates. O(plan size): to trace many ports build one LightPaths.
[[nodiscard]] std::optional<FabricLightPath> trace_light_path(const FabricSpec& spec, std::uint32_t card,
                                                              unsigned port);

// ---- Graphs and shortest paths ---------------------------------------------------------------

/// An undirected multigraph on vertices 0..n-1 whose edge ends carry the port they leave by
/// (a card's optical port; for switch vertices the switch port). Value type.
class FabricGraph {
 public:
  /// One edge seen from one end: the neighbour and the local port.
  struct Arc {
    std::uint32_t to = 0;  ///< the neighbour vertex
    unsigned port = 0;     ///< the port this end leaves by
  };
  /// A graph without vertices.
  FabricGraph() = default;
  /// A graph of `vertices` vertices and no edges.
  explicit FabricGraph(std::size_t vertices) : adj_(vertices) {}
  /// Adds the edge a (leaving by a_port) -- b (leaving by b_port). Parallel edges count
  /// separately; a loop (a == b) gives `a` two arcs (one per end) and never lies on a
  /// shortest path.
  /// Precondition: a, b < vertex_count().
  void add_edge(std::uint32_t a, unsigned a_port, std::uint32_t b, unsigned b_port);
  /// Vertices 0..n-1.
  [[nodiscard]] std::size_t vertex_count() const noexcept { return adj_.size(); }
  /// Edges added.
  [[nodiscard]] std::size_t edge_count() const noexcept { return edges_; }
  /// Edge ends at `v` (its degree; a loop appears twice). Precondition: v < vertex_count().
  [[nodiscard]] const std::vector<Arc>& arcs(std::uint32_t v) const noexcept { return adj_[v]; }
  /// Breadth-first hop counts from `src` to every vertex; -1 unreachable. O(V + E).
  [[nodiscard]] std::vector<int> distances_from(std::uint32_t src) const;
  /// Every edge once as (a, b) in insertion order (for cut counting).
  [[nodiscard]] const std::vector<std::pair<std::uint32_t, std::uint32_t>>& edges() const noexcept {
    return edge_list_;
  }

 private:
  std::vector<std::vector<Arc>> adj_;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> edge_list_;
  std::size_t edges_ = 0;
};

/// All-pairs shortest paths of a FabricGraph whose ports are card ports (< 16): hop counts,
/// the equal-cost egress-port set of every (from, to) pair, one path, path counts. Built with
/// one breadth-first search per destination, O(V (V + E)) time and 4 V² bytes: 1024 vertices
/// take ~4 MB. Value type; const methods thread-safe.
class ShortestPaths {
 public:
  /// Paths of a graph without vertices (every query answers "unreachable").
  ShortestPaths() = default;
  /// Computes the paths of `graph`; it is copied (the result does not refer to it). Arcs with
  /// a port >= kFabricMaxCardPorts are used for hop counts but never appear in an egress set.
  explicit ShortestPaths(FabricGraph graph);
  /// Vertices of the graph the paths were computed on.
  [[nodiscard]] std::size_t vertex_count() const noexcept { return graph_.vertex_count(); }
  /// Links on a shortest path: 0 for the same vertex, -1 when unreachable or out of range.
  [[nodiscard]] int hops(std::uint32_t from, std::uint32_t to) const noexcept;
  /// Ports of `from` that start a shortest path to `to` (bit n = port n); 0 when unreachable,
  /// out of range or the same vertex.
  [[nodiscard]] std::uint16_t egress_ports(std::uint32_t from, std::uint32_t to) const noexcept;
  /// One shortest path as the vertices visited, `from` first: at each step the neighbour
  /// behind the lowest egress port. Empty when unreachable.
  [[nodiscard]] std::vector<std::uint32_t> path(std::uint32_t from, std::uint32_t to) const;
  /// Distinct shortest paths from `from` to `to`, parallel links counted separately
  /// (saturates at 2^32-1); 0 when unreachable; 1 for the same vertex.
  [[nodiscard]] std::uint32_t path_count(std::uint32_t from, std::uint32_t to) const;
  /// Longest shortest path between two reachable vertices (0 when there is none).
  [[nodiscard]] int diameter() const noexcept;

 private:
  FabricGraph graph_;
  std::vector<std::int16_t> hops_;   ///< [from * n + to]
  std::vector<std::uint16_t> ecmp_;  ///< [from * n + to] egress port mask
};

// ---- Graph properties of a plan ----------------------------------------------------------------

/// Which graph of a plan to analyse.
enum class FabricView : std::uint8_t {
  kPhysical,  ///< vertices: cards and switches; edges: cables (a packet-switched reading)
  kCircuit,   ///< vertices: cards; edges: light paths through cross-connects (what trains)
};

/// The graph of `plan` in `view`: vertices 0..cards-1 are the cards (vertex = card index),
/// then (physical view) one vertex per switch in plan order. Edge ports are the card or
/// switch ports. Precondition: the plan validates.
[[nodiscard]] FabricGraph fabric_graph(const FabricSpec& plan, FabricView view);

/// Graph properties of a fabric (docs/topology.md "Graph properties").
struct FabricProperties {
  std::map<unsigned, unsigned> card_degrees;    ///< degree -> number of cards with it
  std::map<unsigned, unsigned> switch_radixes;  ///< switch port count -> number of switches
  std::map<unsigned, unsigned> switch_degrees;  ///< cabled ports of a switch -> number of switches
  unsigned edges = 0;                           ///< edges of the analysed graph
  int diameter = 0;              ///< most edges on a shortest path between two cards; -1 when disconnected
  unsigned bisection_width = 0;  ///< fewest edges cut splitting the cards in halves (sizes differ <= 1)
  bool bisection_exact = false;  ///< true: exhaustive search; false: best cut the heuristic found
};

/// Computes the properties. Diameter: breadth-first search from every card, O(N (V + E)).
/// Bisection: exhaustive over card partitions when the graph has <= 20 cards and no switches;
/// otherwise the smallest cut among all contiguous windows of card indices (each switch on the
/// side most of its neighbours are), an upper bound that equals the known bisection for the
/// generators' numbering. Precondition: the spec validates.
[[nodiscard]] FabricProperties analyze_fabric(const FabricSpec& spec, FabricView view = FabricView::kPhysical);

}  // namespace npo
