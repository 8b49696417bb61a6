// SPDX-License-Identifier: Apache-2.0
// Routing over the optical fabric: RouteTable (shortest paths, ECMP sets, path counts) on
// known graphs, and remote window DMA forwarded over several hops by the cards' route
// tables (registers.md §8), data-checked on an emulated 2D torus and across a failed link.
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/dma_run.hpp"
#include "common/emu_system.hpp"
#include "npo/emu/emulator.hpp"
#include "npo/hal/hal.hpp"

namespace {

using namespace std::chrono_literals;
using npo::Code;
using npo::DmaAddress;
using npo::OpCompletion;
using npo::OpStatus;

/// Topology of a k x k 2D torus given directly (no emulator): card (x, y) has fabric ID
/// 1 + x + k*y; port 0 +x, 1 -x, 2 +y, 3 -y.
npo::Topology torus_topology(unsigned k) {
  npo::Topology t;
  auto fid = [k](unsigned x, unsigned y) { return 1 + (x % k) + k * (y % k); };
  for (unsigned i = 0; i < k * k; ++i) t.cards.push_back(1 + i);
  for (unsigned y = 0; y < k; ++y) {
    for (unsigned x = 0; x < k; ++x) {
      t.links.push_back({fid(x, y), 0, fid(x + 1, y), 1, true, 8});
      t.links.push_back({fid(x, y), 2, fid(x, y + 1), 3, true, 8});
    }
  }
  return t;
}

TEST(RouteTable, TorusHopsEcmpAndPathCounts) {
  constexpr unsigned k = 6;
  auto rt = npo::RouteTable::compute(torus_topology(k)).value();
  auto fid = [](unsigned x, unsigned y) { return 1 + x + k * y; };
  // k-ary 2-cube: distance is the sum of the ring distances, diameter 2 * floor(k/2).
  for (unsigned x = 0; x < k; ++x) {
    for (unsigned y = 0; y < k; ++y) {
      const unsigned dx = std::min(x, k - x);
      const unsigned dy = std::min(y, k - y);
      ASSERT_EQ(rt.hops(fid(0, 0), fid(x, y)), static_cast<int>(dx + dy)) << x << "," << y;
    }
  }
  EXPECT_EQ(rt.diameter(), 6);
  // (0,0) -> (1,1): two shortest paths, leaving by +x (port 0) or +y (port 2).
  EXPECT_EQ(rt.egress_ports(fid(0, 0), fid(1, 1)), (1u << 0) | (1u << 2));
  EXPECT_EQ(rt.path_count(fid(0, 0), fid(1, 1)), 2u);
  // (0,0) -> (3,3) with k = 6: 3 steps each way in x and in y (both directions tie), so all
  // four ports start a shortest path; paths = C(6,3) per direction pair x 4 pairs = 80.
  EXPECT_EQ(rt.egress_ports(fid(0, 0), fid(3, 3)), 0xfu);
  EXPECT_EQ(rt.path_count(fid(0, 0), fid(3, 3)), 80u);
  // (0,0) -> (2,0): one straight path of 2 hops.
  EXPECT_EQ(rt.egress_ports(fid(0, 0), fid(2, 0)), 1u << 0);
  EXPECT_EQ(rt.path(fid(0, 0), fid(2, 0)), (std::vector<std::uint32_t>{fid(0, 0), fid(1, 0), fid(2, 0)}));
  EXPECT_EQ(rt.hops(fid(0, 0), fid(0, 0)), 0);
  EXPECT_EQ(rt.egress_ports(fid(0, 0), fid(0, 0)), 0u);
  EXPECT_EQ(rt.hops(fid(0, 0), 999), -1);
}

TEST(RouteTable, DownLinksAreNotUsedAndPartitionsAreUnreachable) {
  // A line 1 - 2 - 3 - 4 with the 2-3 link down: 1 and 4 cannot reach each other.
  npo::Topology t;
  t.cards = {1, 2, 3, 4};
  t.links = {{1, 0, 2, 0, true, 8}, {2, 1, 3, 0, false, 0}, {3, 1, 4, 0, true, 8}};
  auto rt = npo::RouteTable::compute(t).value();
  EXPECT_EQ(rt.hops(1, 2), 1);
  EXPECT_EQ(rt.hops(1, 4), -1);
  EXPECT_EQ(rt.egress_ports(1, 4), 0u);
  EXPECT_TRUE(rt.path(1, 4).empty());
  EXPECT_EQ(rt.path_count(1, 4), 0u);
  // Parallel links count as distinct paths and both ports join the ECMP set.
  npo::Topology par;
  par.cards = {1, 2};
  par.links = {{1, 0, 2, 0, true, 8}, {1, 1, 2, 1, true, 8}};
  auto prt = npo::RouteTable::compute(par).value();
  EXPECT_EQ(prt.egress_ports(1, 2), 0x3u);
  EXPECT_EQ(prt.path_count(1, 2), 2u);
  // Fabric IDs the route table cannot index are refused.
  npo::Topology bad;
  bad.cards = {1, 4096};
  EXPECT_EQ(npo::RouteTable::compute(bad).error().code(), Code::kInvalidArgument);
}

/// A System over an emulated k x k torus (realtime clock; links train in tens of ms).
struct Torus {
  std::shared_ptr<npo::emu::Emulator> emu;
  std::unique_ptr<npo::System> sys;
  unsigned k;
  explicit Torus(unsigned k_) : k(k_) {
    npo::emu::SystemConfig c;
    c.name = "torus";
    c.num_cards = k * k;
    c.card.hbm_bytes = 4u << 20;
    c.card.num_ports = 4;
    c.clock = npo::emu::ClockMode::kRealtime;
    for (unsigned y = 0; y < k; ++y) {
      for (unsigned x = 0; x < k; ++x) {
        const unsigned here = x + k * y;
        c.cables.push_back({here, 0, ((x + 1) % k) + k * y, 1, {}});
        c.cables.push_back({here, 2, x + k * ((y + 1) % k), 3, {}});
      }
    }
    emu = npo::emu::Emulator::create(c).value();
    sys = npo_test::open_system(emu);
    auto up = npo::bring_up_links(*sys, 10'000'000'000ULL);
    EXPECT_TRUE(up.has_value());
    if (up) {
      EXPECT_EQ(up->up, 4 * k * k);
    }
  }
};

using npo_test::run;

/// Card 0 writes a distinct pattern into a window on every other card and reads it back;
/// returns the statuses per destination card index.
std::vector<OpStatus> write_read_all(npo::System& sys, std::size_t len) {
  const std::size_t n = sys.device_count();
  std::vector<OpStatus> status(n, OpStatus::kOk);
  auto& src = sys.device(0);
  auto q = src.open_queue({.engine = 1, .depth = 64}).value();
  auto out = npo::allocate_host_memory(src, len).value();
  auto back = npo::allocate_host_memory(src, len).value();
  for (std::size_t j = 1; j < n; ++j) {
    auto w = npo::export_window(sys.device(j), 0, len).value();
    std::mt19937 rng(static_cast<unsigned>(j));
    for (auto& b : out->bytes()) b = static_cast<std::byte>(rng());
    std::memset(back->bytes().data(), 0, len);
    EXPECT_TRUE(q->enqueue_remote_write(DmaAddress::host(out->iova()), w->handle(), 0, len));
    EXPECT_TRUE(q->enqueue_remote_read(w->handle(), 0, DmaAddress::host(back->iova()), len));
    const auto c = run(*q, 2);
    EXPECT_EQ(c.size(), 2u);
    status[j] = c.empty() ? OpStatus::kTimeout : (c[0].status != OpStatus::kOk ? c[0].status : c.back().status);
    if (status[j] == OpStatus::kOk) {
      EXPECT_EQ(std::memcmp(out->bytes().data(), back->bytes().data(), len), 0) << "card " << j;
      // The destination's HBM holds the bytes (checked through its own aperture mapping).
      auto map = npo::map_window(sys.device(j), *w).value();
      std::vector<std::byte> seen(len);
      EXPECT_TRUE(map->read(0, seen).has_value());
      EXPECT_EQ(std::memcmp(out->bytes().data(), seen.data(), len), 0) << "card " << j;
    }
  }
  return status;
}

TEST(MultiHop, RemoteDmaCrossesTheTorusOnceRoutesAreProgrammed) {
  Torus t(4);
  const auto& s = *t.sys;
  ASSERT_EQ(s.device_count(), 16u);
  // Without route tables only the four direct neighbours of card 0 are reachable.
  const auto before = write_read_all(*t.sys, 64u << 10);
  unsigned direct = 0;
  for (std::size_t j = 1; j < before.size(); ++j) {
    if (before[j] == OpStatus::kOk)
      ++direct;
    else
      EXPECT_EQ(before[j], OpStatus::kRemoteUnreachable) << j;
  }
  EXPECT_EQ(direct, 4u);
  auto rt = npo::route_fabric(*t.sys);
  ASSERT_TRUE(rt.has_value()) << rt.error().to_string();
  EXPECT_EQ(rt->diameter(), 4);  // 4-ary 2-cube: 2 * floor(4/2)
  EXPECT_EQ(rt->hops(1, 1 + 2 + 4 * 2), 4);
  const auto after = write_read_all(*t.sys, 64u << 10);
  for (std::size_t j = 1; j < after.size(); ++j) EXPECT_EQ(after[j], OpStatus::kOk) << "card " << j;
}

TEST(MultiHop, RoutesAroundADownLinkAfterReprogramming) {
  Torus t(4);
  ASSERT_TRUE(npo::route_fabric(*t.sys).has_value());
  // Take card 0's +x link (port 0, to card 1) down, re-discover and re-route: card 1 is now
  // 3 hops away (via -y/+x/+y or the other ring direction), and still reachable.
  ASSERT_TRUE(npo::enable_port(t.sys->device(0), 0, false).has_value());
  std::this_thread::sleep_for(50ms);
  auto rt = npo::route_fabric(*t.sys);
  ASSERT_TRUE(rt.has_value());
  EXPECT_EQ(rt->hops(1, 2), 3);
  EXPECT_EQ(rt->egress_ports(1, 2) & 1u, 0u);  // never the down port
  const auto st = write_read_all(*t.sys, 16u << 10);
  for (std::size_t j = 1; j < st.size(); ++j) EXPECT_EQ(st[j], OpStatus::kOk) << "card " << j;
}

// Issue 32 point 5: a removed card stays removed while a spare takes its place, so discovery
// keeps it as an island (no link) and routing programs the cards that remain around it, instead
// of failing for the whole fabric (npo-emud --manage-links reroutes through these calls).
TEST(MultiHop, RoutesAroundARemovedCard) {
  Torus t(4);
  ASSERT_TRUE(npo::route_fabric(*t.sys).has_value());
  ASSERT_TRUE(t.emu->inject({.at_ns = t.emu->now_ns(), .kind = npo::emu::FaultKind::kSurpriseRemoval, .card = 1}));
  std::this_thread::sleep_for(50ms);
  ASSERT_TRUE(t.emu->removed(1).value_or(false));
  auto topo = npo::discover_topology(*t.sys);
  ASSERT_TRUE(topo.has_value()) << topo.error().to_string();
  EXPECT_EQ(topo->cards.size(), 16u);
  unsigned up = 0;
  for (const auto& l : topo->links) {
    if (!l.up) continue;
    ++up;
    EXPECT_NE(l.a_fabric_id, 2u);
    EXPECT_NE(l.b_fabric_id, 2u);
  }
  EXPECT_EQ(up, 28u);  // 32 links of the 4x4 torus, 4 of them card 1's
  auto rt = npo::route_fabric(*t.sys);
  ASSERT_TRUE(rt.has_value()) << rt.error().to_string();
  EXPECT_EQ(rt->hops(1, 2), -1);
  EXPECT_EQ(rt->unreachable_pairs(), 30u);  // card 1 to and from each of the 15 others
  EXPECT_EQ(rt->hops(1, 3), 2);             // card 0 -> card 2 the other way round the x ring
  EXPECT_EQ(rt->egress_ports(1, 3), 1u << 1);
  auto& d0 = t.sys->device(0);
  auto w = npo::export_window(t.sys->device(2), 0, 4096).value();
  auto q = d0.open_queue({.depth = 16}).value();
  auto host = npo::allocate_host_memory(d0, 4096).value();
  ASSERT_TRUE(q->enqueue_remote_write(DmaAddress::host(host->iova()), w->handle(), 0, 4096));
  const auto c = run(*q, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, OpStatus::kOk);
}

TEST(MultiHop, ARoutingLoopIsCutByTheHopLimit) {
  Torus t(4);
  ASSERT_TRUE(npo::route_fabric(*t.sys).has_value());
  // Misprogram cards 0 and 1 to send traffic for card 2 (fabric ID 3) towards each other:
  // the op must fail kRemoteUnreachable after the hop limit, not spin.
  auto& d0 = t.sys->device(0);
  auto& d1 = t.sys->device(1);
  auto w = npo::export_window(t.sys->device(2), 0, 4096).value();
  ASSERT_TRUE(npo::set_route(d0, 3, 1u << 0).has_value());  // card 0: via +x (to card 1)
  ASSERT_TRUE(npo::set_route(d1, 3, 1u << 1).has_value());  // card 1: via -x (back to card 0)
  auto q = d0.open_queue({.depth = 16}).value();
  auto host = npo::allocate_host_memory(d0, 4096).value();
  ASSERT_TRUE(q->enqueue_remote_write(DmaAddress::host(host->iova()), w->handle(), 0, 4096));
  const auto c = run(*q, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, OpStatus::kRemoteUnreachable);
}

/// Opens a generated fabric through a topology file (emu:file=, virtual clock), trains every
/// link, discovers the graph and programs the routes.
std::unique_ptr<npo::System> open_generated(npo::FabricKind kind, unsigned cards, npo::RouteTable* routes) {
  auto spec = npo::generate_fabric(kind, cards, {.hbm_bytes = 4u << 20});
  EXPECT_TRUE(spec.has_value()) << spec.error().to_string();
  if (!spec) return nullptr;
  const auto path = std::filesystem::temp_directory_path() / ("npo-multihop-" + std::to_string(::getpid()) + "-" +
                                                              std::string(npo::fabric_kind_name(kind)) + ".yaml");
  {
    std::ofstream out(path);
    out << npo::to_yaml(*spec);
  }
  auto sys = npo::System::open("emu:file=" + path.string() + "?clock=virtual&hbm=4M");
  std::filesystem::remove(path);
  EXPECT_TRUE(sys.has_value()) << sys.error().to_string();
  if (!sys) return nullptr;
  auto up = npo::bring_up_links(**sys);
  EXPECT_TRUE(up.has_value());
  if (up) {
    EXPECT_EQ(up->failed, 0u);
    EXPECT_GT(up->up, 0u);
  }
  auto rt = npo::route_fabric(**sys);
  EXPECT_TRUE(rt.has_value()) << rt.error().to_string();
  if (rt && routes != nullptr) *routes = *rt;
  return std::move(*sys);
}

TEST(MultiHop, DataCheckedAcrossAGenerated3dTorusFile) {
  npo::RouteTable rt = npo::RouteTable::compute({}).value();
  auto sys = open_generated(npo::FabricKind::kTorus3d, 27, &rt);  // 3x3x3
  ASSERT_NE(sys, nullptr);
  EXPECT_EQ(rt.diameter(), 3);  // 3-ary 3-cube: 3 * floor(3/2)
  const auto st = write_read_all(*sys, 32u << 10);
  for (std::size_t j = 1; j < st.size(); ++j) EXPECT_EQ(st[j], OpStatus::kOk) << "card " << j;
}

TEST(MultiHop, DataCheckedAcrossAGeneratedFatTreeThroughOpticalSwitches) {
  npo::RouteTable rt = npo::RouteTable::compute({}).value();
  auto sys = open_generated(npo::FabricKind::kFatTree, 32, &rt);
  ASSERT_NE(sys, nullptr);
  EXPECT_GT(rt.diameter(), 1);  // not every pair is a direct light path: some ops cross cards
  const auto st = write_read_all(*sys, 32u << 10);
  for (std::size_t j = 1; j < st.size(); ++j) EXPECT_EQ(st[j], OpStatus::kOk) << "card " << j;
}

TEST(MultiHop, DataCheckedAcrossAGeneratedDragonfly) {
  npo::RouteTable rt = npo::RouteTable::compute({}).value();
  auto sys = open_generated(npo::FabricKind::kDragonfly, 20, &rt);  // groups of cards, one global link per group pair
  ASSERT_NE(sys, nullptr);
  EXPECT_GE(rt.diameter(), 2);  // a card to a card of another group that does not own the global link
  EXPECT_LE(rt.diameter(), 3);  // local, global, local: the dragonfly bound
  const auto st = write_read_all(*sys, 32u << 10);
  for (std::size_t j = 1; j < st.size(); ++j) EXPECT_EQ(st[j], OpStatus::kOk) << "card " << j;
}

}  // namespace
