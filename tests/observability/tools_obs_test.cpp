// SPDX-License-Identifier: Apache-2.0
// Issue 17 points 3 and 5 on the tools: `--log-format json` on every tool gives JSON lines
// (time, level, logger, card, port, lane, queue, code, message); `npo-smi topo --format slurm`
// writes a topology.conf for Slurm's tree plugin, `--format json` a graph with link weights.
//
// Slurm, two ways. Debian 12's Slurm (22.05) has no offline checker for topology.conf
// (slurmctld has no -t), so (1) the output is validated against the grammar of
// topology.conf(5) for the tree plugin: "SwitchName=NAME [Switches=HOSTLIST] [Nodes=HOSTLIST]
// [LinkSpeed=N]" lines, '#' comments, every switch named once, every referenced switch
// defined, one root, no cycle, every node under exactly one leaf; and (2) when running as root
// with Debian's slurmctld and munge installed (tools/setup-debian.sh installs them), a real
// slurmctld (private munged, temporary state, free port) loads it and `scontrol show topology`
// must list the switches -- and a broken file must make slurmctld refuse to start.
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/child_process.hpp"
#include "common/run_command.hpp"

namespace {

using npo_test::run_command;

/// Lines of `out` that start with '{' parsed as JSON log objects; fails the test on a line
/// that is not one or lacks a key.
std::vector<nlohmann::json> json_log_lines(const std::string& out) {
  std::vector<nlohmann::json> r;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    EXPECT_EQ(line[0], '{') << "not a JSON line: " << line;
    if (line[0] != '{') continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << line;
    if (j.is_discarded()) continue;
    for (const char* k : {"time", "level", "logger", "card", "port", "lane", "queue", "code", "message"})
      EXPECT_TRUE(j.contains(k)) << k << " missing: " << line;
    r.push_back(std::move(j));
  }
  return r;
}

TEST(ToolsJsonLogs, EveryToolWritesJsonLinesWithTheIssuesFields) {
  // stderr only (2>&1 >/dev/null): the log; stdout is the tool's own output.
  struct Case {
    std::string cmd;
    bool expect_lines;
  };
  const std::vector<Case> cases = {
      {std::string(NPO_SMI) + " --backend emu:mesh8 --log-level info --log-format json", true},
      {std::string(NPO_LINK) + " show --train --backend emu:mesh8 --log-level info --log-format json", true},
      {std::string(NPO_DMA_BENCH) + " --backend emu:mesh8 --sizes 4K --iterations 2 --log-level info --log-format json",
       true},
      {std::string(NPO_EMU) + " topo generate mesh --cards 4 --log-level info --log-format json", false},
  };
  for (const auto& c : cases) {
    const auto r = run_command(c.cmd + " 2>&1 >/dev/null");
    EXPECT_EQ(r.status, 0) << c.cmd << "\n" << r.out;
    const auto lines = json_log_lines(r.out);
    if (c.expect_lines) {
      ASSERT_FALSE(lines.empty()) << c.cmd;
      // The cards the library opened are named in the "card" field.
      bool card_field = false;
      for (const auto& j : lines) card_field |= j["card"].is_number_unsigned();
      EXPECT_TRUE(card_field) << c.cmd << "\n" << r.out;
      EXPECT_EQ(lines.front()["level"], "info");
      EXPECT_TRUE(lines.front()["time"].get<std::string>().ends_with("Z"));
    }
  }
  // An unknown format is refused by the option parser.
  const auto bad = run_command(std::string(NPO_SMI) + " --backend emu:mesh8 --log-format xml 2>&1");
  EXPECT_NE(bad.status, 0) << bad.out;
}

// (No <regex>: GCC 12's -Wmaybe-uninitialized fires inside it under the sanitizer presets.)

bool is_digits(const std::string& v) {
  return !v.empty() && std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
}

/// A Slurm name: a letter, then letters, digits, '_' or '-'.
bool is_name(const std::string& v) {
  if (v.empty() || std::isalpha(static_cast<unsigned char>(v[0])) == 0) return false;
  return std::all_of(v.begin(), v.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '-'; });
}

/// Expands a Slurm hostlist expression ("npo[0-3,5]", "leaf0", "a[1-2],b3") into names.
/// Returns false on a malformed expression.
bool expand_hostlist(const std::string& expr, std::vector<std::string>& out) {
  std::size_t i = 0;
  while (i < expr.size()) {
    // One item: NAME or NAME[RANGES], then ',' or the end.
    std::size_t j = i;
    while (j < expr.size() && expr[j] != '[' && expr[j] != ',') ++j;
    const std::string prefix = expr.substr(i, j - i);
    if (!is_name(prefix)) return false;
    if (j < expr.size() && expr[j] == '[') {
      const std::size_t close = expr.find(']', j);
      if (close == std::string::npos) return false;
      std::stringstream ranges(expr.substr(j + 1, close - j - 1));
      std::string r;
      bool any = false;
      while (std::getline(ranges, r, ',')) {
        const auto dash = r.find('-');
        const std::string lo_s = r.substr(0, dash);
        const std::string hi_s = dash == std::string::npos ? lo_s : r.substr(dash + 1);
        if (!is_digits(lo_s) || !is_digits(hi_s)) return false;
        const unsigned lo = std::stoul(lo_s), hi = std::stoul(hi_s);
        if (hi < lo) return false;
        for (unsigned k = lo; k <= hi; ++k) out.push_back(prefix + std::to_string(k));
        any = true;
      }
      if (!any) return false;
      j = close + 1;
    } else {
      out.push_back(prefix);
    }
    if (j < expr.size()) {
      if (expr[j] != ',' || j + 1 == expr.size()) return false;
      ++j;
    }
    i = j;
  }
  return !out.empty();
}

/// Checks `conf` against the topology.conf(5) tree grammar; returns switch -> children and
/// fills `nodes` with each node's leaf switch.
void check_topology_conf(const std::string& conf, std::map<std::string, std::string>& node_leaf,
                         std::map<std::string, std::vector<std::string>>& switch_children) {
  std::istringstream in(conf);
  std::string line;
  std::map<std::string, std::string> parent;
  std::set<std::string> names;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    // "SwitchName=NAME" then " KEY=VALUE" attributes, single spaces, nothing else.
    std::vector<std::string> words;
    std::stringstream ws(line);
    for (std::string w; std::getline(ws, w, ' ');) words.push_back(w);
    ASSERT_FALSE(words.empty()) << line;
    ASSERT_TRUE(words[0].starts_with("SwitchName=")) << "not a tree-plugin line: " << line;
    const std::string name = words[0].substr(11);
    ASSERT_TRUE(is_name(name)) << "bad switch name in: " << line;
    EXPECT_TRUE(names.insert(name).second) << "switch defined twice: " << name;
    bool has_switches = false, has_nodes = false;
    for (std::size_t k = 1; k < words.size(); ++k) {
      const auto eq = words[k].find('=');
      ASSERT_NE(eq, std::string::npos) << "not KEY=VALUE: '" << words[k] << "' in: " << line;
      const std::string key = words[k].substr(0, eq);
      const std::string val = words[k].substr(eq + 1);
      ASSERT_TRUE(key == "Switches" || key == "Nodes" || key == "LinkSpeed")
          << "unknown key " << key << " in: " << line;
      if (key == "LinkSpeed") {
        EXPECT_TRUE(is_digits(val)) << line;
        continue;
      }
      std::vector<std::string> list;
      ASSERT_TRUE(expand_hostlist(val, list)) << "bad hostlist '" << val << "' in: " << line;
      if (key == "Switches") {
        has_switches = true;
        for (const auto& sw : list) {
          EXPECT_TRUE(parent.emplace(sw, name).second) << "switch " << sw << " has two parents";
          switch_children[name].push_back(sw);
        }
      } else {
        has_nodes = true;
        for (const auto& n : list)
          EXPECT_TRUE(node_leaf.emplace(n, name).second) << "node " << n << " under two leaves";
      }
    }
    EXPECT_TRUE(has_switches || has_nodes) << "a switch needs Switches= or Nodes=: " << line;
  }
  // Every referenced switch is defined; exactly one root; no cycle (walk up from each).
  unsigned roots = 0;
  for (const auto& n : names) {
    if (parent.count(n) == 0) ++roots;
    std::set<std::string> seen;
    for (std::string sw = n; parent.count(sw) != 0; sw = parent[sw])
      ASSERT_TRUE(seen.insert(sw).second) << "cycle at " << sw;
  }
  for (const auto& [child, p] : parent) EXPECT_EQ(names.count(child), 1u) << "undefined switch " << child;
  EXPECT_EQ(roots, 1u);
}

TEST(SchedulerTopology, SlurmTreeTopologyFollowsTheGrammarAndCoversEveryCard) {
  // mesh8: one leaf with all 8 cards.
  {
    const auto r = run_command(std::string(NPO_SMI) + " topo --train --backend emu:mesh8 --format slurm");
    ASSERT_EQ(r.status, 0) << r.out;
    std::map<std::string, std::string> leaf;
    std::map<std::string, std::vector<std::string>> children;
    check_topology_conf(r.out, leaf, children);
    EXPECT_EQ(leaf.size(), 8u);
    for (unsigned i = 0; i < 8; ++i) EXPECT_EQ(leaf["npo" + std::to_string(i)], "leaf0");
  }
  // A 4x4 torus in leaves of 4: 4 leaves under a root, each leaf a connected group.
  const auto file = std::filesystem::temp_directory_path() / ("npo-obs-torus-" + std::to_string(::getpid()) + ".yaml");
  ASSERT_EQ(
      run_command(std::string(NPO_EMU) + " topo generate torus2d --cards 16 --dims 4x4 -o " + file.string()).status, 0);
  const auto r = run_command(std::string(NPO_SMI) + " topo --train --backend emu:file=" + file.string() +
                             " --format slurm --slurm-switch-size 4 --slurm-node-prefix gpu");
  std::filesystem::remove(file);
  ASSERT_EQ(r.status, 0) << r.out;
  std::map<std::string, std::string> leaf;
  std::map<std::string, std::vector<std::string>> children;
  check_topology_conf(r.out, leaf, children);
  EXPECT_EQ(leaf.size(), 16u) << r.out;
  for (unsigned i = 0; i < 16; ++i) EXPECT_EQ(leaf.count("gpu" + std::to_string(i)), 1u) << i;
  ASSERT_EQ(children.count("root"), 1u) << r.out;
  EXPECT_EQ(children["root"].size(), 4u) << r.out;
  std::map<std::string, unsigned> per_leaf;
  for (const auto& [n, l] : leaf) ++per_leaf[l];
  for (const auto& [l, n] : per_leaf) EXPECT_LE(n, 4u) << l;
}

TEST(SchedulerTopology, JsonGraphHasCardsLinksAndWeights) {
  const auto r = run_command(std::string(NPO_SMI) + " topo --train --backend emu:mesh8 --format json");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["directed"], false);
  ASSERT_EQ(j["nodes"].size(), 8u);
  EXPECT_EQ(j["nodes"][3]["fabric_id"], 4);
  ASSERT_EQ(j["edges"].size(), 28u);  // full mesh of 8: every pair once
  std::set<std::pair<int, int>> pairs;
  for (const auto& e : j["edges"]) {
    EXPECT_LT(e["source"].get<int>(), e["target"].get<int>());
    pairs.insert({e["source"].get<int>(), e["target"].get<int>()});
    EXPECT_EQ(e["links"], 1);
    EXPECT_EQ(e["lanes"], 8);
    EXPECT_DOUBLE_EQ(e["bandwidth_gbps"].get<double>(), 800.0);
    EXPECT_DOUBLE_EQ(e["weight"].get<double>(), 1.0);
  }
  EXPECT_EQ(pairs.size(), 28u);
}

/// A private munged + slurmctld in `dir` on `port` with `topology` as topology.conf; returns
/// slurmctld's output once it is up (or has exited). Stops both before returning.
struct SlurmRun {
  bool started = false;        ///< "Running as primary controller" seen
  std::string topology_shown;  ///< scontrol show topology (empty when not started)
  std::string log;             ///< slurmctld's output
};

SlurmRun run_slurmctld(const std::filesystem::path& dir, const std::string& topology) {
  namespace fs = std::filesystem;
  SlurmRun r;
  fs::create_directories(dir / "state");
  fs::create_directories(dir / "spool");
  fs::create_directories(dir / "munge");
  fs::permissions(dir / "munge", fs::perms::owner_all, fs::perm_options::replace);
  {
    std::ofstream key(dir / "munge" / "munge.key", std::ios::binary);
    std::random_device rd;
    for (int i = 0; i < 1024; ++i) key.put(static_cast<char>(rd()));
  }
  fs::permissions(dir / "munge" / "munge.key", fs::perms::owner_read | fs::perms::owner_write,
                  fs::perm_options::replace);
  const std::string d = dir.string();
  const auto munged = run_command("timeout 10 /usr/sbin/munged -f -S " + d + "/munge/sock --key-file=" + d +
                                  "/munge/munge.key --log-file=" + d + "/munge/log --pid-file=" + d +
                                  "/munge/pid --seed-file=" + d + "/munge/seed 2>&1");
  EXPECT_EQ(munged.status, 0) << munged.out;
  // A TCP port on 127.0.0.1 that was free a moment ago.
  int port = 0;
  {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
      port = ntohs(a.sin_port);
    }
    ::close(fd);
  }
  {
    std::ofstream conf(dir / "slurm.conf");
    conf << "ClusterName=npotest\nSlurmctldHost=localhost\nSlurmctldPort=" << port
         << "\nSlurmUser=root\nAuthType=auth/munge\nAuthInfo=socket=" << d << "/munge/sock\nCredType=cred/munge\n"
         << "StateSaveLocation=" << d << "/state\nSlurmdSpoolDir=" << d << "/spool\nSlurmctldPidFile=" << d
         << "/slurmctld.pid\nTopologyPlugin=topology/tree\nProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
         << "SelectType=select/linear\nNodeName=npo[0-7] CPUs=1 State=UNKNOWN NodeAddr=127.0.0.1\n"
         << "PartitionName=all Nodes=ALL Default=YES State=UP\n";
    std::ofstream(dir / "topology.conf") << topology;
  }
  npo_test::ChildProcess ctld;
  if (ctld.start({"/usr/sbin/slurmctld", "-D", "-i", "-f", d + "/slurm.conf"})) {
    r.started = ctld.wait_for("Running as primary controller", 30000);
    if (r.started) {
      r.topology_shown = run_command("SLURM_CONF=" + d + "/slurm.conf timeout 10 /usr/bin/scontrol show topology").out;
    }
    ctld.stop(15000);
    r.log = ctld.output();
  }
  (void)run_command("kill $(cat " + d + "/munge/pid) 2>/dev/null");
  return r;
}

TEST(SchedulerTopology, DebianSlurmctldLoadsTheTopology) {
  namespace fs = std::filesystem;
  if (::geteuid() != 0 || !fs::exists("/usr/sbin/slurmctld") || !fs::exists("/usr/sbin/munged") ||
      !fs::exists("/usr/bin/scontrol")) {
    GTEST_SKIP() << "needs root and Debian's slurmctld, slurm-client and munge (tools/setup-debian.sh); the grammar "
                    "check above still ran";
  }
  const auto r =
      run_command(std::string(NPO_SMI) + " topo --train --backend emu:mesh8 --format slurm --slurm-switch-size 4");
  ASSERT_EQ(r.status, 0) << r.out;
  char tmpl[] = "/tmp/npo-slurm-test-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const fs::path dir = tmpl;
  const auto ok = run_slurmctld(dir / "good", r.out);
  EXPECT_TRUE(ok.started) << ok.log;
  EXPECT_NE(ok.topology_shown.find("SwitchName=leaf0 Level=0"), std::string::npos) << ok.topology_shown;
  EXPECT_NE(ok.topology_shown.find("Nodes=npo[0-3]"), std::string::npos) << ok.topology_shown;
  EXPECT_NE(ok.topology_shown.find("Nodes=npo[4-7]"), std::string::npos) << ok.topology_shown;
  EXPECT_NE(ok.topology_shown.find("SwitchName=root Level=1"), std::string::npos) << ok.topology_shown;
  EXPECT_NE(ok.topology_shown.find("Switches=leaf[0-1]"), std::string::npos) << ok.topology_shown;
  // The same slurmctld refuses a file whose root names a switch that does not exist: the
  // check above is Slurm's own.
  const auto bad = run_slurmctld(dir / "bad", "SwitchName=leaf0 Nodes=npo[0-3]\nSwitchName=root Switches=leaf[0-1]\n");
  EXPECT_FALSE(bad.started) << bad.log;
  EXPECT_NE(bad.log.find("invalid child"), std::string::npos) << bad.log;
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
