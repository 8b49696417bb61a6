// SPDX-License-Identifier: Apache-2.0
// Scenarios: the scripted faults layered on a topology plan. One validator (the emulator's)
// for a topology file's `faults`, scenario files and text, and `npo-emu topo check`; one
// hardened parser (the topology files') for both file kinds (docs/topology.md "Scenarios").
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "npo/emu/emulator.hpp"
#include "npo/hal/topology_file.hpp"

namespace npo {
namespace {

struct BadCase {
  const char* name;
  std::string text;
  std::string expect;  // substring of the message
};

const std::string kHead = "cards: {count: 4, ports: 4}\n";

// Moved from fabric_spec_test.cpp (FabricSpecErrors): the meaning of a fault entry is the
// emulator's, so the plan parses and the emulator's validator names the entry and field.
class TopologyFileFaultErrors : public testing::TestWithParam<BadCase> {};

TEST_P(TopologyFileFaultErrors, NameTheEntryAndField) {
  auto plan = parse_fabric_spec(GetParam().text);
  ASSERT_TRUE(plan.has_value()) << plan.error().to_string();
  auto s = emu::check_scenario(*plan);
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().code(), Code::kInvalidArgument);
  EXPECT_NE(s.error().message().find(GetParam().expect), std::string::npos)
      << "message: " << s.error().message() << "\nexpected to contain: " << GetParam().expect;
  // emu:file= refuses the same file with the same words.
  auto cfg = emu::system_config_from_spec(*plan);
  ASSERT_FALSE(cfg.has_value());
  EXPECT_EQ(cfg.error().message(), s.error().message());
}

INSTANTIATE_TEST_SUITE_P(
    All, TopologyFileFaultErrors,
    testing::Values(BadCase{"fault_kind", kHead + "faults: [{at_ms: 1, kind: meteor, card: 0}]",
                            "faults[0].kind: unknown fault kind 'meteor'"},
                    BadCase{"fault_card", kHead + "faults: [{at_ms: 1, kind: iommu_fault, card: 9}]",
                            "faults[0].card: card 9 outside 0..3"},
                    BadCase{"fault_port", kHead + "faults: [{at_ms: 1, kind: lane_loss, card: 0, port: 4, lane: 0}]",
                            "faults[0].port: port 4 beyond card 0"},
                    BadCase{"fault_needs_port", kHead + "faults: [{at_ms: 1, kind: flap_storm, card: 0}]",
                            "faults[0].port: flap_storm needs a port"},
                    BadCase{"fault_needs_lane", kHead + "faults: [{at_ms: 1, kind: lane_loss, card: 0, port: 1}]",
                            "faults[0].lane: lane_loss needs a lane"},
                    BadCase{"fault_lane", kHead + "faults: [{at_ms: 1, kind: lane_loss, card: 0, port: 1, lane: 8}]",
                            "faults[0].lane: 8 outside 0..7"},
                    BadCase{"fault_engine", kHead + "faults: [{at_ms: 1, kind: engine_hang, card: 0}]",
                            "faults[0].engine: engine_hang needs an engine"},
                    BadCase{"fault_count", kHead + "faults: [{at_ms: 1, kind: iommu_fault, card: 0, count: 0}]",
                            "faults[0].count: must be >= 1"}),
    [](const auto& p) { return std::string(p.param.name); });

// ---- Scenario files: the topology files' hardened rules (issue 19) ----------------------------

/// A 2-card emulator to load scenarios into.
std::shared_ptr<emu::Emulator> two_cards() {
  auto cfg = emu::parse_uri("2?clock=virtual&hbm=1M");
  EXPECT_TRUE(cfg.has_value());
  auto e = emu::Emulator::create(cfg.value_or(emu::SystemConfig{}));
  EXPECT_TRUE(e.has_value()) << e.error().to_string();
  return e.value_or(nullptr);
}

class ScenarioErrors : public testing::TestWithParam<BadCase> {};

TEST_P(ScenarioErrors, AreRefusedWhole) {
  auto e = two_cards();
  ASSERT_NE(e, nullptr);
  auto r = e->load_scenario_text(GetParam().text);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), Code::kInvalidArgument);
  EXPECT_NE(r.error().message().find(GetParam().expect), std::string::npos)
      << "message: " << r.error().message() << "\nexpected to contain: " << GetParam().expect;
  ASSERT_TRUE(e->advance(std::uint64_t{10} << 30).has_value());
  EXPECT_TRUE(e->event_log().empty()) << "nothing of a refused scenario may be scheduled";
}

const std::string kOk = "  - {at_ms: 1, kind: mailbox_timeout, card: 0}\n";

INSTANTIATE_TEST_SUITE_P(
    All, ScenarioErrors,
    testing::Values(
        BadCase{"faults_twice", "faults:\n" + kOk + "faults:\n" + kOk, "scenario: field 'faults' given twice"},
        BadCase{"unknown_top_key", "fautls: []\nfaults:\n" + kOk, "scenario: unknown field 'fautls'"},
        BadCase{"no_faults", "seed: 3\n", "scenario: needs 'faults'"},
        BadCase{"at_twice", "faults:\n  - {at_ms: 1, at_ns: 5, kind: mailbox_timeout, card: 0}\n",
                "faults[0].at_ms: given with at_ns"},
        BadCase{"at_overflow", "faults:\n  - {at_ms: 18446744073709551615, kind: mailbox_timeout, card: 0}\n",
                "faults[0].at_ms: 18446744073709551615 overflows 64-bit nanoseconds"},
        BadCase{"duration_overflow",
                "faults:\n  - {at_ms: 1, kind: flap_storm, card: 0, port: 0, duration_ms: 18446744073709551}\n",
                "faults[0].duration_ms: 18446744073709551 overflows 64-bit nanoseconds"},
        BadCase{"duration_twice",
                "faults:\n  - {at_ms: 1, kind: lane_loss, card: 0, port: 0, lane: 1, "
                "duration_ms: 1, duration_us: 5}\n",
                "faults[0].duration_ms: given with duration_us"},
        BadCase{"count_wraps", "faults:\n  - {at_ms: 1, kind: iommu_fault, card: 0, count: 4294967296}\n",
                "faults[0].count: 4294967296 is larger than 4294967295"},
        BadCase{"value_nan", "faults:\n  - {at_ms: 1, kind: ber_ramp, card: 0, port: 0, value: .nan}\n",
                "faults[0].value: expected a finite number"},
        BadCase{"two_documents", "faults:\n" + kOk + "---\nfaults:\n" + kOk, "more than one YAML document"},
        BadCase{"key_twice_in_entry", "faults:\n  - {at_ms: 1, kind: mailbox_timeout, card: 0, card: 1}\n",
                "faults[0]: field 'card' given twice"},
        BadCase{"negative_card", "faults:\n  - {at_ms: 1, kind: mailbox_timeout, card: -1}\n", "faults[0].card"},
        BadCase{"ber_value", "faults:\n  - {at_ms: 1, kind: ber_ramp, card: 0, port: 0, value: 0.7}\n",
                "faults[0].value: (final pre-FEC BER) 0.7 must be in (0, 0.5)"}),
    [](const auto& p) { return std::string(p.param.name); });

TEST(Scenario, FilesAreCappedAt16MiB) {
  auto e = two_cards();
  ASSERT_NE(e, nullptr);
  auto r = e->load_scenario_file("/dev/zero");  // used to read forever
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), Code::kInvalidArgument);
  EXPECT_NE(r.error().message().find("larger than 16 MiB"), std::string::npos) << r.error().message();
  auto missing = e->load_scenario_file("/nonexistent/npo-scenario.yaml");
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code(), Code::kNotFound);
}

TEST(Scenario, ADirectoryIsNotAScenario) {
  auto e = two_cards();
  ASSERT_NE(e, nullptr);
  auto r = e->load_scenario_file("/tmp");  // used to say "top level must be a map"
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), Code::kInvalidArgument);
  EXPECT_NE(r.error().message().find("is a directory"), std::string::npos) << r.error().message();
}

// Issue 19: a flap_storm of 2^32-1 flaps scheduled them all when it fired, on the realtime
// timer thread, which the emulator's destructor then waited for (npo-smi never exited). The
// flaps are now scheduled one after another: the destructor returns at once (the bound
// below only turns a hang into a failure).
TEST(Scenario, HugeFlapStormDoesNotHoldTheEmulator) {
  auto cfg = emu::parse_uri("2?hbm=1M");
  ASSERT_TRUE(cfg.has_value());
  ASSERT_EQ(cfg->clock, emu::ClockMode::kRealtime);
  auto e = emu::Emulator::create(*cfg);
  ASSERT_TRUE(e.has_value()) << e.error().to_string();
  ASSERT_TRUE(
      (*e)->load_scenario_text("faults: [{at_ns: 0, kind: flap_storm, card: 0, port: 0, count: 4294967295, "
                               "duration_ms: 1}]"));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the storm is under way
  const auto t0 = std::chrono::steady_clock::now();
  e->reset();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

TEST(Scenario, SeedAndFaultsAreRead) {
  auto sc = parse_fabric_scenario("seed: 42\nfaults:\n  - {at_us: 3, kind: lane_loss, card: 1, port: 2, lane: 5}\n");
  ASSERT_TRUE(sc.has_value()) << sc.error().to_string();
  EXPECT_EQ(sc->seed, 42u);
  ASSERT_EQ(sc->faults.size(), 1u);
  EXPECT_EQ(sc->faults[0].at_ns, 3'000u);
  EXPECT_EQ(sc->faults[0].kind, "lane_loss");
  EXPECT_EQ(sc->faults[0].lane, 5u);
}

TEST(Scenario, TopoCheckRefusesWhatTheEmulatorRefuses) {
  // A fault the emulator would refuse at emu:file= time is refused by check_scenario (the
  // check `npo-emu topo check` runs): the same validator.
  auto plan = parse_fabric_spec(kHead + "faults: [{at_ms: 1, kind: ber_ramp, card: 0, port: 0, value: 0.7}]\n");
  ASSERT_TRUE(plan.has_value());
  auto r = emu::check_scenario(*plan);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message().find("faults[0].value"), std::string::npos) << r.error().message();
  plan->faults[0].value = 1e-5;
  EXPECT_TRUE(emu::check_scenario(*plan).has_value());
}

}  // namespace
}  // namespace npo
