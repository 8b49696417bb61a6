// SPDX-License-Identifier: Apache-2.0
// The graph module (npo/hal/topology_graph.hpp): breadth-first hop counts, ECMP egress sets,
// one path, path counts, diameter; light paths indexed once; a plan's graphs; and emu:mesh8
// as the generated 8-card mesh with its historical cabling.
#include <gtest/gtest.h>

#include "npo/emu/emulator.hpp"
#include "npo/hal/topology.hpp"
#include "npo/hal/topology_file.hpp"
#include "npo/hal/topology_gen.hpp"
#include "npo/hal/topology_graph.hpp"

namespace npo {
namespace {

/// A ring of `n` vertices: vertex i port 0 to vertex i+1 port 1.
FabricGraph ring(std::uint32_t n) {
  FabricGraph g(n);
  for (std::uint32_t i = 0; i < n; ++i) g.add_edge(i, 0, (i + 1) % n, 1);
  return g;
}

TEST(FabricGraph, DistancesAreBreadthFirst) {
  const auto g = ring(6);
  EXPECT_EQ(g.vertex_count(), 6u);
  EXPECT_EQ(g.edge_count(), 6u);
  EXPECT_EQ(g.distances_from(0), (std::vector<int>{0, 1, 2, 3, 2, 1}));
  FabricGraph two(3);
  two.add_edge(0, 0, 1, 0);
  EXPECT_EQ(two.distances_from(2), (std::vector<int>{-1, -1, 0}));
  EXPECT_EQ(two.distances_from(9), (std::vector<int>{-1, -1, -1})) << "out of range: nothing reachable";
}

TEST(ShortestPaths, HopsEcmpPathsAndCounts) {
  const ShortestPaths sp(ring(6));
  EXPECT_EQ(sp.hops(0, 3), 3);
  EXPECT_EQ(sp.hops(0, 0), 0);
  EXPECT_EQ(sp.hops(0, 7), -1);
  EXPECT_EQ(sp.egress_ports(0, 1), 0b01) << "port 0 leads to vertex 1";
  EXPECT_EQ(sp.egress_ports(0, 5), 0b10) << "port 1 leads back to vertex 5";
  EXPECT_EQ(sp.egress_ports(0, 3), 0b11) << "both ways round are 3 hops";
  EXPECT_EQ(sp.egress_ports(2, 2), 0);
  EXPECT_EQ(sp.path(0, 3), (std::vector<std::uint32_t>{0, 1, 2, 3})) << "lowest egress port first";
  EXPECT_EQ(sp.path(4, 4), (std::vector<std::uint32_t>{4}));
  EXPECT_EQ(sp.path_count(0, 3), 2u);
  EXPECT_EQ(sp.path_count(0, 2), 1u);
  EXPECT_EQ(sp.path_count(1, 1), 1u);
  EXPECT_EQ(sp.diameter(), 3);
  // Parallel links count as separate paths; an unreachable vertex has none.
  FabricGraph g(3);
  g.add_edge(0, 0, 1, 0);
  g.add_edge(0, 1, 1, 1);
  const ShortestPaths p(g);
  EXPECT_EQ(p.path_count(0, 1), 2u);
  EXPECT_EQ(p.egress_ports(0, 1), 0b11);
  EXPECT_EQ(p.path_count(0, 2), 0u);
  EXPECT_TRUE(p.path(0, 2).empty());
  EXPECT_EQ(p.diameter(), 1);
}

TEST(ShortestPaths, AgreeWithRouteTableOnAGeneratedTorus) {
  // RouteTable is ShortestPaths keyed by fabric ID: the torus's circuit graph and its
  // discovered form (every planned link Up) give the same answers.
  auto plan = generate_fabric(FabricKind::kTorus2d, 16, {.dims = {4, 4}});
  ASSERT_TRUE(plan.has_value());
  const ShortestPaths sp(fabric_graph(*plan, FabricView::kCircuit));
  Topology t;
  for (std::uint32_t c = 0; c < plan->cards; ++c) t.cards.push_back(fabric_id_of(c));
  for (const auto& cab : plan->cables) {
    t.links.push_back(
        TopologyLink{fabric_id_of(cab.a.node), cab.a.port, fabric_id_of(cab.b.node), cab.b.port, true, 8});
  }
  auto rt = RouteTable::compute(t);
  ASSERT_TRUE(rt.has_value()) << rt.error().to_string();
  EXPECT_EQ(sp.diameter(), 4);
  EXPECT_EQ(rt->diameter(), 4);
  for (std::uint32_t a = 0; a < plan->cards; ++a) {
    for (std::uint32_t b = 0; b < plan->cards; ++b) {
      EXPECT_EQ(rt->hops(fabric_id_of(a), fabric_id_of(b)), sp.hops(a, b));
      EXPECT_EQ(rt->egress_ports(fabric_id_of(a), fabric_id_of(b)), sp.egress_ports(a, b));
      EXPECT_EQ(rt->path_count(fabric_id_of(a), fabric_id_of(b)), sp.path_count(a, b));
      EXPECT_EQ(t.hops(fabric_id_of(a), fabric_id_of(b)), sp.hops(a, b));
    }
  }
  // (0,0) -> (2,2) on a 4x4 torus: either way round in x (2) and in y (2), C(4,2) = 6 orders.
  EXPECT_EQ(sp.path_count(0, 10), 24u);
  EXPECT_EQ(rt->unreachable_pairs(), 0u);
  // One card whose 4 links are all down: it reaches nobody and nobody reaches it, 2 x 15
  // ordered pairs.
  for (auto& l : t.links)
    if (l.a_fabric_id == fabric_id_of(5) || l.b_fabric_id == fabric_id_of(5)) l.up = false;
  auto cut = RouteTable::compute(t);
  ASSERT_TRUE(cut.has_value());
  EXPECT_EQ(cut->unreachable_pairs(), 30u);
  EXPECT_EQ(cut->hops(fabric_id_of(5), fabric_id_of(0)), -1);
}

TEST(LightPaths, IndexOnceTraceMany) {
  auto plan = parse_fabric_spec(R"(
cards: {count: 3, ports: 2}
switches: [{name: ocs, ports: 4, insertion_loss_db: 2, connect: [[0, 1]]}]
cables:
  - {a: "0:0", b: "ocs:0", loss_db: 1}
  - {a: "1:0", b: "ocs:1", loss_db: 1.5, dead_lanes: [2]}
  - {a: "2:0", b: "ocs:2"}
  - {a: "0:1", b: "2:1"}
)");
  ASSERT_TRUE(plan.has_value()) << plan.error().to_string();
  const LightPaths paths(*plan);
  EXPECT_EQ(paths.cabled_card_ports(), (std::vector<CardPort>{{0, 0}, {0, 1}, {1, 0}, {2, 0}, {2, 1}}));
  auto lp = paths.trace(0, 0);
  ASSERT_TRUE(lp.has_value());
  EXPECT_EQ(CardPort(lp->card, lp->port), (CardPort{1, 0}));
  EXPECT_DOUBLE_EQ(lp->channel.loss_db, 1 + 2 + 1.5);
  EXPECT_EQ(lp->channel.dead_lanes, 0x04);
  EXPECT_EQ(lp->switch_hops, 1u);
  EXPECT_EQ(paths.trace(0, 0), trace_light_path(*plan, 0, 0));
  EXPECT_FALSE(paths.trace(2, 0)) << "idle switch port: dark";
  EXPECT_FALSE(paths.trace(1, 1)) << "no cable";
  EXPECT_FALSE(paths.trace(3, 0)) << "no such card";
  // The circuit graph joins cards by light paths; the physical one by cables.
  const auto circuit = fabric_graph(*plan, FabricView::kCircuit);
  EXPECT_EQ(circuit.vertex_count(), 3u);
  EXPECT_EQ(circuit.edge_count(), 2u);
  const auto physical = fabric_graph(*plan, FabricView::kPhysical);
  EXPECT_EQ(physical.vertex_count(), 4u);
  EXPECT_EQ(physical.edge_count(), 4u);
}

TEST(CardNaming, FabricIdArithmeticLivesInOnePlace) {
  static_assert(fabric_id_of(0) == 1);
  static_assert(card_index_of(fabric_id_of(41)) == 41);
  EXPECT_GE(card_index_of(0), kFabricMaxCards) << "fabric ID 0 names no card of any plan";
}

TEST(EmuMesh8, IsTheGeneratedMeshWithItsHistoricalCabling) {
  auto cfg = emu::parse_uri("mesh8");
  ASSERT_TRUE(cfg.has_value()) << cfg.error().to_string();
  EXPECT_EQ(cfg->name, "mesh8");
  EXPECT_EQ(cfg->num_cards, 8u);
  EXPECT_EQ(cfg->card.num_ports, 8u) << "8-port cards; port 7 stays free";
  EXPECT_TRUE(cfg->switches.empty());
  EXPECT_TRUE(cfg->switch_cables.empty());
  EXPECT_TRUE(cfg->faults.empty());
  // The hand-cabled emu:mesh8 of before: port p of card a leads to the p-th other card.
  std::vector<std::tuple<std::uint32_t, unsigned, std::uint32_t, unsigned>> want, got;
  for (std::uint32_t a = 0; a < 8; ++a) {
    for (std::uint32_t b = a + 1; b < 8; ++b) want.emplace_back(a, b - 1, b, a);
  }
  for (const auto& c : cfg->cables) {
    got.emplace_back(c.card_a, c.port_a, c.card_b, c.port_b);
    EXPECT_EQ(c.channel, FabricChannel{});
  }
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace npo
