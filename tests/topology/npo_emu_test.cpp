// SPDX-License-Identifier: Apache-2.0
// npo-emu topo generate / check: the files it writes parse back to the generator's spec, and
// check prints the graph properties of docs/topology.md.
#include <unistd.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/run_command.hpp"
#include "npo/emu/emulator.hpp"
#include "npo/hal/fabric_spec.hpp"

namespace npo {
namespace {

const std::string kTool = NPO_EMU;

std::filesystem::path tmp(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("npo-emu-test-" + std::to_string(::getpid()) + "-" + name);
}

TEST(NpoEmu, GenerateWritesWhatTheGeneratorBuilds) {
  const auto path = tmp("torus.yaml");
  auto r = npo_test::run_command(kTool + " topo generate torus3d --cards 1024 --dims 8x8x16 > " + path.string());
  ASSERT_EQ(r.status, 0) << r.out;
  auto s = load_fabric_spec(path);
  ASSERT_TRUE(s.has_value()) << s.error().to_string();
  auto want = generate_fabric(FabricKind::kTorus3d, 1024, {.dims = {8, 8, 16}});
  ASSERT_TRUE(want.has_value());
  EXPECT_EQ(*s, *want);
  std::filesystem::remove(path);
}

TEST(NpoEmu, CheckPrintsGraphProperties) {
  const auto path = tmp("fat.json");
  auto r = npo_test::run_command(kTool + " topo generate fat-tree --cards 64 --leaf-radix 32 --format json -o " +
                                 path.string());
  ASSERT_EQ(r.status, 0) << r.out;
  r = npo_test::run_command(kTool + " topo check --json " + path.string());
  ASSERT_EQ(r.status, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["cards"], 64);
  EXPECT_EQ(j["switches"], 32);
  EXPECT_EQ(j["physical"]["diameter"], 4);
  EXPECT_EQ(j["physical"]["bisection_width"], 128);
  EXPECT_EQ(j["physical"]["card_degrees"]["4"], 64);
  EXPECT_EQ(j["physical"]["switch_radixes"]["16"], 16);
  EXPECT_EQ(j["physical"]["switch_radixes"]["32"], 16);
  r = npo_test::run_command(kTool + " topo check " + path.string());
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("valid"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("diameter        4"), std::string::npos) << r.out;
  std::filesystem::remove(path);
}

TEST(NpoEmu, ErrorsAreNamed) {
  // A size the generator refuses is a refused value: exit 2 (tools/README), as below.
  auto r = npo_test::run_command(kTool + " topo generate hypercube --cards 100 2>&1");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("power of two"), std::string::npos) << r.out;
  const auto path = tmp("bad.yaml");
  r = npo_test::run_command("printf 'cards: 2\\ncables: [{a: \"0:0\", b: \"3:0\"}]\\n' > " + path.string() + " && " +
                            kTool + " topo check " + path.string() + " 2>&1");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("cables[0].b: card 3 outside 0..1"), std::string::npos) << r.out;
  std::filesystem::remove(path);
}

TEST(NpoEmu, CheckRefusesFaultsTheEmulatorRefuses) {
  // Issue 19: `topo check` used to accept a fault emu:file= then refused (the checks were two).
  const auto path = tmp("badfault.yaml");
  auto r = npo_test::run_command(
      "printf 'cards: 2\\nfaults: [{at_ms: 1, kind: ber_ramp, card: 0, port: 0, value: 0.7}]\\n' > " + path.string() +
      " && " + kTool + " topo check " + path.string() + " 2>&1");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("faults[0].value: (final pre-FEC BER) 0.7 must be in (0, 0.5)"), std::string::npos) << r.out;
  auto e = emu::parse_uri("file=" + path.string());
  ASSERT_FALSE(e.has_value());
  EXPECT_NE(e.error().message().find("faults[0].value"), std::string::npos) << e.error().message();
  std::filesystem::remove(path);
}

TEST(NpoEmu, GenerateRefusesOptionsOfAnotherKindZerosAndWrappingHbm) {
  // Each of these used to exit 0 with the option ignored, defaulted or wrapped.
  for (const auto& [args, want] : std::vector<std::pair<std::string, std::string>>{
           {"mesh --cards 4 --dims 2x2", "--dims applies to torus2d and torus3d only, not mesh"},
           {"torus2d --cards 4 --groups 2", "--groups applies to dragonfly only, not torus2d"},
           {"dragonfly --cards 8 --leaf-radix 8", "--leaf-radix applies to fat-tree only, not dragonfly"},
           {"fat-tree --cards 8 --leaf-radix 0", "--leaf-radix 0: expected a positive number"},
           {"fat-tree --cards 8 --uplinks 0", "--uplinks 0: expected a positive number"},
           {"dragonfly --cards 8 --groups 0", "--groups 0: expected a positive number"},
           {"mesh --cards 4 --hbm -1M", "--hbm: '-1M' is not a byte size"},
           {"mesh --cards 4 --hbm 99999999999999G", "--hbm: '99999999999999G' is too large"},
           {"mesh --cards 4 --hbm ' 64M'", "--hbm: ' 64M' is not a byte size"},
           // Used to exit 1: values the generator refuses are refused values too.
           {"mesh -n 0", "mesh: 0 cards outside 1..1024"},
           {"pool -n 2000", "pool: 2000 cards outside 1..1024"},
           {"mesh -n 18", "invalid_argument"},
           {"hyper -n 8", "invalid_argument"},
           {"torus2d -n 8 --dims 3x3", "invalid_argument"},
           // --ports: the pool's ports per card.
           {"mesh --cards 4 --ports 2", "--ports applies to pool only, not mesh"},
           {"pool --cards 4 --ports 0", "--ports 0: expected a positive number"},
           {"pool --cards 4 --ports 17", "--ports 17: a card has 1..16 ports"}}) {
    SCOPED_TRACE(args);
    auto r = npo_test::run_command(kTool + " topo generate " + args + " 2>&1");
    EXPECT_EQ(r.status, 2) << r.out;
    EXPECT_NE(r.out.find(want), std::string::npos) << r.out;
  }
  auto ok = npo_test::run_command(kTool + " topo generate fat-tree --cards 8 --leaf-radix 8 --uplinks 1 --hbm 1G");
  EXPECT_EQ(ok.status, 0) << ok.out;
  EXPECT_NE(ok.out.find("hbm: 1G"), std::string::npos) << ok.out;
  ok = npo_test::run_command(kTool + " topo generate pool --cards 4 --ports 2 --format json");
  ASSERT_EQ(ok.status, 0) << ok.out;
  EXPECT_NE(ok.out.find("pool 4 cards x 2 ports, 2 switches of radix 4"), std::string::npos) << ok.out;
  const auto help = npo_test::run_command(kTool + " topo generate --help");
  EXPECT_NE(help.out.find("dragonfly | pool"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("--ports"), std::string::npos) << help.out;
}

TEST(NpoEmu, CheckSurvivesHostileFiles) {
  // /dev/zero used to hang; a directory read as an empty file ("expected a map").
  auto r = npo_test::run_command("timeout 20 " + kTool + " topo check /dev/zero 2>&1");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("larger than 16 MiB"), std::string::npos) << r.out;
  r = npo_test::run_command(kTool + " topo check " + std::filesystem::temp_directory_path().string() + " 2>&1");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("is a directory"), std::string::npos) << r.out;
  // A file name that is not UTF-8: --json used to abort in nlohmann::json::dump (type_error 316).
  const auto path = tmp("\xff.yaml");
  r = npo_test::run_command("printf 'cards: 2\\n' > '" + path.string() + "' && " + kTool + " topo check --json '" +
                            path.string() + "'");
  EXPECT_EQ(r.status, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["cards"], 2);
  EXPECT_EQ(j["circuit"]["diameter"], -1);
  std::filesystem::remove(path);
  // A name that is not UTF-8 is refused by validation, not printed raw.
  const auto bad = tmp("badname.yaml");
  r = npo_test::run_command("printf 'cards: 2\\nname: \"\\377\"\\n' > " + bad.string() + " && " + kTool +
                            " topo check --json " + bad.string() + " 2>&1");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("name: not valid UTF-8"), std::string::npos) << r.out;
  std::filesystem::remove(bad);
}

}  // namespace
}  // namespace npo
