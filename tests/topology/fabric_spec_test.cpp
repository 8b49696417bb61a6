// SPDX-License-Identifier: Apache-2.0
// Topology files: parsing (YAML and JSON), every validation error naming its entry and field,
// round trips, light paths through switches (docs/topology.md).
#include "npo/hal/fabric_spec.hpp"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>

#include <gtest/gtest.h>

namespace npo {
namespace {

constexpr const char* kExample = R"(
name: two racks through one switch
cards:
  count: 4
  hbm: 64M
  ports: 4
  overrides:
    - {card: 3, ports: 2, hbm: 32M}
switches:
  - name: ocs0
    ports: 8
    insertion_loss_db: 1.5
    connect: [[0, 1], [2, 3]]
cables:
  - {a: "0:0", b: "1:0"}
  - {a: "0:1", b: "ocs0:0", loss_db: 2.5}
  - {a: "2:1", b: "ocs0:1", loss_db: 3.5, snr_penalty_db: 1.25, dead_lanes: [7]}
  - {a: "1:1", b: "ocs0:2"}
  - {a: "3:1", b: "ocs0:3", dead_lanes: 0x3}
  - {a: "2:0", b: "ocs0:4"}
faults:
  - {at_ms: 5, kind: lane_loss, card: 0, port: 0, lane: 3}
  - {at_us: 7, kind: flap_storm, card: 1, port: 1, count: 2, duration_ms: 50}
  - {at_ns: 9, kind: ber_ramp, card: 2, port: 0, value: 1e-5, duration_ms: 100}
)";

FabricSpec example() {
  auto s = parse_fabric_spec(kExample);
  EXPECT_TRUE(s.has_value()) << (s ? "" : s.error().to_string());
  return s.value_or(FabricSpec{});
}

TEST(FabricSpec, ParsesEveryField) {
  const auto s = example();
  EXPECT_EQ(s.name, "two racks through one switch");
  EXPECT_EQ(s.cards, 4u);
  EXPECT_EQ(s.hbm_bytes, 64u << 20);
  EXPECT_EQ(s.ports, 4u);
  EXPECT_EQ(s.ports_of(3), 2u);
  EXPECT_EQ(s.ports_of(2), 4u);
  EXPECT_EQ(s.hbm_of(3), 32u << 20);
  ASSERT_EQ(s.switches.size(), 1u);
  EXPECT_EQ(s.switches[0].name, "ocs0");
  EXPECT_EQ(s.switches[0].ports, 8u);
  EXPECT_EQ(s.switches[0].cross_connects, (std::vector<std::pair<unsigned, unsigned>>{{0, 1}, {2, 3}}));
  ASSERT_EQ(s.cables.size(), 6u);
  EXPECT_EQ(s.cables[1].b, (FabricEnd{true, 0, 0}));
  EXPECT_DOUBLE_EQ(s.cables[1].channel.loss_db, 2.5);
  EXPECT_DOUBLE_EQ(s.cables[2].channel.snr_penalty_db, 1.25);
  EXPECT_EQ(s.cables[2].channel.dead_lanes, 0x80);
  EXPECT_EQ(s.cables[4].channel.dead_lanes, 0x03);
  ASSERT_EQ(s.faults.size(), 3u);
  EXPECT_EQ(s.faults[0].at_ns, 5'000'000u);
  EXPECT_EQ(s.faults[0].kind, "lane_loss");
  EXPECT_EQ(s.faults[0].lane, 3u);
  EXPECT_EQ(s.faults[1].at_ns, 7'000u);
  EXPECT_EQ(s.faults[1].count, 2u);
  EXPECT_EQ(s.faults[1].duration_ns, 50'000'000u);
  EXPECT_DOUBLE_EQ(s.faults[2].value, 1e-5);
}

TEST(FabricSpec, LightPathsFollowCrossConnectsAndAddLosses) {
  const auto s = example();
  auto p = trace_light_path(s, 0, 1);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->card, 2u);
  EXPECT_EQ(p->port, 1u);
  EXPECT_EQ(p->switch_hops, 1u);
  EXPECT_DOUBLE_EQ(p->channel.loss_db, 2.5 + 1.5 + 3.5);
  EXPECT_DOUBLE_EQ(p->channel.snr_penalty_db, 1.25);
  EXPECT_EQ(p->channel.dead_lanes, 0x80);
  p = trace_light_path(s, 1, 1);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->card, 3u);
  EXPECT_EQ(p->channel.dead_lanes, 0x03);
  p = trace_light_path(s, 0, 0);  // direct cable
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->card, 1u);
  EXPECT_EQ(p->switch_hops, 0u);
  EXPECT_DOUBLE_EQ(p->channel.loss_db, 3.0);
  EXPECT_FALSE(trace_light_path(s, 2, 0)) << "cabled to an idle switch port: dark";
  EXPECT_FALSE(trace_light_path(s, 0, 3)) << "no cable";
  const auto c = analyze_fabric(s, FabricView::kCircuit);
  EXPECT_EQ(c.edges, 3u);
  const auto ph = analyze_fabric(s, FabricView::kPhysical);
  EXPECT_EQ(ph.edges, 6u);
  EXPECT_EQ(ph.switch_radixes, (std::map<unsigned, unsigned>{{8, 1}}));
  EXPECT_EQ(ph.switch_degrees, (std::map<unsigned, unsigned>{{5, 1}}));
}

TEST(FabricSpec, RoundTripsThroughYamlAndJson) {
  const auto s = example();
  auto y = parse_fabric_spec(to_yaml(s));
  ASSERT_TRUE(y.has_value()) << y.error().to_string() << "\n" << to_yaml(s);
  EXPECT_EQ(*y, s);
  auto j = parse_fabric_spec(to_json(s));
  ASSERT_TRUE(j.has_value()) << j.error().to_string() << "\n" << to_json(s);
  EXPECT_EQ(*j, s);
  EXPECT_EQ(to_yaml(*y), to_yaml(s));
}

TEST(FabricSpec, LoadsFilesAndNamesThePath) {
  const auto dir = std::filesystem::temp_directory_path();
  const auto path = dir / "npo-topology-test-example.yaml";
  {
    std::ofstream out(path);
    out << kExample;
  }
  auto s = load_fabric_spec(path);
  ASSERT_TRUE(s.has_value()) << s.error().to_string();
  EXPECT_EQ(s->cards, 4u);
  std::filesystem::remove(path);
  auto missing = load_fabric_spec(dir / "npo-no-such-topology.yaml");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code(), Code::kNotFound);
  EXPECT_NE(missing.error().message().find("npo-no-such-topology.yaml"), std::string::npos);
}

TEST(FabricSpec, CardsAsPlainCount) {
  auto s = parse_fabric_spec("{cards: 2, cables: [{a: '0:0', b: '1:0'}]}");
  ASSERT_TRUE(s.has_value()) << s.error().to_string();
  EXPECT_EQ(s->cards, 2u);
  EXPECT_EQ(s->ports, 8u);
}

TEST(FabricSpec, LoadRefusesDirectoriesEndlessAndHugeFiles) {
  const auto dir = std::filesystem::temp_directory_path();
  auto d = load_fabric_spec(dir);  // used to read as empty text: "topology: expected a map"
  ASSERT_FALSE(d);
  EXPECT_NE(d.error().to_string().find("is a directory"), std::string::npos) << d.error().to_string();
  auto z = load_fabric_spec("/dev/zero");  // used to read forever
  ASSERT_FALSE(z);
  EXPECT_EQ(z.error().code(), Code::kInvalidArgument);
  EXPECT_NE(z.error().message().find("larger than 16 MiB"), std::string::npos) << z.error().message();
  const auto path = dir / "npo-topology-test-huge.yaml";
  {
    std::ofstream out(path);
    out << "cards: 2\nname: \"" << std::string((17u << 20), 'x') << "\"\n";
  }
  auto h = load_fabric_spec(path);
  ASSERT_FALSE(h);
  EXPECT_NE(h.error().message().find("larger than 16 MiB"), std::string::npos) << h.error().message();
  std::filesystem::remove(path);
}

TEST(FabricSpec, ProgrammaticSpecsWithNonFiniteOrNonUtf8AreRefusedAndNeverThrow) {
  FabricSpec s = *parse_fabric_spec("{cards: 2, cables: [{a: '0:0', b: '1:0'}]}");
  s.cables[0].channel.loss_db = std::numeric_limits<double>::infinity();
  auto r = validate_fabric_spec(s);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("cables[0].loss_db: inf must be finite"), std::string::npos)
      << r.error().message();
  s.cables[0].channel.loss_db = 3.0;
  s.name = "\xff";
  EXPECT_FALSE(validate_fabric_spec(s));
  std::string j;
  EXPECT_NO_THROW(j = to_json(s));  // nlohmann would throw type_error 316 on the raw byte
  EXPECT_NE(j.find("\"name\""), std::string::npos);
}

TEST(FabricSpec, NamesWithControlCharactersRoundTrip) {
  FabricSpec s = *parse_fabric_spec("{cards: 2, switches: [{name: \"a\\tb\", ports: 2}]}");
  s.name = "rack 3\nrow \"7\"\t\\";
  ASSERT_TRUE(validate_fabric_spec(s));
  auto y = parse_fabric_spec(to_yaml(s));  // a raw newline inside quotes used to fold into a space
  ASSERT_TRUE(y.has_value()) << y.error().to_string() << "\n" << to_yaml(s);
  EXPECT_EQ(*y, s);
  auto j = parse_fabric_spec(to_json(s));
  ASSERT_TRUE(j.has_value()) << j.error().to_string();
  EXPECT_EQ(*j, s);
}

TEST(FabricSpec, SwitchCountAndTotalPortsAreBounded) {
  // 40,000 switches of 4096 ports (a 1.3 MB file) used to take 10 s and 1.5 GB in validation;
  // a 16 MiB file of them would exhaust memory.
  std::string many = "cards: 2\nswitches:\n";
  for (int i = 0; i < 4097; ++i) many += "  - {name: s" + std::to_string(i) + ", ports: 2}\n";
  auto r = parse_fabric_spec(many);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("switches: 4097 switches; at most 4096"), std::string::npos)
      << r.error().message();
  std::string big = "cards: 2\nswitches:\n";
  for (int i = 0; i < 65; ++i) big += "  - {name: s" + std::to_string(i) + ", ports: 4096}\n";
  r = parse_fabric_spec(big);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("switches[64].ports: the switches have more than 262144 ports in all"),
            std::string::npos)
      << r.error().message();
}

struct BadCase {
  const char* name;
  std::string text;
  std::string expect;  // substring of the message
};

class FabricSpecErrors : public testing::TestWithParam<BadCase> {};

TEST_P(FabricSpecErrors, NameTheEntryAndField) {
  auto s = parse_fabric_spec(GetParam().text);
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().code(), Code::kInvalidArgument);
  EXPECT_NE(s.error().message().find(GetParam().expect), std::string::npos)
      << "message: " << s.error().message() << "\nexpected to contain: " << GetParam().expect;
}

const std::string kHead = "cards: {count: 4, ports: 4}\n";
const std::string kSw = "switches: [{name: s0, ports: 4, connect: [[0, 1]]}]\n";

INSTANTIATE_TEST_SUITE_P(
    All, FabricSpecErrors,
    testing::Values(
        BadCase{"syntax", "cards: [1, 2", "not YAML/JSON: line"}, BadCase{"no_cards", "cables: []", "needs 'cards'"},
        BadCase{"unknown_top_key", kHead + "cabels: []", "topology: unknown field 'cabels'"},
        BadCase{"card_count", "cards: 2000", "cards.count: 2000 outside 1..1024"},
        BadCase{"card_ports", "cards: {count: 2, ports: 17}", "cards.ports: 17 outside 1..16"},
        BadCase{"hbm", "cards: {count: 2, hbm: 1000}", "cards.hbm: 1000 bytes"},
        BadCase{"override_card", "cards: {count: 2, overrides: [{card: 2, ports: 1}]}",
                "cards.overrides[0].card: card 2 outside 0..1"},
        BadCase{"override_twice", "cards: {count: 2, overrides: [{card: 1, ports: 1}, {card: 1, ports: 2}]}",
                "cards.overrides[1].card: card 1 already overridden by cards.overrides[0]"},
        BadCase{"port_beyond_card", kHead + "cables: [{a: '0:0', b: '1:4'}]",
                "cables[0].b: port 4 beyond card 1 (4 ports: 0..3)"},
        BadCase{"port_beyond_override",
                "cards: {count: 4, ports: 4, overrides: [{card: 2, ports: 2}]}\ncables: [{a: '0:0', b: '2:2'}]",
                "cables[0].b: port 2 beyond card 2 (2 ports: 0..1)"},
        BadCase{"card_beyond_system", kHead + "cables: [{a: '4:0', b: '1:0'}]", "cables[0].a: card 4 outside 0..3"},
        BadCase{"port_used_twice", kHead + "cables: [{a: '0:0', b: '1:0'}, {a: '2:0', b: '0:0'}]",
                "cables[1].b: port 0:0 already used by cables[0].a"},
        BadCase{"same_port_both_ends", kHead + "cables: [{a: '0:0', b: '0:0'}]",
                "cables[0].b: port 0:0 already used by cables[0].a"},
        BadCase{"unknown_switch", kHead + "cables: [{a: '0:0', b: 'spine9:0'}]",
                "cables[0].b: unknown switch 'spine9' in 'spine9:0'"},
        BadCase{"bad_end", kHead + "cables: [{a: '0-0', b: '1:0'}]", "cables[0].a: expected CARD:PORT or SWITCH:PORT"},
        BadCase{"switch_port_beyond", kHead + kSw + "cables: [{a: '0:0', b: 's0:4'}]",
                "cables[0].b: port 4 beyond switch 's0' (4 ports: 0..3)"},
        BadCase{"xc_without_cable", kHead + kSw + "cables: [{a: '0:0', b: 's0:0'}]",
                "switches[0].connect[0]: port 1 of switch 's0' has no cable"},
        BadCase{"xc_port_twice",
                kHead + "switches: [{name: s0, ports: 4, connect: [[0, 1], [1, 2]]}]\n" +
                    "cables: [{a: '0:0', b: 's0:0'}, {a: '1:0', b: 's0:1'}, {a: '2:0', b: 's0:2'}]",
                "switches[0].connect[1]: port 1 already in connect[0]"},
        BadCase{"xc_to_itself", kHead + "switches: [{name: s0, ports: 4, connect: [[2, 2]]}]",
                "switches[0].connect[0]: port 2 cross-connected to itself"},
        BadCase{"xc_beyond", kHead + "switches: [{name: s0, ports: 4, connect: [[0, 9]]}]",
                "switches[0].connect[0]: port 9 beyond switch 's0'"},
        BadCase{"switch_dup_name", kHead + "switches: [{name: s0, ports: 4}, {name: s0, ports: 2}]",
                "switches[1].name: 's0' already names switches[0]"},
        BadCase{"switch_digits", kHead + "switches: [{name: '12', ports: 4}]", "switches[0].name: '12' is all digits"},
        BadCase{"switch_ports", kHead + "switches: [{name: s0, ports: 0}]", "switches[0].ports: 0 outside 1..4096"},
        BadCase{"loss", kHead + "cables: [{a: '0:0', b: '1:0', loss_db: -1}]", "cables[0].loss_db: -1 must be >= 0"},
        BadCase{"snr", kHead + "cables: [{a: '0:0', b: '1:0', snr_penalty_db: -0.5}]",
                "cables[0].snr_penalty_db: -0.5 must be >= 0"},
        BadCase{"dead_lane", kHead + "cables: [{a: '0:0', b: '1:0', dead_lanes: [8]}]",
                "cables[0].dead_lanes[0]: lane 8 outside 0..7"},
        BadCase{"dead_bitmap", kHead + "cables: [{a: '0:0', b: '1:0', dead_lanes: 0x100}]",
                "cables[0].dead_lanes: lane bitmap 0x100"},
        BadCase{"cable_field", kHead + "cables: [{a: '0:0', b: '1:0', los_db: 1}]",
                "cables[0]: unknown field 'los_db'"},
        BadCase{"fault_time", kHead + "faults: [{kind: iommu_fault, card: 0}]",
                "faults[0]: needs at_ns, at_us or at_ms"},
        BadCase{"not_a_number", kHead + "cables: [{a: '0:0', b: '1:0', loss_db: loud}]",
                "cables[0].loss_db: expected a number, got 'loud'"},
        // Hostile input (QA): each used to be accepted silently or read as something else.
        BadCase{"key_twice_yaml", "cards: 2\ncards: 3\n", "topology: field 'cards' given twice"},
        BadCase{"key_twice_json", R"({"cards": 2, "cards": 3})", "topology: field 'cards' given twice"},
        BadCase{"key_twice_cable", kHead + "cables: [{a: '0:0', b: '1:0', b: '2:0'}]",
                "cables[0]: field 'b' given twice"},
        BadCase{"two_documents", "cards: 2\n---\ncards: 3\n", "more than one YAML document"},
        BadCase{"empty_file", "", "topology: empty"}, BadCase{"only_comment", "# nothing\n", "topology: empty"},
        BadCase{"loss_inf", kHead + "cables: [{a: '0:0', b: '1:0', loss_db: .inf}]",
                "cables[0].loss_db: expected a finite number, got '.inf'"},
        BadCase{"loss_nan", kHead + "cables: [{a: '0:0', b: '1:0', loss_db: .nan}]",
                "cables[0].loss_db: expected a finite number"},
        BadCase{"switch_loss_inf", kHead + "switches: [{name: s0, ports: 4, insertion_loss_db: .inf}]",
                "switches[0].insertion_loss_db: expected a finite number"},
        BadCase{"fault_value_nan", kHead + "faults: [{at_ns: 1, kind: ber_ramp, card: 0, port: 0, value: .nan}]",
                "faults[0].value: expected a finite number"},
        BadCase{"fault_time_overflow", kHead + "faults: [{at_ms: 18446744073709551615, kind: iommu_fault, card: 0}]",
                "faults[0].at_ms: 18446744073709551615 overflows 64-bit nanoseconds"},
        BadCase{"name_not_string", "cards: 2\nname: {x: 1}\n", "name: expected a string"},
        BadCase{"name_not_utf8", "cards: 2\nname: \"\xff\xfe\"\n", "name: not valid UTF-8 (byte 0xff at offset 0)"},
        BadCase{"switch_name_not_utf8", kHead + "switches: [{name: \"s\xc3\", ports: 4}]",
                "switches[0].name: not valid UTF-8"},
        BadCase{"dead_lane_twice", kHead + "cables: [{a: '0:0', b: '1:0', dead_lanes: [3, 3]}]",
                "cables[0].dead_lanes[1]: lane 3 listed twice"},
        BadCase{"hbm_overflow", "cards: {count: 2, hbm: 99999999999G}", "cards.hbm: '99999999999G' is too large"},
        BadCase{"hbm_bare_prefix", "cards: {count: 2, hbm: 0x}", "got '0x'"},
        // Found by fuzz_fabric_spec: a kind of non-UTF-8 bytes parsed, then could not be
        // written back as JSON. A kind is a name: letters, digits and '_'.
        BadCase{"fault_kind_not_utf8", kHead + "faults: [{at_ms: 1, kind: \"lane\xff\", card: 0}]",
                "faults[0].kind: not a fault kind name (letters, digits and '_' only)"},
        BadCase{"fault_kind_space", kHead + "faults: [{at_ms: 1, kind: 'lane loss', card: 0}]",
                "faults[0].kind: not a fault kind name"},
        BadCase{"fault_kind_empty", kHead + "faults: [{at_ms: 1, kind: '', card: 0}]",
                "faults[0].kind: not a fault kind name"}),
    [](const auto& p) { return std::string(p.param.name); });

TEST(FabricSpec, AStreamThatStallsTheYamlParserIsRefusedAtOnce) {
  // Found by fuzz_fabric_spec: 1 KB of a JSON topology with control bytes and a dangling key
  // made yaml-cpp's LoadAll produce empty documents forever (64 s and growing memory in
  // npo-emu topo check). The parser now reads one document and only asks whether another follows.
  std::ifstream in(std::string(NPO_TEST_DATA_DIR) + "/topology-bad/stuck-stream.json", std::ios::binary);
  ASSERT_TRUE(in.good());
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(text.size(), 1000u);
  const auto r = parse_fabric_spec(text);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), Code::kInvalidArgument);
  EXPECT_NE(r.error().message().find("more than one YAML document"), std::string::npos) << r.error().message();
}

}  // namespace
}  // namespace npo
