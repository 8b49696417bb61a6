// SPDX-License-Identifier: Apache-2.0
// Issue 17 point 4: `--trace FILE` writes Chrome trace-event JSON (the JSON Object Format
// chrome://tracing, Perfetto's UI and trace_processor load): npo-dma-bench (every DMA op of
// every queue from doorbell to completion, training stages, link up) and npo-emud (training
// stages at its bring-up, client attach/detach, injected faults). The structure is checked
// against the format's rules, and every op's span against its own submit and complete events.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/emud_process.hpp"
#include "common/run_command.hpp"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path temp_file(const std::string& stem) {
  return fs::temp_directory_path() / (stem + "-" + std::to_string(::getpid()) + ".json");
}

/// Parses a trace file and checks the trace-event format's rules on every event: phases X
/// (with dur >= 0), i (with scope), M (process_name / thread_name / thread_sort_index);
/// integer pid and tid; ts >= 0 in microseconds; args an object.
void check_trace(const json& t) {
  EXPECT_TRUE(t.is_object());
  EXPECT_TRUE(t["traceEvents"].is_array());
  EXPECT_EQ(t["displayTimeUnit"], "ns");
  for (const auto& e : t["traceEvents"]) {
    ASSERT_TRUE(e.contains("name") && e["name"].is_string()) << e.dump();
    ASSERT_TRUE(e["pid"].is_number_integer()) << e.dump();
    ASSERT_TRUE(e["tid"].is_number_integer()) << e.dump();
    const std::string ph = e["ph"];
    ASSERT_TRUE(ph == "X" || ph == "i" || ph == "M") << e.dump();
    if (ph == "M") {
      const std::string n = e["name"];
      EXPECT_TRUE(n == "process_name" || n == "thread_name" || n == "thread_sort_index") << n;
      continue;
    }
    ASSERT_TRUE(e["ts"].is_number()) << e.dump();
    EXPECT_GE(e["ts"].get<double>(), 0.0);
    EXPECT_TRUE(e["args"].is_object());
    EXPECT_TRUE(e["cat"].is_string());
    if (ph == "X") {
      ASSERT_TRUE(e["dur"].is_number()) << e.dump();
      EXPECT_GE(e["dur"].get<double>(), 0.0);
    } else {
      EXPECT_EQ(e["s"], "t");
    }
  }
}

json load_trace(const fs::path& file) {
  std::ifstream in(file);
  EXPECT_TRUE(in.good()) << file;
  json t = json::parse(in);
  check_trace(t);
  return t;
}

TEST(Trace, DmaBenchOpsLieBetweenTheirSubmitAndCompletion) {
  const auto file = temp_file("npo-trace-dma");
  // peer mode: the links are trained first (training stages in the trace), then 2 queues x
  // 2 sizes x 4 batches x 8 ops of remote writes.
  const auto r = npo_test::run_command(std::string(NPO_DMA_BENCH) +
                                       " --backend emu:mesh8 --mode peer --sizes 4K,64K --iterations 4 --batch 8 "
                                       "--queues 2 --trace " +
                                       file.string() + " 2>&1");
  ASSERT_EQ(r.status, 0) << r.out;
  const json t = load_trace(file);
  fs::remove(file);
  const std::uint64_t ops = 2 * 2 * 4 * 8;
  EXPECT_EQ(t["otherData"]["traced_ops"], ops);
  EXPECT_EQ(t["otherData"]["untraced_ops"], 0);

  // (tid, handle) -> submit ts / complete ts from the instants.
  std::map<std::pair<int, std::uint64_t>, double> submit, complete;
  std::map<int, std::string> thread_names;
  std::size_t training_spans = 0, link_up = 0;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") thread_names[e["tid"]] = e["args"]["name"];
    if (e["ph"] == "i" && (e["name"] == "submit" || e["name"] == "complete")) {
      auto& m = e["name"] == "submit" ? submit : complete;
      for (const auto& h : e["args"]["handles"]) {
        EXPECT_TRUE(
            m.emplace(std::make_pair(e["tid"].get<int>(), h.get<std::uint64_t>()), e["ts"].get<double>()).second)
            << "handle listed twice: " << e.dump();
      }
    }
    if (e["ph"] == "X" && e["cat"] == "training") ++training_spans;
    if (e["ph"] == "i" && e["name"] == "link up") ++link_up;
  }
  std::size_t spans = 0;
  std::set<int> op_tids;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] != "X" || e["cat"] != "dma") continue;
    ++spans;
    const int tid = e["tid"];
    op_tids.insert(tid);
    const auto key = std::make_pair(tid, e["args"]["handle"].get<std::uint64_t>());
    ASSERT_EQ(submit.count(key), 1u) << "no submit for " << e.dump();
    ASSERT_EQ(complete.count(key), 1u) << "no completion for " << e.dump();
    const double ts = e["ts"], end = ts + e["dur"].get<double>();
    EXPECT_GE(ts, submit[key]) << e.dump();
    EXPECT_LE(end, complete[key] + 1e-3) << e.dump();  // microseconds; JSON rounding
    EXPECT_LE(submit[key], complete[key]);
    EXPECT_EQ(e["args"]["status"], "ok");
    EXPECT_TRUE(e["args"]["bytes"] == 4096 || e["args"]["bytes"] == 65536) << e.dump();
  }
  EXPECT_EQ(spans, ops);
  EXPECT_EQ(submit.size(), ops);
  EXPECT_EQ(complete.size(), ops);
  // One track per queue, named.
  ASSERT_EQ(op_tids.size(), 2u);
  for (int tid : op_tids) EXPECT_NE(thread_names[tid].find("queue"), std::string::npos) << tid;
  // mesh8: 56 cabled ports trained, each with its stages and a "link up".
  EXPECT_EQ(link_up, 56u);
  EXPECT_GE(training_spans, 56u);
}

TEST(Trace, DaemonTracesTrainingClientsAndFaults) {
  const auto file = temp_file("npo-trace-emud");
  npo_test::EmudProcess emud;
  ASSERT_TRUE(emud.start(NPO_EMUD, "emu:mesh8", {"--trace", file.string()})) << emud.output();
  // A read-only client attaches to every card and leaves; a fault is injected on card 2.
  const auto smi = npo_test::run_command(std::string(NPO_SMI) + " --backend " + emud.uri() + " 2>&1");
  EXPECT_EQ(smi.status, 0) << smi.out;
  const auto fault = npo_test::run_command(std::string(NPO_EMU) + " fault --socket-dir " + emud.dir() +
                                           " --kind lane_loss --card 2 --port 1 --lane 3 2>&1");
  EXPECT_EQ(fault.status, 0) << fault.out;
  // The daemon's link monitor polls every 100 ms: give it a few rounds to see the port fail
  // (a lane without CDR lock: the port retrains and ends in Fault, TIMEOUT_CDR_LOCK).
  std::this_thread::sleep_for(std::chrono::milliseconds(2000));
  ASSERT_EQ(emud.stop(), 0) << emud.output();
  const json t = load_trace(file);
  fs::remove(file);
  EXPECT_EQ(t["otherData"]["tool"], "npo-emud");
  std::size_t link_up = 0, training = 0, connects = 0, disconnects = 0, faults = 0, port_failed = 0;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] == "i" && e["name"] == "link up") ++link_up;
    if (e["ph"] == "X" && e["cat"] == "training") ++training;
    if (e["ph"] == "i" && e["name"] == "connect") ++connects;
    if (e["ph"] == "i" && e["name"] == "disconnect") ++disconnects;
    if (e["ph"] == "i" && e["cat"] == "fault") {
      ++faults;
      EXPECT_EQ(e["name"], "fault lane_loss");
      EXPECT_EQ(e["tid"], 500'000 + 2);  // card 2's track
    }
    // The link changes the fault caused, on card 2 port 1's track.
    if (e["ph"] == "i" && e["tid"] == 1'000'000 + 2 * 16 + 1 &&
        (e["name"] == "port FAILED" || e["name"] == "link fault")) {
      ++port_failed;
      EXPECT_EQ(e["args"]["card"], 2);
      EXPECT_EQ(e["args"]["port"], 1);
      EXPECT_EQ(e["cat"], "link,fault");
    }
  }
  EXPECT_EQ(link_up, 56u);
  EXPECT_GE(training, 56u);
  EXPECT_GE(connects, 8u);  // npo-smi (one per card) and npo-emu fault
  EXPECT_GE(disconnects, 8u);
  EXPECT_EQ(faults, 1u);
  EXPECT_GE(port_failed, 1u);
}

}  // namespace
