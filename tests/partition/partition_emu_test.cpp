// SPDX-License-Identifier: Apache-2.0
// The partition manager on an emulated pool (virtual clock): the links of each partition train
// Up with the planned neighbours (discovered through the HAL), a spare swap retrains only the
// failed card's links (every other port's train and flap counts unchanged), a crash during a
// change on the emulated switches is settled at reopen.
#include <map>

#include <gtest/gtest.h>

#include "common/emu_system.hpp"
#include "npo/emu/emulator.hpp"
#include "npo/emu/ocs.hpp"
#include "npo/hal/partition.hpp"
#include "npo/hal/port.hpp"
#include "npo/hal/topology.hpp"
#include "npo/hal/topology_gen.hpp"
#include "partition/partition_test_util.hpp"

namespace {

using namespace npo;

struct EmuPool {
  explicit EmuPool(unsigned cards = 16, unsigned ports = 4) {
    spec = *generate_fabric(FabricKind::kPool, cards, {.pool_ports = ports});
    auto cfg = emu::system_config_from_spec(spec);
    EXPECT_TRUE(cfg) << cfg.error().to_string();
    cfg->clock = emu::ClockMode::kVirtual;
    cfg->card.hbm_bytes = 16u << 20;
    for (auto& pc : cfg->per_card) pc.hbm_bytes = 16u << 20;
    auto e = emu::Emulator::create(*cfg);
    EXPECT_TRUE(e) << e.error().to_string();
    emu = *e;
    sys = npo_test::open_system(emu);
    // Every port enabled; none has light yet (no cross-connect), so none trains.
    for (std::size_t c = 0; c < sys->device_count(); ++c) {
      for (unsigned p = 0; p < ports; ++p) EXPECT_TRUE(enable_port(sys->device(c), p).has_value());
    }
    owned = emu::EmulatedOcs::open_all(emu);
    for (auto& o : owned) switches.push_back(o.get());
  }
  /// (train_count, flap_count) of every card port.
  std::map<CardPort, std::pair<std::uint32_t, std::uint32_t>> counters() {
    std::map<CardPort, std::pair<std::uint32_t, std::uint32_t>> out;
    for (std::uint32_t c = 0; c < spec.cards; ++c) {
      for (unsigned p = 0; p < spec.ports; ++p) {
        auto st = read_port(sys->device(c), p);
        EXPECT_TRUE(st);
        if (st) out[{c, p}] = {st->train_count, st->flap_count};
      }
    }
    return out;
  }
  /// Checks that the Up links discovered are exactly the partitions' links.
  void expect_discovered(const std::vector<Partition>& parts) {
    auto topo = discover_topology(*sys);
    ASSERT_TRUE(topo) << topo.error().to_string();
    std::set<PartitionLink> found, want;
    for (const auto& l : topo->links) {
      if (!l.up) continue;
      EXPECT_EQ(l.a_port, l.b_port) << "a link joins the same port index on both cards";
      const auto a = card_index_of(l.a_fabric_id), b = card_index_of(l.b_fabric_id);
      found.insert(a < b ? PartitionLink{a, b, l.a_port} : PartitionLink{b, a, l.a_port});
    }
    for (const auto& p : parts) want.insert(p.links.begin(), p.links.end());
    EXPECT_EQ(found, want);
  }
  FabricSpec spec;
  std::shared_ptr<emu::Emulator> emu;
  std::unique_ptr<System> sys;
  std::vector<std::unique_ptr<emu::EmulatedOcs>> owned;
  std::vector<OpticalCircuitSwitch*> switches;
};

TEST(PartitionEmu, ShapesTrainWithThePlannedNeighbours) {
  EmuPool pool;
  auto m = PartitionManager::open(pool.spec, pool.switches, {.system = pool.sys.get()});
  ASSERT_TRUE(m) << m.error().to_string();
  auto t = (*m)->create("t", "torus2d:2x4");
  ASSERT_TRUE(t) << t.error().to_string();
  EXPECT_GT(t->links_up_ns, 0u);
  auto r = (*m)->create("r", "ring:5");  // odd ring: the closing link on port 2
  ASSERT_TRUE(r) << r.error().to_string();
  auto k = (*m)->create("k", "mesh:3", {13, 14, 15});
  ASSERT_TRUE(k) << k.error().to_string();
  pool.expect_discovered((*m)->list());
  EXPECT_EQ(npo_test::switch_state(pool.switches), npo_test::table_state((*m)->list()));
  // Destroying one partition leaves the others' links Up and untouched.
  const auto before = pool.counters();
  ASSERT_TRUE((*m)->destroy("r"));
  ASSERT_TRUE(pool.emu->advance(500'000'000).has_value());
  const auto after = pool.counters();
  for (const auto& [cp, cnt] : before) {
    if (cp.card >= 8 && cp.card < 13) continue;  // partition r
    EXPECT_EQ(after.at(cp), cnt) << "card " << cp.card << " port " << cp.port;
  }
  pool.expect_discovered((*m)->list());
}

TEST(PartitionEmu, SpareSwapRetrainsOnlyTheFailedCardsLinks) {
  EmuPool pool;
  auto m = PartitionManager::open(pool.spec, pool.switches, {.system = pool.sys.get()});
  ASSERT_TRUE(m) << m.error().to_string();
  ASSERT_TRUE((*m)->create("job", "torus2d:4x2"));
  ASSERT_TRUE((*m)->create("other", "ring:4"));
  ASSERT_TRUE((*m)->set_health(15, CardHealth::kSpare));
  ASSERT_TRUE((*m)->set_health(5, CardHealth::kFailed));
  ASSERT_TRUE(pool.emu->advance(100'000'000).has_value());
  const auto before = pool.counters();
  auto s = (*m)->swap(5);
  ASSERT_TRUE(s) << s.error().to_string();
  EXPECT_EQ(s->what, "swap 5 -> 15 in job");
  ASSERT_TRUE(pool.emu->advance(100'000'000).has_value());
  const auto after = pool.counters();
  std::set<CardPort> changed;
  for (const auto& l : s->removed) changed.insert({{l.a, l.port}, {l.b, l.port}});
  for (const auto& l : s->added) changed.insert({{l.a, l.port}, {l.b, l.port}});
  EXPECT_EQ(changed.size(), 12u);  // 4 ports of card 5, 4 of card 15, 4 neighbour ports
  for (const auto& [cp, cnt] : before) {
    if (changed.contains(cp)) continue;
    EXPECT_EQ(after.at(cp), cnt) << "card " << cp.card << " port " << cp.port << " was not part of the swap";
  }
  for (const auto& l : s->added) {
    const std::uint32_t neighbour = l.a == 15 ? l.b : l.a;
    EXPECT_GT(after.at({neighbour, l.port}).second, before.at({neighbour, l.port}).second)
        << "neighbour " << neighbour << " port " << l.port << " flapped and retrained";
  }
  pool.expect_discovered((*m)->list());
}

TEST(PartitionEmu, CrashOnEmulatedSwitchesIsSettled) {
  EmuPool pool;
  npo_test::TempJournal tj;
  npo_test::CrashBudget budget;
  std::vector<std::unique_ptr<npo_test::CrashingOcs>> wrap;
  std::vector<OpticalCircuitSwitch*> crashing;
  for (auto* s : pool.switches) {
    wrap.push_back(std::make_unique<npo_test::CrashingOcs>(*s, budget));
    crashing.push_back(wrap.back().get());
  }
  {
    auto m = PartitionManager::open(pool.spec, crashing, {.journal = tj.path, .system = pool.sys.get()});
    ASSERT_TRUE(m);
    ASSERT_TRUE((*m)->create("job", "ring:6"));
    ASSERT_TRUE((*m)->set_health(2, CardHealth::kFailed));
    budget.left = 3;  // of the swap's 4 operations
    ASSERT_FALSE((*m)->swap(2));
  }
  auto m = PartitionManager::open(pool.spec, pool.switches,
                                  {.journal = tj.path, .system = pool.sys.get(), .recovery = RecoveryPolicy::kFinish});
  ASSERT_TRUE(m) << m.error().to_string();
  ASSERT_TRUE((*m)->rebuild_report().interrupted);
  EXPECT_NE((*m)->rebuild_report().interrupted->find("finished"), std::string::npos);
  EXPECT_EQ((*m)->find("job")->cards, (std::vector<std::uint32_t>{0, 1, 6, 3, 4, 5}));
  EXPECT_EQ(npo_test::switch_state(pool.switches), npo_test::table_state((*m)->list()));
  auto links = (*m)->find("job")->links;
  auto up = wait_links_up(*pool.sys, links, 10'000'000'000);
  ASSERT_TRUE(up) << up.error().to_string();
  pool.expect_discovered((*m)->list());
}

}  // namespace
