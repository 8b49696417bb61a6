// SPDX-License-Identifier: Apache-2.0
// Every tool's bad command line: exit 2 with one clear line (tools/common/cli.hpp), never
// CLI11's own codes (104..114) or its misleading texts; a malformed backend URI is 2 too.
// Also what every tool shares on a good one: --version, and the default backend.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/fake_sysfs.hpp"
#include "common/run_command.hpp"

namespace {

struct Case {
  std::string cmd;   ///< tool and arguments
  std::string want;  ///< text the output must hold
  std::string not_want = {};
};

void expect_usage_errors(const std::vector<Case>& cases) {
  for (const auto& c : cases) {
    SCOPED_TRACE(c.cmd);
    const auto r = npo_test::run_command("timeout 60 " + c.cmd + " 2>&1");
    EXPECT_EQ(r.status, 2) << r.out;
    EXPECT_NE(r.out.find(c.want), std::string::npos) << r.out;
    if (!c.not_want.empty()) {
      EXPECT_EQ(r.out.find(c.not_want), std::string::npos) << r.out;
    }
  }
}

const std::string kLink = NPO_LINK;
const std::string kSmi = NPO_SMI;
const std::string kBench = NPO_DMA_BENCH;
const std::string kEmu = NPO_EMU;
const std::string kEmud = NPO_EMUD;
const std::string kBe = " --backend 'emu:mesh8?clock=virtual&hbm=1M'";

TEST(ToolsCli, BadCommandLinesExit2WithAClearMessage) {
  expect_usage_errors({
      // Used to exit 106 "A subcommand is required".
      {kLink + " shwo", "npo-link: unknown subcommand 'shwo' (did you mean 'show'?", "A subcommand is required"},
      {kLink + " frobnicate", "unknown subcommand 'frobnicate' (try: decode, show, ddm, fec, prbs, train"},
      {kLink, "npo-link: a subcommand is required (try: decode, show"},
      // Used to exit 109: --backend is an option of the subcommands.
      {kLink + " --backend emu:2 show", "option '--backend' belongs to a subcommand: put it after it"},
      {kLink + " show --crad 1" + kBe, "npo-link show: unknown option '--crad' (did you mean '--card'?)"},
      // Used to exit 104 / 105.
      {kLink + " show --card -1" + kBe, "--card"},
      {kBench + " --backend emu:2 --mode peerr", "peerr"},
      // Used to exit 106 "--topology is required".
      {kEmud + " --topolgy emu:2 --socket-dir /tmp/x",
       "npo-emud: unknown option '--topolgy' (did you mean '--topology'?)", "is required"},
      {kEmud + " --socket-dir /tmp/x", "--topology is required"},
      // Used to exit 109.
      {kSmi + " --card 3",
       "npo-smi: option '--card' belongs to a subcommand: put it after it (npo-smi power --card ...)"},
      {kSmi + " topo --expcet plan.yaml", "unknown option '--expcet' (did you mean '--expect'?)"},
      {kSmi + " tpo", "npo-smi: unknown subcommand 'tpo' (did you mean 'topo'?"},
      {kEmu + " topo chekc", "npo-emu topo: unknown subcommand 'chekc' (did you mean 'check'?"},
  });
  // --help is not an error.
  const auto help = npo_test::run_command(kLink + " show --help");
  EXPECT_EQ(help.status, 0) << help.out;
  EXPECT_NE(help.out.find("--card"), std::string::npos) << help.out;
}

TEST(ToolsCli, MalformedBackendUriExits2) {
  // Used to exit 1 like an unreachable backend.
  expect_usage_errors({
      {kSmi + " --backend bogus", "accepted forms: emu:mesh8"},
      {kLink + " show --backend emu:mesh9", "emu:mesh8"},
      {kBench + " --backend 'emu-remote:/tmp?frob=1' --iterations 1", "unknown option 'frob=1'"},
      // Used to name the file field ("cards.ports: 99 outside 1..16"), not the URI option.
      {kLink + " show --backend 'emu:mesh8?ports=99'", "emulator URI: ports=99 must be 1..16", "cards.ports"},
      // Used to print "(accepted: ...)" twice.
      {kLink + " show --backend vfio:zz", "vfio:zz: 'zz' is neither 'all' nor a PCI address", "hex) (accepted"},
  });
  // A backend that cannot be reached is still 1.
  const auto r = npo_test::run_command(kSmi + " --backend emu-remote:/nonexistent-npo-dir 2>&1");
  EXPECT_EQ(r.status, 1) << r.out;
}

TEST(ToolsCli, EmuAndEmudNameWhatIsMissingOrWrong) {
  expect_usage_errors({
      // Used to say "value 0 must be in (0, 0.5)" from the daemon.
      {kEmu + " fault --socket-dir /nonexistent-npo-dir --kind ber_ramp --card 0 --port 0",
       "npo-emu fault: --kind ber_ramp needs --value", "value 0"},
      // Used to report 'emu:emu-remote:...'.
      {kEmud + " --topology emu-remote:/tmp/npo-x --socket-dir /nonexistent-npo-dir/s",
       "npo-emud: --topology emu-remote:/tmp/npo-x: 'emu-remote:' is not an emulator topology", "emu:emu-remote"},
  });
}

// Newcomer trial B: a fault request that cannot be right whatever the daemon holds is a bad
// command line (2), refused before anything is sent (no daemon needed); used to exit 1 with
// the daemon's reply, or say "too large" for a negative duration.
TEST(ToolsCli, EmuFaultBadFieldsExit2BeforeAnythingIsSent) {
  const std::string f = kEmu + " fault --socket-dir /nonexistent-npo-dir";
  expect_usage_errors({
      {f + " --kind bogus --card 0", "npo-emu fault: unknown fault kind 'bogus' (accepted: iommu_fault"},
      {f + " --kind lane_loss --card 0 --port 0 --lane 9", "npo-emu fault: --lane: 9 outside 0..7"},
      {f + " --kind lane_loss --card 0 --port 0", "--lane: lane_loss needs a lane"},
      {f + " --kind ber_ramp --card 0 --port 0 --value -1", "--value: (final pre-FEC BER) -1 must be in (0, 0.5)"},
      {f + " --kind ber_ramp --card 0 --port 0 --value 5", "--value: (final pre-FEC BER) 5 must be in (0, 0.5)"},
      {f + " --kind ber_ramp --card 0 --port 0 --value nan", "--value: nan must be finite"},
      {f + " --kind ber_ramp --card 0 --port 0 --value 1e-4 --duration-ms -5",
       "--duration-ms -5: must be a finite number >= 0", "too large"},
      {f + " --kind iommu_fault --card 0 --delay-ms 1e300", "--delay-ms 1e+300: too large"},
      {f + " --kind engine_hang --card 0 --engine 4", "--engine: engine 4 outside 0..3"},
      {f + " --kind iommu_fault --card 0 --count 0", "--count: must be >= 1"},
      {f + " --kind flap_storm --card 0", "--port: flap_storm needs a port"},
  });
  // Well-formed: it gets as far as the (missing) daemon, a tool error.
  const auto r = npo_test::run_command(f + " --kind iommu_fault --card 0 2>&1");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("unavailable"), std::string::npos) << r.out;
}

// npo-emud --topology: malformed is 2 like npo-smi --backend emu:mesh9 (used to be 1); a
// topology file that does not exist is named as such, exit 1 (used to say "unknown emulator
// URI 'emu:nofile.yaml'").
TEST(ToolsCli, EmudTopologyErrorsMatchTheOtherTools) {
  expect_usage_errors({
      {kEmud + " --topology emu:mesh9 --socket-dir /nonexistent-npo-dir/s", "unknown emulator URI 'emu:mesh9'"},
      {kSmi + " --backend emu:mesh9", "unknown emulator URI 'emu:mesh9'"},
      {kEmud + " --topology 'emu:mesh8?clock=virtual' --socket-dir /nonexistent-npo-dir/s",
       "npo-emud runs the real-time clock"},
  });
  for (const std::string t : {"nofile.yaml", "/nonexistent-npo-dir/plan.json", "emu:file=nofile.yaml"}) {
    SCOPED_TRACE(t);
    const auto r = npo_test::run_command(kEmud + " --topology " + t + " --socket-dir /nonexistent-npo-dir/s 2>&1");
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_NE(r.out.find("No such file or directory"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("unknown emulator URI"), std::string::npos) << r.out;
  }
}

// Newcomer trial E: a --state filter that matched nothing printed nothing at all (each --watch
// frame only its header); every view ends with its summary line (tools/README).
TEST(ToolsCli, FilterMatchingNothingStillEndsWithTheSummary) {
  for (const std::string sub : {"show", "fec", "health"}) {
    SCOPED_TRACE(sub);
    const auto r = npo_test::run_command("timeout 60 " + kLink + " " + sub + " --train --state FAILED" + kBe + " 2>&1");
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("0 ports: 0 HEALTHY, 0 DEGRADED, 0 FAILED, 0 DISABLED"), std::string::npos) << r.out;
  }
}

TEST(ToolsCli, CardOrPortThatDoesNotExistIsAnError) {
  // Used to print nothing and exit 0 (npo-dma-bench already said "card 9 not present").
  expect_usage_errors({
      {kLink + " show --card 8" + kBe, "npo-link show: card 8 not present (8 cards)"},
      {kLink + " show --card 1,9" + kBe, "card 9 not present (8 cards)"},
      {kLink + " show --card 2 --port 9" + kBe, "npo-link show: port 9 not present (card 2 has 8 ports)"},
      {kLink + " fec --port 8" + kBe, "port 8 not present"},
      {kLink + " prbs --card 8" + kBe, "npo-link prbs: card 8 not present (8 cards)"},
      {kLink + " prbs --card 0 --port 12" + kBe, "port 12 not present"},
      {kLink + " train --card 8" + kBe, "npo-link train: card 8 not present (8 cards)"},
      {kLink + " ddm --card 1 --port 8" + kBe, "port 8 not present"},
  });
  // In range still works.
  const auto r = npo_test::run_command(kLink + " show --train --card 7 --port 6" + kBe);
  EXPECT_EQ(r.status, 0) << r.out;
}

// Issue 35: every tool's --version is "TOOL (npo-hal) VERSION[ (git COMMIT)]", VERSION the
// top-level project(npo-hal VERSION ...) (passed in by CMake), exit 0.
TEST(ToolsCli, VersionIsTheProjectVersion) {
  std::vector<std::pair<std::string, std::string>> tools = {
      {"npo-smi", kSmi},   {"npo-link", kLink}, {"npo-dma-bench", kBench}, {"npo-emu", kEmu},
      {"npo-emud", kEmud}, {"npo-fw", NPO_FW},  {"npo-fabric", NPO_FABRIC}};
  if (!std::string(NPO_EXPORTER).empty()) tools.emplace_back("npo-exporter", NPO_EXPORTER);
  const std::string version = NPO_PROJECT_VERSION;
  for (const auto& [name, exe] : tools) {
    SCOPED_TRACE(name);
    const auto r = npo_test::run_command(exe + " --version 2>&1");
    EXPECT_EQ(r.status, 0) << r.out;
    const std::string head = name + " (npo-hal) " + version;
    ASSERT_TRUE(r.out.starts_with(head)) << r.out;
    const std::string rest = r.out.substr(head.size());
    // One line: the version, then the commit when the build came from git.
    EXPECT_TRUE(rest == "\n" ||
                (rest.starts_with(" (git ") && rest.ends_with(")\n") && rest.find('\n') == rest.size() - 1))
        << r.out;
  }
}

/// Runs `cmd` with NPO_BACKEND unset and NPO_SYSFS_ROOT=`root`: stdout, and stderr apart.
struct SplitResult {
  int status = -1;
  std::string out;
  std::string err;
};
SplitResult run_without_backend(const std::string& root, const std::string& cmd) {
  const std::string err_path = root + "/stderr.txt";
  const auto r = npo_test::run_command("env -u NPO_BACKEND NPO_SYSFS_ROOT='" + root + "' timeout 60 " + cmd + " 2>'" +
                                       err_path + "'");
  std::ifstream in(err_path);
  std::string err((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::filesystem::remove(err_path);
  return {r.status, r.out, err};
}

// Issue 35: with no --backend and no NPO_BACKEND a tool opens the real cards when an NPO card
// is bound to vfio-pci (vfio:all), else the emulator, and says so in one stderr line.
TEST(ToolsCli, NoBackendGivenRunsOnTheEmulatorAndSaysSo) {
  npo_test::FakeSysfs none;
  none.add("0000:3b:00.0", NPO_PCI_VENDOR_ID, NPO_PCI_DEVICE_ID, "");  // an NPO card, not bound to vfio-pci
  const std::string warning =
      "npo-smi: no NPO card is bound to vfio-pci; running on the emulator (emu:mesh8); pass --backend to choose\n";
  auto r = run_without_backend(none.root(), kSmi + " --json");
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_EQ(r.err, warning);
  // stdout stays one JSON document.
  const auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["uri"], "emu:mesh8");
  r = run_without_backend(none.root(), kLink + " show");
  EXPECT_NE(r.err.find("npo-link: no NPO card is bound to vfio-pci; running on the emulator (emu:mesh8)"),
            std::string::npos)
      << r.err;
  // A choice given: no warning.
  r = run_without_backend(none.root(), kSmi + " --backend emu:2");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err.find("running on the emulator"), std::string::npos) << r.err;
  r = run_without_backend(none.root(), "env NPO_BACKEND=emu:2 " + kSmi);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err.find("running on the emulator"), std::string::npos) << r.err;
}

TEST(ToolsCli, NoBackendGivenOpensTheCardsBoundToVfioPci) {
  npo_test::FakeSysfs cards;
  cards.add("0000:3b:00.0", NPO_PCI_VENDOR_ID, NPO_PCI_DEVICE_ID, "vfio-pci");
  // vfio:all reads the real /sys: without VFIO here it fails naming the fix (exit 1), with
  // VFIO it lists the cards it finds; either way it is vfio:all, not the emulator.
  const auto r = run_without_backend(cards.root(), kSmi);
  EXPECT_NE((r.out + r.err).find("vfio:all"), std::string::npos) << r.out << r.err;
  EXPECT_EQ(r.err.find("running on the emulator"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("emu:mesh8"), std::string::npos) << r.out;
}

}  // namespace
