// SPDX-License-Identifier: Apache-2.0
// The partition manager on in-memory switches: shapes and their colourings, the pool
// generator, create/destroy/list/move/swap, refused inputs that change nothing, the journal
// crashed after every switch operation, and rebuilding from the switches.
#include "npo/hal/partition.hpp"

#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "npo/hal/topology_gen.hpp"
#include "partition/partition_test_util.hpp"

namespace {

using namespace npo;
using npo_test::CrashBudget;
using npo_test::CrashingOcs;
using npo_test::switch_state;
using npo_test::table_state;
using npo_test::TempJournal;

/// Checks that `links` is a proper colouring: no card uses a port twice, ports < `ports`.
void expect_proper(const std::vector<PartitionLink>& links, unsigned ports) {
  std::set<std::pair<std::uint32_t, unsigned>> used;
  for (const auto& l : links) {
    EXPECT_LT(l.port, ports);
    EXPECT_LT(l.a, l.b);
    EXPECT_TRUE(used.emplace(l.a, l.port).second) << "card " << l.a << " port " << l.port << " twice";
    EXPECT_TRUE(used.emplace(l.b, l.port).second) << "card " << l.b << " port " << l.port << " twice";
  }
}

std::map<std::pair<std::uint32_t, std::uint32_t>, unsigned> pairs(const std::vector<PartitionLink>& links) {
  std::map<std::pair<std::uint32_t, std::uint32_t>, unsigned> out;
  for (const auto& l : links) ++out[{l.a, l.b}];
  return out;
}

TEST(PartitionShape, ParseAndErrors) {
  EXPECT_EQ(parse_partition_shape("torus2d:8x8")->text(), "torus2d:8x8");
  EXPECT_EQ(parse_partition_shape("mesh:7")->cards(), 7u);
  EXPECT_EQ(parse_partition_shape("torus3d:4x4x2")->cards(), 32u);
  for (const char* badshape : {"torus2d:3x4", "torus3d:4x4", "star:8", "ring", "ring:0", "mesh:x", "torus2d:8x8x2"}) {
    auto r = parse_partition_shape(badshape);
    ASSERT_FALSE(r) << badshape;
    EXPECT_EQ(r.error().code(), Code::kInvalidArgument) << badshape;
  }
  EXPECT_NE(parse_partition_shape("torus2d:3x4").error().message().find("even"), std::string::npos);
  // Each N error says what is wrong (they all used to say "needs N in 1..1024").
  for (const auto& [badshape, want] : std::vector<std::pair<std::string, std::string>>{
           {"mesh:abc", "shape 'mesh:abc': 'abc' is not a whole number (mesh:N needs N in 1..1024)"},
           {"mesh:-3", "shape 'mesh:-3': '-3' is not a whole number"},
           {"ring:4x4", "shape 'ring:4x4': unexpected 'x4' after 'ring:4' (ring:N needs N in 1..1024)"},
           {"mesh:4 ", "shape 'mesh:4 ': unexpected ' ' after 'mesh:4' (trailing whitespace)"},
           {"mesh:", "shape 'mesh:': no N after ':'"},
           {"ring:0", "shape 'ring:0': 0 is outside 1..1024"},
           {"mesh:2000", "shape 'mesh:2000': 2000 is outside 1..1024"},
           {"mesh:99999999999", "99999999999 is outside 1..1024"}}) {
    auto r = parse_partition_shape(badshape);
    ASSERT_FALSE(r) << badshape;
    EXPECT_EQ(r.error().code(), Code::kInvalidArgument) << badshape;
    EXPECT_NE(r.error().message().find(want), std::string::npos) << r.error().message();
  }
}

TEST(PartitionShape, MeshIsAOneFactorisation) {
  for (unsigned n = 2; n <= 16; ++n) {
    auto s = parse_partition_shape("mesh:" + std::to_string(n));
    auto links = shape_links(*s, 16);
    ASSERT_TRUE(links) << n;
    EXPECT_EQ(links->size(), n * (n - 1) / 2);
    expect_proper(*links, n % 2 == 0 ? n - 1 : n);  // K_N even: N-1 colours
    const auto p = pairs(*links);
    EXPECT_EQ(p.size(), n * (n - 1) / 2) << "every pair once";
  }
  auto too_many = shape_links(*parse_partition_shape("mesh:10"), 8);
  ASSERT_FALSE(too_many);
  EXPECT_EQ(too_many.error().code(), Code::kInvalidArgument);
  EXPECT_NE(too_many.error().message().find("needs 9 port indices"), std::string::npos) << too_many.error().message();
}

TEST(PartitionShape, RingAndTorusAdjacency) {
  for (unsigned n : {3u, 4u, 7u, 8u}) {
    auto links = shape_links(*parse_partition_shape("ring:" + std::to_string(n)), 4);
    ASSERT_TRUE(links);
    EXPECT_EQ(links->size(), n);
    expect_proper(*links, n % 2 ? 3 : 2);
    for (std::uint32_t i = 0; i < n; ++i) {
      const auto a = std::min(i, (i + 1) % n), b = std::max(i, (i + 1) % n);
      EXPECT_EQ(pairs(*links).count({a, b}), 1u);
    }
  }
  EXPECT_FALSE(shape_links(*parse_partition_shape("ring:5"), 2));  // odd ring needs 3 ports
  // torus2d:4x6: x links on ports 0/1, y links on 2/3, 2 x 24 links, degree 4 with every port once.
  auto t = shape_links(*parse_partition_shape("torus2d:4x6"), 4);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->size(), 48u);
  expect_proper(*t, 4);
  for (const auto& l : *t) {
    const unsigned ax = l.a % 4, ay = l.a / 4, bx = l.b % 4, by = l.b / 4;
    if (l.port < 2) {
      EXPECT_EQ(ay, by);
      EXPECT_TRUE((ax + 1) % 4 == bx || (bx + 1) % 4 == ax);
    } else {
      EXPECT_EQ(ax, bx);
      EXPECT_TRUE((ay + 1) % 6 == by || (by + 1) % 6 == ay);
    }
  }
  auto t3 = shape_links(*parse_partition_shape("torus3d:2x4x4"), 6);
  ASSERT_TRUE(t3);
  expect_proper(*t3, 6);
  EXPECT_EQ(t3->size(), 32u * 3);
  EXPECT_FALSE(shape_links(*parse_partition_shape("torus3d:2x4x4"), 4));
}

TEST(PoolGenerator, OneSwitchPerPortIndex) {
  auto s = generate_fabric(FabricKind::kPool, 16, {.pool_ports = 4});
  ASSERT_TRUE(s) << s.error().to_string();
  EXPECT_EQ(s->cards, 16u);
  EXPECT_EQ(s->ports, 4u);
  ASSERT_EQ(s->switches.size(), 4u);
  for (unsigned p = 0; p < 4; ++p) {
    EXPECT_EQ(s->switches[p].name, "ocs" + std::to_string(p));
    EXPECT_EQ(s->switches[p].ports, 16u);
    EXPECT_TRUE(s->switches[p].cross_connects.empty());
  }
  ASSERT_EQ(s->cables.size(), 64u);
  for (const auto& c : s->cables) {
    EXPECT_FALSE(c.a.on_switch);
    EXPECT_TRUE(c.b.on_switch);
    EXPECT_EQ(c.a.port, c.b.node);  // card port p -> ocs<p>
    EXPECT_EQ(c.a.node, c.b.port);  // card c -> switch port c
  }
  EXPECT_EQ(*parse_fabric_kind("pool"), FabricKind::kPool);
  EXPECT_FALSE(generate_fabric(FabricKind::kPool, 16, {.pool_ports = 17}));
}

/// A pool on in-memory switches.
struct MemPool {
  explicit MemPool(unsigned cards = 16, unsigned ports = 4) {
    spec = *generate_fabric(FabricKind::kPool, cards, {.pool_ports = ports});
    for (const auto& s : spec.switches) owned.push_back(std::make_unique<InMemoryOcs>(s.name, s.ports));
    for (auto& o : owned) switches.push_back(o.get());
  }
  std::unique_ptr<PartitionManager> open(const PartitionOptions& o = {}) {
    auto m = PartitionManager::open(spec, switches, o);
    EXPECT_TRUE(m) << m.error().to_string();
    return m ? std::move(*m) : nullptr;
  }
  FabricSpec spec;
  std::vector<std::unique_ptr<InMemoryOcs>> owned;
  std::vector<OpticalCircuitSwitch*> switches;
};

TEST(PartitionManager, CreateListDestroy) {
  MemPool pool;
  auto m = pool.open();
  ASSERT_TRUE(m);
  auto a = m->create("a", "torus2d:2x4");
  ASSERT_TRUE(a) << a.error().to_string();
  EXPECT_EQ(a->added.size(), 16u);
  EXPECT_EQ(a->changes.size(), 16u);
  auto b = m->create("b", "ring:4", {12, 13, 14, 15});
  ASSERT_TRUE(b) << b.error().to_string();
  const auto parts = m->list();
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].cards, (std::vector<std::uint32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(switch_state(pool.switches), table_state(parts));
  EXPECT_EQ(*m->owner(13), "b");
  EXPECT_FALSE(m->owner(8));
  // No two partitions share a card, so no link or switch port.
  std::set<std::uint32_t> seen;
  for (const auto& p : parts) {
    for (const auto& l : p.links) {
      EXPECT_EQ(*m->owner(l.a), p.name);
      EXPECT_EQ(*m->owner(l.b), p.name);
    }
    for (auto c : p.cards) EXPECT_TRUE(seen.insert(c).second);
  }
  auto d = m->destroy("a");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->removed.size(), 16u);
  EXPECT_EQ(switch_state(pool.switches), table_state(m->list()));
  EXPECT_FALSE(m->owner(0));
  EXPECT_EQ(m->destroy("a").error().code(), Code::kNotFound);
}

TEST(PartitionManager, RefusedInputsChangeNothing) {
  MemPool pool(16, 4);
  TempJournal tj;
  auto m = pool.open({.journal = tj.path});
  ASSERT_TRUE(m);
  ASSERT_TRUE(m->create("a", "ring:4", {0, 1, 2, 3}));
  ASSERT_TRUE(m->set_health(9, CardHealth::kFailed));
  const auto before = switch_state(pool.switches);
  const auto table = m->list();
  const auto size = std::filesystem::file_size(tj.path);
  auto code = [](auto r) { return r ? Code::kOk : r.error().code(); };
  EXPECT_EQ(code(m->create("b", "ring:4", {3, 4, 5, 6})), Code::kFailedPrecondition);    // card in use
  EXPECT_EQ(code(m->create("b", "ring:4", {8, 9, 10, 11})), Code::kFailedPrecondition);  // failed card
  EXPECT_EQ(code(m->create("b", "ring:13")), Code::kResourceExhausted);                  // 11 free healthy
  EXPECT_EQ(code(m->create("b", "torus2d:3x4")), Code::kInvalidArgument);                // odd dims
  EXPECT_EQ(code(m->create("b", "star:4")), Code::kInvalidArgument);                     // unknown shape
  EXPECT_EQ(code(m->create("b", "mesh:6")), Code::kInvalidArgument);                     // 5 colours > 4 ports
  EXPECT_EQ(code(m->create("b", "ring:4", {4, 5, 6})), Code::kInvalidArgument);
  EXPECT_EQ(code(m->create("b", "ring:4", {4, 5, 6, 99})), Code::kInvalidArgument);
  EXPECT_EQ(code(m->create("b", "ring:4", {4, 5, 6, 6})), Code::kInvalidArgument);
  EXPECT_EQ(code(m->create("a", "ring:4")), Code::kAlreadyExists);
  EXPECT_EQ(code(m->create("bad name", "ring:4")), Code::kInvalidArgument);
  EXPECT_EQ(code(m->swap(2)), Code::kFailedPrecondition);  // not failed
  EXPECT_EQ(code(m->swap(9)), Code::kFailedPrecondition);  // failed but in no partition
  EXPECT_EQ(code(m->move(9, "a")), Code::kFailedPrecondition);
  EXPECT_EQ(code(m->move(5, "nope")), Code::kNotFound);
  EXPECT_EQ(switch_state(pool.switches), before);
  EXPECT_EQ(m->list(), table);
  EXPECT_EQ(std::filesystem::file_size(tj.path), size) << "a refused change writes no journal line";
}

TEST(PartitionManager, SpareSwapTouchesOnlyTheFailedCard) {
  MemPool pool(16, 4);
  auto m = pool.open();
  ASSERT_TRUE(m);
  ASSERT_TRUE(m->create("job", "torus2d:4x2"));
  ASSERT_TRUE(m->set_health(14, CardHealth::kSpare));
  ASSERT_TRUE(m->set_health(15, CardHealth::kSpare));
  auto other = m->create("other", "ring:4");  // cards 8..11: spares are never placed
  ASSERT_TRUE(other);
  EXPECT_EQ(other->added.front().a, 8u);
  ASSERT_TRUE(m->set_health(5, CardHealth::kFailed));
  const auto before = m->find("job")->links;
  auto s = m->swap(5);
  ASSERT_TRUE(s) << s.error().to_string();
  EXPECT_EQ(s->what, "swap 5 -> 14 in job");
  for (const auto& l : s->removed) EXPECT_TRUE(l.a == 5 || l.b == 5);
  for (const auto& l : s->added) EXPECT_TRUE(l.a == 14 || l.b == 14);
  EXPECT_EQ(s->removed.size(), 4u);
  EXPECT_EQ(s->changes.size(), 8u);
  const auto after = m->find("job")->links;
  unsigned kept = 0;
  for (const auto& l : before) kept += std::count(after.begin(), after.end(), l);
  EXPECT_EQ(kept, before.size() - 4);
  // Same port indices as the failed card's links.
  std::multiset<unsigned> pr, pa;
  for (const auto& l : s->removed) pr.insert(l.port);
  for (const auto& l : s->added) pa.insert(l.port);
  EXPECT_EQ(pr, pa);
  EXPECT_EQ(m->health(14), CardHealth::kHealthy);
  EXPECT_FALSE(m->owner(5));
  EXPECT_EQ(switch_state(pool.switches), table_state(m->list()));
}

TEST(PartitionManager, MoveResizesRingsAndMeshes) {
  MemPool pool(16, 4);
  auto m = pool.open();
  ASSERT_TRUE(m);
  ASSERT_TRUE(m->create("r", "ring:6"));
  ASSERT_TRUE(m->create("m", "mesh:4"));  // cards 6..9, 3 colours
  auto mv = m->move(10, "r");
  ASSERT_TRUE(mv) << mv.error().to_string();
  EXPECT_EQ(m->find("r")->shape, "ring:7");
  EXPECT_EQ(mv->removed.size(), 1u);  // the closing link 5-0
  EXPECT_EQ(mv->added.size(), 2u);
  expect_proper(m->find("r")->links, 4);
  auto mv2 = m->move(9, "r");  // out of the mesh (mesh:3) into the ring (ring:8)
  ASSERT_TRUE(mv2) << mv2.error().to_string();
  EXPECT_EQ(m->find("m")->shape, "mesh:3");
  EXPECT_EQ(m->find("r")->shape, "ring:8");
  EXPECT_EQ(m->find("m")->links.size(), 3u);
  expect_proper(m->find("r")->links, 4);
  ASSERT_TRUE(m->move(9, ""));
  EXPECT_FALSE(m->owner(9));
  ASSERT_TRUE(m->create("t", "torus2d:2x2"));
  EXPECT_EQ(m->move(11, "t").error().code(), Code::kFailedPrecondition);
  EXPECT_EQ(switch_state(pool.switches), table_state(m->list()));
}

/// One change under test, run against a manager that already has partition "a".
using Step = std::function<Result<PartitionChange>(PartitionManager&)>;

void crash_at_every_step(const std::string& label, const Step& step, RecoveryPolicy policy) {
  // Count the operations of the change once.
  unsigned n = 0;
  {
    MemPool pool;
    auto m = pool.open();
    ASSERT_TRUE(m->create("a", "torus2d:2x4"));
    ASSERT_TRUE(m->create("r", "ring:4"));
    ASSERT_TRUE(m->set_health(3, CardHealth::kFailed));
    auto r = step(*m);
    ASSERT_TRUE(r) << label << ": " << r.error().to_string();
    n = static_cast<unsigned>(r->changes.size());
    ASSERT_GT(n, 0u);
  }
  for (unsigned k = 0; k <= n; ++k) {
    SCOPED_TRACE(label + " crash after " + std::to_string(k) + " of " + std::to_string(n));
    MemPool pool;
    TempJournal tj;
    CrashBudget budget;
    std::vector<std::unique_ptr<CrashingOcs>> wrap;
    std::vector<OpticalCircuitSwitch*> crashing;
    for (auto* s : pool.switches) {
      wrap.push_back(std::make_unique<CrashingOcs>(*s, budget));
      crashing.push_back(wrap.back().get());
    }
    std::vector<Partition> before, after;
    {
      auto m = PartitionManager::open(pool.spec, crashing, {.journal = tj.path});
      ASSERT_TRUE(m);
      ASSERT_TRUE((*m)->create("a", "torus2d:2x4"));
      ASSERT_TRUE((*m)->create("r", "ring:4"));
      ASSERT_TRUE((*m)->set_health(3, CardHealth::kFailed));
      before = (*m)->list();
      budget.left = k;
      auto r = step(**m);
      if (k == n) {
        ASSERT_TRUE(r) << r.error().to_string();
        after = (*m)->list();
      } else {
        ASSERT_FALSE(r);
      }
    }  // the "crashed" controller is gone
    auto m = PartitionManager::open(pool.spec, pool.switches, {.journal = tj.path, .recovery = policy});
    ASSERT_TRUE(m) << m.error().to_string();
    const auto table = (*m)->list();
    EXPECT_EQ(switch_state(pool.switches), table_state(table)) << "switches and table agree";
    if (k == n) {
      EXPECT_EQ(table, after);
      EXPECT_FALSE((*m)->rebuild_report().interrupted);
    } else if (policy == RecoveryPolicy::kRollBack || k == 0) {
      EXPECT_EQ(table, before);
    } else {
      ASSERT_TRUE((*m)->rebuild_report().interrupted);
      EXPECT_NE((*m)->rebuild_report().interrupted->find("finished"), std::string::npos);
    }
    EXPECT_TRUE((*m)->rebuild_report().foreign.empty());
    // The rebuilt manager keeps working, and a third open sees the same table.
    ASSERT_TRUE((*m)->create("z", "ring:2", {14, 15}));
    const auto t2 = (*m)->list();
    m->reset();
    auto again = PartitionManager::open(pool.spec, pool.switches, {.journal = tj.path});
    ASSERT_TRUE(again);
    EXPECT_EQ((*again)->list(), t2);
  }
}

TEST(PartitionJournal, CrashAtEveryStep) {
  for (auto policy : {RecoveryPolicy::kRollBack, RecoveryPolicy::kFinish}) {
    crash_at_every_step(
        "create", [](PartitionManager& m) { return m.create("b", "ring:2"); }, policy);
    crash_at_every_step(
        "swap", [](PartitionManager& m) { return m.swap(3); }, policy);
    crash_at_every_step(
        "destroy", [](PartitionManager& m) { return m.destroy("a"); }, policy);
    crash_at_every_step(
        "move", [](PartitionManager& m) { return m.move(12, "r"); }, policy);
  }
}

TEST(PartitionJournal, RebuildFromSwitchesAndTornTail) {
  MemPool pool;
  TempJournal tj;
  {
    auto m = pool.open({.journal = tj.path});
    ASSERT_TRUE(m->create("a", "ring:4"));
    ASSERT_TRUE(m->create("b", "torus2d:2x2"));
  }
  // No journal: the switches' cross-connects become partitions, one per connected group.
  {
    auto m = pool.open();
    ASSERT_TRUE(m);
    EXPECT_EQ(m->rebuild_report().recovered.size(), 2u);
    const auto parts = m->list();
    ASSERT_EQ(parts.size(), 2u);
    EXPECT_EQ(parts[0].cards, (std::vector<std::uint32_t>{0, 1, 2, 3}));
    EXPECT_EQ(parts[0].shape, "custom:4");
    EXPECT_EQ(switch_state(pool.switches), table_state(parts));
  }
  // A torn last line (a crash while writing it) is cut off; the rest is kept.
  { std::ofstream(tj.path, std::ios::app) << R"({"type":"intent","seq":9,"wh)"; }
  {
    auto m = pool.open({.journal = tj.path});
    ASSERT_TRUE(m);
    EXPECT_TRUE(m->rebuild_report().torn_tail);
    EXPECT_EQ(m->list().size(), 2u);
  }
  // A freshly reset switch set: the journalled cross-connects are re-made.
  MemPool fresh;
  auto m = fresh.open({.journal = tj.path});
  ASSERT_TRUE(m);
  EXPECT_EQ(m->rebuild_report().restored.size(), 12u);  // ring:4 (4) + torus2d:2x2 (8)
  EXPECT_EQ(switch_state(fresh.switches), table_state(m->list()));
  // A corrupt line in the middle is data loss, not silently skipped.
  m.reset();
  { std::ofstream(tj.path, std::ios::app) << "garbage\n{\"type\":\"applied\",\"seq\":1}\n"; }
  auto broken = PartitionManager::open(fresh.spec, fresh.switches, {.journal = tj.path});
  ASSERT_FALSE(broken);
  EXPECT_EQ(broken.error().code(), Code::kDataLoss);
}

}  // namespace
