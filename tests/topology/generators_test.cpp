// SPDX-License-Identifier: Apache-2.0
// Generators against the graph formulas (docs/topology.md "Generators", "Graph properties"):
// k-ary n-cube diameter n*floor(k/2) and bisection 2*N/k for even k; hypercube 2^d degree d,
// diameter d, bisection 2^(d-1); full mesh degree N-1, diameter 1, bisection floor(N/2)*ceil(N/2);
// two-level Clos through circuit switches: card-leaf-spine-leaf-card diameter 4, bisection
// N*u/2, leaf and spine radix; dragonfly diameter 3 and (G/2)^2 global links across.
#include <map>
#include <numeric>

#include <gtest/gtest.h>

#include "npo/hal/fabric_spec.hpp"

namespace npo {
namespace {

FabricSpec gen(FabricKind k, unsigned n, FabricGenOptions o = {}) {
  auto s = generate_fabric(k, n, o);
  EXPECT_TRUE(s.has_value()) << (s ? "" : s.error().to_string());
  return s.value_or(FabricSpec{});
}

std::map<unsigned, unsigned> regular(unsigned cards, unsigned degree) { return {{degree, cards}}; }

struct TorusCase {
  std::vector<unsigned> dims;
};

class TorusTest : public testing::TestWithParam<TorusCase> {};

TEST_P(TorusTest, DegreeDiameterBisectionMatchKaryNcube) {
  const auto& dims = GetParam().dims;
  const unsigned n = std::accumulate(dims.begin(), dims.end(), 1u, std::multiplies<>());
  const auto kind = dims.size() == 2 ? FabricKind::kTorus2d : FabricKind::kTorus3d;
  const auto s = gen(kind, n, {.dims = dims});
  ASSERT_EQ(s.cards, n);
  EXPECT_EQ(s.ports, 2 * dims.size());
  EXPECT_EQ(s.cables.size(), n * dims.size());  // every k >= 3: n links per dimension
  const auto p = analyze_fabric(s);
  EXPECT_EQ(p.card_degrees, regular(n, 2 * static_cast<unsigned>(dims.size())));
  unsigned diameter = 0;
  for (auto k : dims) diameter += k / 2;
  EXPECT_EQ(p.diameter, static_cast<int>(diameter));
  const unsigned kmax = *std::max_element(dims.begin(), dims.end());
  EXPECT_EQ(p.bisection_width, 2 * n / kmax) << "cut across the longest (even) dimension";
  EXPECT_TRUE(p.switch_radixes.empty());
  // No switches: both views are the same graph.
  const auto c = analyze_fabric(s, FabricView::kCircuit);
  EXPECT_EQ(c.edges, p.edges);
  EXPECT_EQ(c.diameter, p.diameter);
}

INSTANTIATE_TEST_SUITE_P(Sizes, TorusTest,
                         testing::Values(TorusCase{{4, 4}}, TorusCase{{8, 8}}, TorusCase{{4, 4, 4}},
                                         TorusCase{{8, 8, 16}}, TorusCase{{16, 64}}),
                         [](const auto& p) {
                           std::string n;
                           for (auto d : p.param.dims) n += (n.empty() ? "" : "x") + std::to_string(d);
                           return n;
                         });

TEST(Generators, TorusSmallExactBisection) {
  const auto p = analyze_fabric(gen(FabricKind::kTorus2d, 16, {.dims = {4, 4}}));
  EXPECT_TRUE(p.bisection_exact);
  EXPECT_EQ(p.bisection_width, 8u);
}

TEST(Generators, TorusAutoDimsNearCubic) {
  auto s = gen(FabricKind::kTorus3d, 1024);
  EXPECT_EQ(s.name, "torus 8x8x16");
  s = gen(FabricKind::kTorus3d, 64);
  EXPECT_EQ(s.name, "torus 4x4x4");
  s = gen(FabricKind::kTorus2d, 64);
  EXPECT_EQ(s.name, "torus 8x8");
  const auto p = analyze_fabric(gen(FabricKind::kTorus3d, 1024));
  EXPECT_EQ(p.diameter, 16);
  EXPECT_EQ(p.bisection_width, 128u);
}

TEST(Generators, TorusTwoCardRingHasOneLink) {
  const auto s = gen(FabricKind::kTorus3d, 16, {.dims = {2, 2, 4}});
  const auto p = analyze_fabric(s);
  EXPECT_EQ(p.card_degrees, regular(16, 4));  // 1 + 1 + 2
  EXPECT_EQ(p.diameter, 1 + 1 + 2);
}

class HypercubeTest : public testing::TestWithParam<unsigned> {};

TEST_P(HypercubeTest, DegreeDiameterBisection) {
  const unsigned d = GetParam(), n = 1u << d;
  const auto s = gen(FabricKind::kHypercube, n);
  const auto p = analyze_fabric(s);
  EXPECT_EQ(p.card_degrees, regular(n, d));
  EXPECT_EQ(p.diameter, static_cast<int>(d));
  EXPECT_EQ(p.bisection_width, n / 2);
  EXPECT_EQ(p.edges, n * d / 2);
}

INSTANTIATE_TEST_SUITE_P(Sizes, HypercubeTest, testing::Values(2u, 4u, 6u, 10u));

class MeshTest : public testing::TestWithParam<unsigned> {};

TEST_P(MeshTest, DegreeDiameterBisection) {
  const unsigned n = GetParam();
  const auto p = analyze_fabric(gen(FabricKind::kMesh, n));
  EXPECT_EQ(p.card_degrees, regular(n, n - 1));
  EXPECT_EQ(p.diameter, 1);
  EXPECT_EQ(p.bisection_width, (n / 2) * (n - n / 2));
  EXPECT_TRUE(p.bisection_exact);
}

INSTANTIATE_TEST_SUITE_P(Sizes, MeshTest, testing::Values(8u, 16u, 17u));

struct FatTreeCase {
  unsigned cards;
  FabricGenOptions o;
  unsigned uplinks, leaf_radix, leaves, spine_radix, spines;
};

class FatTreeTest : public testing::TestWithParam<FatTreeCase> {};

TEST_P(FatTreeTest, ClosProperties) {
  const auto& c = GetParam();
  const auto s = gen(FabricKind::kFatTree, c.cards, c.o);
  ASSERT_EQ(s.switches.size(), c.leaves + c.spines);
  const auto p = analyze_fabric(s);
  EXPECT_EQ(p.card_degrees, regular(c.cards, c.uplinks));
  std::map<unsigned, unsigned> radix{{c.leaf_radix, c.leaves}};
  radix[c.spine_radix] += c.spines;
  EXPECT_EQ(p.switch_radixes, radix);
  EXPECT_EQ(p.switch_degrees, radix) << "every switch port is cabled";
  EXPECT_EQ(p.diameter, 4) << "card - leaf - spine - leaf - card";
  EXPECT_EQ(p.bisection_width, c.cards * c.uplinks / 2) << "full bisection: half the leaf-spine links";
  EXPECT_EQ(s.cables.size(), c.cards * c.uplinks + c.leaves * c.leaf_radix / 2);
  // Circuit view: every card port's light reaches a card port in another leaf.
  const auto cp = analyze_fabric(s, FabricView::kCircuit);
  unsigned ports_lit = 0;
  for (auto [deg, n] : cp.card_degrees) ports_lit += deg * n;
  if (c.leaves % 2 == 0) {
    EXPECT_EQ(ports_lit, c.cards * c.uplinks);
  }
  EXPECT_GT(cp.diameter, 0) << "the circuit graph is connected";
  EXPECT_LE(cp.diameter, 12) << "random leaf matchings: an expander, not a ring";
  for (std::uint32_t card = 0; card < s.cards; ++card) {
    for (unsigned port = 0; port < c.uplinks; ++port) {
      const auto lp = trace_light_path(s, card, port);
      if (!lp) continue;
      EXPECT_EQ(lp->switch_hops, 3u);  // leaf, spine, leaf
      EXPECT_DOUBLE_EQ(lp->channel.loss_db, 4 * 0.5 + 3 * 1.0);
      EXPECT_NE(lp->card / (c.leaf_radix / 2 / c.uplinks), card / (c.leaf_radix / 2 / c.uplinks));
      const auto back = trace_light_path(s, lp->card, lp->port);
      ASSERT_TRUE(back.has_value());
      EXPECT_EQ(back->card, card);
      EXPECT_EQ(back->port, port);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Sizes, FatTreeTest,
    testing::Values(FatTreeCase{8, {.leaf_radix = 8, .card_uplinks = 2}, 2, 8, 4, 4, 4},
                    FatTreeCase{64, {}, 4, 32, 16, 16, 16}, FatTreeCase{64, {.spine_radix = 64}, 4, 32, 16, 64, 4},
                    FatTreeCase{1024, {}, 4, 32, 256, 256, 16},
                    FatTreeCase{1024, {.leaf_radix = 64, .spine_radix = 256}, 4, 64, 128, 256, 16}),
    [](const auto& p) {
      return "n" + std::to_string(p.param.cards) + "_leaf" + std::to_string(p.param.leaf_radix) + "_spine" +
             std::to_string(p.param.spine_radix);
    });

TEST(Generators, DragonflyBalanced) {
  // 8 groups of 8 cards: 7 local ports + 1 global; one global link per pair of groups.
  const auto s = gen(FabricKind::kDragonfly, 64, {.groups = 8});
  const auto p = analyze_fabric(s);
  EXPECT_EQ(s.ports, 8u);
  EXPECT_EQ(p.edges, 8u * 28u + 28u);                                          // 8 x C(8,2) local + C(8,2) global
  EXPECT_EQ(p.card_degrees, (std::map<unsigned, unsigned>{{7, 8}, {8, 56}}));  // one card per group without global
  EXPECT_EQ(p.diameter, 3);                                                    // local, global, local
  EXPECT_EQ(p.bisection_width, 16u);                                           // (G/2)^2 global links
}

TEST(Generators, DragonflySmallExact) {
  const auto s = gen(FabricKind::kDragonfly, 16, {.groups = 4});
  const auto p = analyze_fabric(s);
  EXPECT_TRUE(p.bisection_exact);
  EXPECT_EQ(p.bisection_width, 4u);  // (G/2)^2
  EXPECT_EQ(p.diameter, 3);
}

TEST(Generators, DragonflyDefaultGroupsAndLimits) {
  const auto s = gen(FabricKind::kDragonfly, 72);
  EXPECT_LE(s.ports, 16u);
  const auto p = analyze_fabric(s);
  EXPECT_LE(p.diameter, 3);
  EXPECT_GE(p.diameter, 2);
  auto big = generate_fabric(FabricKind::kDragonfly, 1024);
  ASSERT_FALSE(big.has_value());
  EXPECT_NE(big.error().message().find("ports per card"), std::string::npos) << big.error().message();
}

TEST(Generators, SizesThatDoNotFitAreNamed) {
  auto e = generate_fabric(FabricKind::kMesh, 18);
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().message().find("1..17"), std::string::npos) << e.error().message();
  e = generate_fabric(FabricKind::kHypercube, 100);
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().message().find("power of two"), std::string::npos);
  e = generate_fabric(FabricKind::kTorus3d, 64, {.dims = {4, 4, 5}});
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().message().find("4x4x5 hold 80 cards, not 64"), std::string::npos) << e.error().message();
  e = generate_fabric(FabricKind::kFatTree, 66);
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().message().find("multiple of 4"), std::string::npos) << e.error().message();
  e = generate_fabric(FabricKind::kFatTree, 64, {.spine_radix = 24});
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().message().find("spine radix 24"), std::string::npos) << e.error().message();
  e = generate_fabric(FabricKind::kTorus2d, 2000);
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().code(), Code::kInvalidArgument);
  auto k = parse_fabric_kind("ring");
  ASSERT_FALSE(k);
  EXPECT_NE(k.error().message().find("fat-tree"), std::string::npos);
  // QA: 65536 x 65536 wrapped to 0 in 32 bits ("hold 0 cards"); 1-card dragonfly blamed "0 groups".
  e = generate_fabric(FabricKind::kTorus2d, 16, {.dims = {65536, 65536}});
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().message().find("65536x65536 hold 4294967296 cards, not 16"), std::string::npos)
      << e.error().message();
  e = generate_fabric(FabricKind::kDragonfly, 1);
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().message().find("dragonfly needs at least 2 cards"), std::string::npos) << e.error().message();
  auto d = parse_fabric_dims("8x8x");
  EXPECT_FALSE(d);
  d = parse_fabric_dims("8x8x16");
  ASSERT_TRUE(d);
  EXPECT_EQ(*d, (std::vector<unsigned>{8, 8, 16}));
}

TEST(Generators, EveryKindRoundTripsThroughYamlAndJson) {
  for (auto [k, n] : {std::pair{FabricKind::kMesh, 8u}, std::pair{FabricKind::kTorus2d, 64u},
                      std::pair{FabricKind::kTorus3d, 64u}, std::pair{FabricKind::kHypercube, 32u},
                      std::pair{FabricKind::kFatTree, 64u}, std::pair{FabricKind::kDragonfly, 64u}}) {
    SCOPED_TRACE(std::string(fabric_kind_name(k)));
    const auto s = gen(k, n);
    auto y = parse_fabric_spec(to_yaml(s));
    ASSERT_TRUE(y.has_value()) << y.error().to_string();
    EXPECT_EQ(*y, s);
    auto j = parse_fabric_spec(to_json(s));
    ASSERT_TRUE(j.has_value()) << j.error().to_string();
    EXPECT_EQ(*j, s);
  }
}

}  // namespace
}  // namespace npo
