// SPDX-License-Identifier: Apache-2.0
// emu:file= fabrics on the virtual clock: a generated topology file is brought up through the
// public API (bring_up_links), discovered from the neighbour identities training exchanged, and
// compared with the plan (check_topology). Differences injected into the built file -- swapped
// cables, a missing cable, a dead lane, an unplanned cable -- are each named. Optical switches:
// light paths through cross-connects, runtime reconfiguration, scripted faults from the file.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include <gtest/gtest.h>

#include "npo/emu/emulator.hpp"
#include "npo/hal/backend/registry.hpp"
#include "npo/hal/device.hpp"
#include "npo/hal/fabric_spec.hpp"
#include "npo/hal/port.hpp"
#include "npo/hal/system.hpp"
#include "npo/hal/topology.hpp"
#include "npo/hal/topology_check.hpp"

namespace npo {
namespace {

constexpr std::uint64_t kMs = 1'000'000;

/// Writes `spec` to a temporary file, removed on destruction.
struct TempFile {
  explicit TempFile(const std::string& text, const char* ext = ".yaml") {
    static int n = 0;
    path = std::filesystem::temp_directory_path() /
           ("npo-topology-" + std::to_string(::getpid()) + "-" + std::to_string(n++) + ext);
    std::ofstream out(path);
    out << text;
  }
  ~TempFile() { std::filesystem::remove(path); }
  std::filesystem::path path;
};

/// The system a topology file describes, with the emulator handle kept for switches and time.
struct FileRig {
  explicit FileRig(const FabricSpec& built, bool json = false)
      : file(json ? to_json(built) : to_yaml(built), json ? ".json" : ".yaml") {
    auto cfg = emu::parse_uri("file=" + file.path.string() + "?clock=virtual&hbm=1M&seed=7");
    EXPECT_TRUE(cfg.has_value()) << cfg.error().to_string();
    if (!cfg) return;
    auto e = emu::Emulator::create(*cfg);
    EXPECT_TRUE(e.has_value()) << e.error().to_string();
    if (!e) return;
    emu = *e;
    auto h = emu;
    EXPECT_TRUE(reg.add("emu", {"emu:test"},
                        [h](std::string_view, std::string_view uri) -> Result<std::unique_ptr<backend::Backend>> {
                          return h->make_backend(std::string(uri));
                        })
                    .has_value());
    SystemOptions o;
    o.registry = &reg;
    auto s = System::open("emu:test", o);
    EXPECT_TRUE(s.has_value()) << s.error().to_string();
    if (s) sys = std::move(*s);
  }
  [[nodiscard]] bool ok() const { return sys != nullptr; }
  Topology bring_up_and_discover() {
    auto up = bring_up_links(*sys, 60'000'000'000);  // virtual time: retries and lane degrade fit
    EXPECT_TRUE(up.has_value()) << up.error().to_string();
    auto t = discover_topology(*sys);
    EXPECT_TRUE(t.has_value()) << t.error().to_string();
    return t.value_or(Topology{});
  }
  TempFile file;
  backend::Registry reg;
  std::shared_ptr<emu::Emulator> emu;
  std::unique_ptr<System> sys;
};

FabricSpec gen(FabricKind k, unsigned n, FabricGenOptions o = {}) {
  o.hbm_bytes = 1u << 20;
  auto s = generate_fabric(k, n, o);
  EXPECT_TRUE(s.has_value()) << (s ? "" : s.error().to_string());
  return s.value_or(FabricSpec{});
}

std::string issues_text(const TopologyCheck& c) {
  std::string s;
  for (const auto& i : c.issues) s += i.message + "\n";
  return s;
}

TEST(EmuFile, Torus64DiscoveryEqualsThePlan) {
  const auto plan = gen(FabricKind::kTorus2d, 64, {.dims = {8, 8}});
  FileRig rig(plan);
  ASSERT_TRUE(rig.ok());
  EXPECT_EQ(rig.sys->device_count(), 64u);
  EXPECT_EQ(rig.sys->device(5).info().num_ports, 4u);
  const auto topo = rig.bring_up_and_discover();
  const auto check = check_topology(topo, plan);
  EXPECT_TRUE(check.ok()) << issues_text(check);
  EXPECT_EQ(check.expected_links, 128u);
  EXPECT_EQ(check.up_as_planned, 128u);
  EXPECT_EQ(topo.links.size(), 128u);
  int diameter = 0;
  for (const auto& row : topo.hop_matrix()) {
    for (int h : row) diameter = std::max(diameter, h);
  }
  EXPECT_EQ(diameter, 8) << "8x8 torus: 4 + 4";
}

TEST(EmuFile, FatTreeThroughSwitchesTrainsTheCircuits) {
  const auto plan = gen(FabricKind::kFatTree, 8, {.leaf_radix = 8, .card_uplinks = 2});
  ASSERT_EQ(plan.switches.size(), 8u);
  FileRig rig(plan, /*json=*/true);
  ASSERT_TRUE(rig.ok());
  const auto topo = rig.bring_up_and_discover();
  const auto check = check_topology(topo, plan);
  EXPECT_TRUE(check.ok()) << issues_text(check);
  EXPECT_EQ(check.expected_links, 8u);  // 16 card ports, each light path joins two
  EXPECT_EQ(check.up_as_planned, 8u);
  // Every discovered neighbour is the far end of the light path through leaf, spine, leaf.
  for (const auto& l : topo.links) {
    const auto lp = trace_light_path(plan, l.a_fabric_id - 1, l.a_port);
    ASSERT_TRUE(lp.has_value());
    EXPECT_EQ(lp->card + 1, l.b_fabric_id);
    EXPECT_EQ(lp->port, l.b_port);
    EXPECT_TRUE(l.up);
  }
}

/// A 4x4 torus plan and the same fabric as built with `edit` applied.
TopologyCheck check_built(const std::function<void(FabricSpec&)>& edit) {
  const auto plan = gen(FabricKind::kTorus2d, 16, {.dims = {4, 4}});
  auto built = plan;
  edit(built);
  EXPECT_TRUE(validate_fabric_spec(built).has_value());
  FileRig rig(built);
  EXPECT_TRUE(rig.ok());
  if (!rig.ok()) return {};
  return check_topology(rig.bring_up_and_discover(), plan);
}

TEST(EmuFile, SwappedCablesAreNamedMiswiredWithBothEnds) {
  // Cable 0 joins 0:0-1:1 and cable 4 joins 2:0-3:1 in the plan; the built fabric swaps their
  // b ends: 0:0-3:1 and 2:0-1:1.
  const auto check = check_built([](FabricSpec& s) {
    ASSERT_EQ(s.end_name(s.cables[0].a), "0:0");
    ASSERT_EQ(s.end_name(s.cables[0].b), "1:1");
    ASSERT_EQ(s.end_name(s.cables[4].a), "2:0");
    ASSERT_EQ(s.end_name(s.cables[4].b), "3:1");
    std::swap(s.cables[0].b, s.cables[4].b);
  });
  const auto mis = check.of(LinkIssueKind::kMiswired);
  ASSERT_EQ(mis.size(), 4u) << issues_text(check);
  EXPECT_EQ(mis[0].at, (CardPort{0, 0}));
  EXPECT_EQ(mis[0].expected, (CardPort{1, 1}));
  EXPECT_EQ(mis[0].found, (CardPort{3, 1}));
  EXPECT_EQ(mis[0].message, "miswired: 0:0 expected 1:1, found 3:1");
  EXPECT_EQ(mis[1].message, "miswired: 1:1 expected 0:0, found 2:0");
  EXPECT_EQ(mis[2].message, "miswired: 2:0 expected 3:1, found 1:1");
  EXPECT_EQ(mis[3].message, "miswired: 3:1 expected 2:0, found 0:0");
  EXPECT_EQ(check.issues.size(), 4u) << issues_text(check);
  EXPECT_EQ(check.up_as_planned, 30u);
}

TEST(EmuFile, MissingCableIsNamed) {
  const auto check = check_built([](FabricSpec& s) { s.cables.erase(s.cables.begin() + 5); });
  ASSERT_EQ(check.issues.size(), 1u) << issues_text(check);
  const auto& i = check.issues[0];
  EXPECT_EQ(i.kind, LinkIssueKind::kMissing);
  EXPECT_EQ(i.message, "missing: 2:2 <-> 6:3 (no link trained)");
  EXPECT_EQ(check.up_as_planned, 31u);
}

TEST(EmuFile, UnplannedCableIsUnexpected) {
  // The plan's 4x4 torus uses ports 0..3 of 4; grow the built cards to 5 ports and add 0:4-5:4.
  const auto check = check_built([](FabricSpec& s) {
    s.ports = 5;
    s.cables.push_back(FabricCable{FabricEnd{false, 0, 4}, FabricEnd{false, 5, 4}, {}});
  });
  ASSERT_EQ(check.issues.size(), 1u) << issues_text(check);
  EXPECT_EQ(check.issues[0].kind, LinkIssueKind::kUnexpected);
  EXPECT_EQ(check.issues[0].message, "unexpected: 0:4 <-> 5:4 trained, the plan has no light path at 0:4");
}

TEST(EmuFile, DeadLaneIsNamedDegraded) {
  const auto plan = gen(FabricKind::kTorus2d, 16, {.dims = {4, 4}});
  auto built = plan;
  built.cables[3].channel.dead_lanes = 0x80;  // lane 7 of 1:2 - 5:3 carries no light
  FileRig rig(built);
  ASSERT_TRUE(rig.ok());
  const auto topo = rig.bring_up_and_discover();
  const auto check = check_topology(topo, plan);
  const auto deg = check.of(LinkIssueKind::kDegraded);
  ASSERT_EQ(deg.size(), 1u) << issues_text(check);
  EXPECT_EQ(deg[0].at, (CardPort{1, 2}));
  EXPECT_EQ(deg[0].lanes, 7u);
  EXPECT_EQ(deg[0].message, "degraded: 1:2 <-> 5:3 up with 7/8 lanes");
  EXPECT_EQ(check.issues.size(), 1u) << issues_text(check);
}

// ---- Optical switches at runtime ------------------------------------------------------------

FabricSpec four_cards_one_switch() {
  auto s = parse_fabric_spec(R"(
cards: {count: 4, ports: 2, hbm: 1M}
switches: [{name: ocs, ports: 6, insertion_loss_db: 2, connect: [[0, 1], [2, 3]]}]
cables:
  - {a: "0:0", b: "ocs:0", loss_db: 1}
  - {a: "1:0", b: "ocs:1", loss_db: 1.5}
  - {a: "2:0", b: "ocs:2", loss_db: 0.5}
  - {a: "3:0", b: "ocs:3", loss_db: 0.5, snr_penalty_db: 0.5}
  - {a: "0:1", b: "3:1"}
faults:
  - {at_ms: 1, kind: iommu_fault, card: 2, count: 3}
)");
  EXPECT_TRUE(s.has_value()) << s.error().to_string();
  return s.value_or(FabricSpec{});
}

TEST(EmuFile, SwitchCrossConnectsAndReconfiguration) {
  const auto plan = four_cards_one_switch();
  FileRig rig(plan);
  ASSERT_TRUE(rig.ok());
  auto& e = *rig.emu;
  auto xc = e.cross_connects("ocs");
  ASSERT_TRUE(xc.has_value());
  EXPECT_EQ(*xc, (std::vector<std::pair<unsigned, unsigned>>{{0, 1}, {2, 3}}));
  const auto topo = rig.bring_up_and_discover();
  const auto check = check_topology(topo, plan);
  EXPECT_TRUE(check.ok()) << issues_text(check);
  EXPECT_EQ(check.up_as_planned, 3u);

  // Errors.
  EXPECT_EQ(e.connect("nope", 0, 1).error().code(), Code::kNotFound);
  EXPECT_EQ(e.connect("ocs", 0, 9).error().code(), Code::kOutOfRange);
  EXPECT_EQ(e.connect("ocs", 4, 4).error().code(), Code::kInvalidArgument);
  EXPECT_EQ(e.connect("ocs", 0, 2).error().code(), Code::kFailedPrecondition);  // both busy
  EXPECT_EQ(e.connect("ocs", 4, 5).error().code(), Code::kFailedPrecondition);  // no cables
  EXPECT_EQ(e.disconnect("ocs", 4).error().code(), Code::kFailedPrecondition);  // idle
  EXPECT_EQ(e.disconnect("ocs", 6).error().code(), Code::kOutOfRange);

  // Re-pair 0-2 and 1-3: the light paths change and the event log says so per card port.
  ASSERT_TRUE(e.disconnect("ocs", 1).has_value());
  ASSERT_TRUE(e.disconnect("ocs", 3).has_value());
  ASSERT_TRUE(e.connect("ocs", 0, 2).has_value());
  ASSERT_TRUE(e.connect("ocs", 3, 1).has_value());
  xc = e.cross_connects("ocs");
  ASSERT_TRUE(xc.has_value());
  EXPECT_EQ(*xc, (std::vector<std::pair<unsigned, unsigned>>{{0, 2}, {1, 3}}));
  const auto log = e.event_log();
  auto has = [&](std::string_view needle) {
    return std::any_of(log.begin(), log.end(), [&](const std::string& l) { return l.find(needle) != l.npos; });
  };
  EXPECT_TRUE(has("card=0 fabric disconnect ocs:1 port=0 light path now dark"));
  EXPECT_TRUE(has("card=0 fabric connect ocs:0-2 port=0 light path now to card=2 port=0"));
  EXPECT_TRUE(has("card=2 fabric connect ocs:0-2 port=0 light path now to card=0 port=0"));
  EXPECT_TRUE(has("card=3 fabric connect ocs:3-1 port=0 light path now to card=1 port=0"));
  // The plan with the new cross-connects traces the same way.
  auto replan = plan;
  replan.switches[0].cross_connects = {{0, 2}, {1, 3}};
  const auto lp = trace_light_path(replan, 0, 0);
  ASSERT_TRUE(lp.has_value());
  EXPECT_EQ(lp->card, 2u);
  EXPECT_DOUBLE_EQ(lp->channel.loss_db, 1 + 2 + 0.5);
  // The cards see their light paths change: every Up link whose far end changed drops (a
  // flap, registers.md §7.2) and retrains by itself with the new neighbour -- no host action.
  ASSERT_TRUE(e.advance(1 * kMs).has_value());
  for (std::size_t c = 0; c < 4; ++c) {
    auto ps = read_port(rig.sys->device(c), 0);
    ASSERT_TRUE(ps.has_value());
    EXPECT_NE(ps->state, LinkState::kUp) << "card " << c << " port 0 still Up on a changed light path";
    EXPECT_GE(ps->flap_count, 1u) << "card " << c;
  }
  ASSERT_TRUE(e.advance(2'000 * kMs).has_value());
  auto after = discover_topology(*rig.sys);
  ASSERT_TRUE(after.has_value());
  const auto recheck = check_topology(*after, replan);
  EXPECT_TRUE(recheck.ok()) << issues_text(recheck);
  EXPECT_EQ(recheck.up_as_planned, 3u);
  const auto old = check_topology(*after, plan);
  EXPECT_EQ(old.of(LinkIssueKind::kMiswired).size(), 4u) << issues_text(old);
}

TEST(EmuFile, FileFaultsAreScheduled) {
  FileRig rig(four_cards_one_switch());
  ASSERT_TRUE(rig.ok());
  ASSERT_TRUE(rig.emu->advance(2 * kMs).has_value());
  const auto log = rig.emu->event_log();
  EXPECT_TRUE(
      std::any_of(log.begin(), log.end(),
                  [](const std::string& l) { return l.find("card=2 fault iommu_fault count=3") != std::string::npos; }))
      << "log has " << log.size() << " lines";
}

TEST(EmuFile, UriErrors) {
  auto r = emu::parse_uri("file=/nonexistent/npo-topology.yaml");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kNotFound);
  EXPECT_NE(r.error().message().find("/nonexistent/npo-topology.yaml"), std::string::npos);
  TempFile bad("cards: {count: 2, ports: 2}\ncables: [{a: '0:0', b: '1:5'}]\n");
  r = emu::parse_uri("file=" + bad.path.string());
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kInvalidArgument);
  EXPECT_NE(r.error().message().find("cables[0].b: port 5 beyond card 1"), std::string::npos) << r.error().message();
  TempFile good(to_yaml(four_cards_one_switch()));
  r = emu::parse_uri("file=" + good.path.string() + "?ports=4");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("ports"), std::string::npos);
  r = emu::parse_uri("file=" + good.path.string() + "?clock=virtual&seed=3&hbm=2M");
  ASSERT_TRUE(r.has_value()) << r.error().to_string();
  EXPECT_EQ(r->num_cards, 4u);
  EXPECT_EQ(r->card.hbm_bytes, 2u << 20);
  EXPECT_EQ(r->seed, 3u);
  EXPECT_EQ(r->switches.size(), 1u);
  EXPECT_EQ(r->switch_cables.size(), 4u);
  EXPECT_EQ(r->cables.size(), 1u);
  EXPECT_EQ(r->faults.size(), 1u);
}

TEST(EmuFile, PerCardOverridesReachTheCards) {
  auto s = parse_fabric_spec(
      "cards: {count: 3, ports: 4, hbm: 2M, overrides: [{card: 1, ports: 2, hbm: 4M}]}\n"
      "cables: [{a: '0:0', b: '1:1'}]\n");
  ASSERT_TRUE(s.has_value()) << s.error().to_string();
  TempFile f(to_yaml(*s));
  auto cfg = emu::parse_uri("file=" + f.path.string() + "?clock=virtual");
  ASSERT_TRUE(cfg.has_value()) << cfg.error().to_string();
  ASSERT_EQ(cfg->per_card.size(), 3u);
  EXPECT_EQ(cfg->per_card[1].num_ports, 2u);
  EXPECT_EQ(cfg->per_card[1].hbm_bytes, 4u << 20);
  EXPECT_EQ(cfg->per_card[2].num_ports, 4u);
  auto e = emu::Emulator::create(*cfg);
  ASSERT_TRUE(e.has_value()) << e.error().to_string();
  // A fault on a port the overridden card lacks is refused.
  emu::Fault bad{};
  bad.kind = emu::FaultKind::kFlapStorm;
  bad.card = 1;
  bad.port = 3;
  EXPECT_EQ((*e)->inject(bad).error().code(), Code::kOutOfRange);
}

}  // namespace
}  // namespace npo
