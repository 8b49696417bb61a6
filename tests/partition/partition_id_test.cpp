// SPDX-License-Identifier: Apache-2.0
// Partition IDs (GLOBAL.PARTITION, registers.md §3.8) written by the partition manager: unique,
// never reused, kept in the journal; joining cards set before their links are connected,
// leaving cards cleared after their links are gone; every card's ID re-applied at rebuild (also
// after a crash at every step); a journal from before IDs still opens; the emulator's cards.
#include <fstream>
#include <map>

#include <gtest/gtest.h>

#include "npo/emu/emulator.hpp"
#include "npo/emu/ocs.hpp"
#include "npo/hal/partition.hpp"
#include "npo/hal/topology_gen.hpp"
#include "partition/partition_test_util.hpp"

namespace {

using namespace npo;
using npo_test::TempJournal;

struct MemPool {
  MemPool() {
    spec = *generate_fabric(FabricKind::kPool, 16, {.pool_ports = 4});
    for (const auto& s : spec.switches) owned.push_back(std::make_unique<InMemoryOcs>(s.name, s.ports));
    for (auto& o : owned) switches.push_back(o.get());
  }
  /// Cross-connects holding a port of card `c` (card c port p = ocs<p> port c).
  [[nodiscard]] unsigned links_of(std::uint32_t c) const {
    unsigned n = 0;
    for (auto* s : switches) {
      for (const auto& [a, b] : s->cross_connects().value_or(std::vector<CrossConnect>{})) n += a == c || b == c;
    }
    return n;
  }
  FabricSpec spec;
  std::vector<std::unique_ptr<InMemoryOcs>> owned;
  std::vector<OpticalCircuitSwitch*> switches;
};

/// Records every write, and checks the order against the switches: a card getting a nonzero ID
/// of a partition it was not in has no cross-connect yet only when it was free before; a card
/// set to 0 has none left.
struct RecordingEnforcer final : PartitionEnforcer {
  explicit RecordingEnforcer(const MemPool* p = nullptr) : pool(p) {}
  Result<void> set_partition(std::uint32_t card, std::uint32_t id) override {
    if (fail_card && *fail_card == card) return fail(Code::kUnavailable, "management path down");
    if (pool != nullptr && (id == 0 || ids[card] == 0)) {
      EXPECT_EQ(pool->links_of(card), 0u) << "card " << card << " set to " << id << " with links";
    }
    ids[card] = id;
    ++writes;
    return {};
  }
  const MemPool* pool;
  std::map<std::uint32_t, std::uint32_t> ids;
  std::optional<std::uint32_t> fail_card;
  unsigned writes = 0;
};

/// Every card's ID as the table says (0: free).
std::map<std::uint32_t, std::uint32_t> table_ids(const PartitionManager& m) {
  std::map<std::uint32_t, std::uint32_t> out;
  for (std::uint32_t c = 0; c < m.pool_cards(); ++c) out[c] = 0;
  for (const auto& p : m.list()) {
    for (auto c : p.cards) out[c] = p.id;
  }
  return out;
}

TEST(PartitionId, SetBeforeConnectClearedAfterDisconnectNeverReused) {
  MemPool pool;
  TempJournal tj;
  RecordingEnforcer enf(&pool);
  auto m = PartitionManager::open(pool.spec, pool.switches, {.journal = tj.path, .enforcer = &enf});
  ASSERT_TRUE(m) << m.error().to_string();
  EXPECT_EQ(enf.writes, 16u);  // open() writes every card (all free: 0)
  auto a = (*m)->create("a", "ring:4");
  ASSERT_TRUE(a) << a.error().to_string();
  auto b = (*m)->create("b", "torus2d:2x2");
  ASSERT_TRUE(b);
  EXPECT_EQ((*m)->find("a")->id, 1u);
  EXPECT_EQ((*m)->find("b")->id, 2u);
  EXPECT_EQ(a->ids.size(), 4u);
  EXPECT_EQ(a->ids[0], (CardPartitionId{0, 1}));
  EXPECT_EQ(enf.ids, table_ids(**m));
  auto mv = (*m)->move(8, "a");
  ASSERT_TRUE(mv) << mv.error().to_string();
  EXPECT_EQ(mv->ids, (std::vector<CardPartitionId>{{8, 1}}));
  EXPECT_EQ((*m)->find("a")->id, 1u) << "a partition keeps its ID when it grows";
  ASSERT_TRUE((*m)->set_health(5, CardHealth::kFailed));
  auto sw = (*m)->swap(5, 12);
  ASSERT_TRUE(sw);
  EXPECT_EQ(sw->ids, (std::vector<CardPartitionId>{{12, 2}, {5, 0}}));
  EXPECT_EQ(enf.ids, table_ids(**m));
  auto d = (*m)->destroy("a");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->ids.size(), 5u);
  for (const auto& x : d->ids) EXPECT_EQ(x.id, 0u);
  auto c = (*m)->create("a", "ring:2");
  ASSERT_TRUE(c);
  EXPECT_EQ((*m)->find("a")->id, 3u) << "a destroyed partition's ID is not reused";
  // Rebuild: the same IDs, every card written again, and the counter continues.
  const auto before = (*m)->list();
  m->reset();
  enf.ids.clear();
  enf.writes = 0;
  enf.pool = nullptr;  // the rebuild writes cards whose links stand
  auto m2 = PartitionManager::open(pool.spec, pool.switches, {.journal = tj.path, .enforcer = &enf});
  ASSERT_TRUE(m2) << m2.error().to_string();
  EXPECT_EQ((*m2)->list(), before);
  EXPECT_EQ((*m2)->rebuild_report().ids_set, 16u);
  EXPECT_EQ(enf.ids, table_ids(**m2));
  ASSERT_TRUE((*m2)->create("z", "ring:2"));
  EXPECT_EQ((*m2)->find("z")->id, 4u);
}

TEST(PartitionId, EnforcerFailureBeforeTheSwitchesChangesNothing) {
  MemPool pool;
  RecordingEnforcer enf;
  auto m = PartitionManager::open(pool.spec, pool.switches, {.enforcer = &enf});
  ASSERT_TRUE(m);
  enf.fail_card = 2;
  auto r = (*m)->create("a", "ring:4");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kUnavailable);
  EXPECT_TRUE((*m)->list().empty());
  EXPECT_TRUE(npo_test::switch_state(pool.switches).empty());
  EXPECT_EQ(enf.ids[0], 0u) << "cards set before the failing one are reset";
  enf.fail_card.reset();
  ASSERT_TRUE((*m)->create("a", "ring:4"));
  EXPECT_EQ(enf.ids, table_ids(**m));
}

TEST(PartitionId, CrashAtEveryStepLeavesTheTablesIds) {
  // The move's and swap's operations, each cut after k; reopening writes the table's IDs.
  for (int which = 0; which < 3; ++which) {
    for (long k = 0; k < 8; ++k) {
      SCOPED_TRACE("change " + std::to_string(which) + " crash after " + std::to_string(k));
      MemPool pool;
      TempJournal tj;
      npo_test::CrashBudget budget;
      std::vector<std::unique_ptr<npo_test::CrashingOcs>> wrap;
      std::vector<OpticalCircuitSwitch*> crashing;
      for (auto* s : pool.switches) {
        wrap.push_back(std::make_unique<npo_test::CrashingOcs>(*s, budget));
        crashing.push_back(wrap.back().get());
      }
      RecordingEnforcer enf;
      {
        auto m = PartitionManager::open(pool.spec, crashing, {.journal = tj.path, .enforcer = &enf});
        ASSERT_TRUE(m);
        ASSERT_TRUE((*m)->create("a", "ring:4"));
        ASSERT_TRUE((*m)->set_health(1, CardHealth::kFailed));
        budget.left = k;
        if (which == 0) (void)(*m)->move(9, "a");
        if (which == 1) (void)(*m)->swap(1);
        if (which == 2) (void)(*m)->destroy("a");
      }
      RecordingEnforcer fresh;
      auto m = PartitionManager::open(pool.spec, pool.switches, {.journal = tj.path, .enforcer = &fresh});
      ASSERT_TRUE(m) << m.error().to_string();
      EXPECT_EQ(npo_test::switch_state(pool.switches), npo_test::table_state((*m)->list()));
      EXPECT_EQ(fresh.ids, table_ids(**m));
    }
  }
}

TEST(PartitionId, JournalWithoutIdsAndRecoveredPartitionsGetFreshOnes) {
  MemPool pool;
  TempJournal tj;
  {  // a journal line as written before partition IDs (no "id")
    ASSERT_TRUE(pool.switches[0]->connect(0, 1));
    std::ofstream(tj.path)
        << R"({"type":"intent","seq":1,"what":"create a ring:2","upsert":[{"name":"a","shape":"ring:2","cards":[0,1],)"
        << R"("links":[[0,1,0],[0,1,1]]}],"remove":[],"health":[],"changes":[["ocs0","connect",0,1],["ocs1","connect",0,1]]})"
        << "\n"
        << R"({"type":"applied","seq":1})"
        << "\n";
  }
  ASSERT_TRUE(pool.switches[1]->connect(0, 1));
  auto m = PartitionManager::open(pool.spec, pool.switches, {.journal = tj.path});
  ASSERT_TRUE(m) << m.error().to_string();
  EXPECT_EQ((*m)->find("a")->id, 1u);
  ASSERT_TRUE((*m)->create("b", "ring:2"));
  EXPECT_EQ((*m)->find("b")->id, 2u);
  m->reset();
  // No journal: partitions recovered from the switches get fresh IDs.
  auto r = PartitionManager::open(pool.spec, pool.switches, {});
  ASSERT_TRUE(r);
  const auto parts = (*r)->list();
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_NE(parts[0].id, 0u);
  EXPECT_NE(parts[0].id, parts[1].id);
}

TEST(PartitionId, EmulatedCardsCarryTheIds) {
  auto spec = *generate_fabric(FabricKind::kPool, 8, {.pool_ports = 4});
  auto cfg = emu::system_config_from_spec(spec);
  ASSERT_TRUE(cfg);
  cfg->clock = emu::ClockMode::kVirtual;
  cfg->card.hbm_bytes = 16u << 20;
  for (auto& pc : cfg->per_card) pc.hbm_bytes = 16u << 20;
  auto e = emu::Emulator::create(*cfg);
  ASSERT_TRUE(e);
  auto owned = emu::EmulatedOcs::open_all(*e);
  std::vector<OpticalCircuitSwitch*> sw;
  for (auto& o : owned) sw.push_back(o.get());
  ASSERT_TRUE((*e)->set_partition(7, 99));  // stale: open() clears it
  emu::EmulatedEnforcer enf(*e);
  auto m = PartitionManager::open(spec, sw, {.enforcer = &enf});
  ASSERT_TRUE(m) << m.error().to_string();
  EXPECT_EQ(*(*e)->partition(7), 0u);
  ASSERT_TRUE((*m)->create("a", "ring:4"));
  ASSERT_TRUE((*m)->create("b", "ring:2"));
  for (std::uint32_t c = 0; c < 8; ++c) EXPECT_EQ(*(*e)->partition(c), c < 4 ? 1u : c < 6 ? 2u : 0u) << c;
  ASSERT_TRUE((*m)->destroy("a"));
  for (std::uint32_t c = 0; c < 4; ++c) EXPECT_EQ(*(*e)->partition(c), 0u);
  EXPECT_EQ(*(*e)->partition(4), 2u);
}

}  // namespace
