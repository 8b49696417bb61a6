// SPDX-License-Identifier: Apache-2.0
// `npo-link show | ddm | fec | prbs | train | health` on the emulator, run as a user runs them;
// the JSON shapes are parsed with nlohmann and checked against the mesh8 wiring and the spec
// (registers.md §7.1: 8 x 53.125 GBd PAM4 = 800 Gb/s).
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/run_command.hpp"

namespace {

using nlohmann::json;

const std::string kBackend = " --backend 'emu:mesh8?clock=virtual&hbm=1M'";

json run_json(const std::string& args) {
  const auto r = npo_test::run_command(std::string(NPO_LINK) + " " + args + kBackend + " --json");
  EXPECT_EQ(r.status, 0) << args << "\n" << r.out;
  if (r.status != 0) return json::object();
  EXPECT_EQ(r.out.find("inf"), std::string::npos);
  EXPECT_EQ(r.out.find("nan"), std::string::npos);
  return json::parse(r.out);
}

void check_dbm(const json& mw, const json& dbm) {
  ASSERT_TRUE(mw.is_number());
  if (mw.get<double>() == 0.0) {
    EXPECT_TRUE(dbm.is_null());  // no light: no finite dBm
  } else {
    EXPECT_NEAR(dbm.get<double>(), 10.0 * std::log10(mw.get<double>()), 1e-9);
  }
}

TEST(NpoLinkShow, JsonOfMesh8HasEveryCabledPortUpAt800G) {
  const json j = run_json("show --train");
  ASSERT_TRUE(j.contains("ports"));
  ASSERT_EQ(j["ports"].size(), 56u);  // 8 cards x 7 cabled ports
  std::set<std::pair<int, int>> seen;
  for (const auto& p : j["ports"]) {
    for (const char* k : {"card", "port", "state", "reason", "speed_gbps", "lane_count", "neighbor", "lanes"}) {
      ASSERT_TRUE(p.contains(k)) << "missing " << k;
    }
    const int card = p["card"], port = p["port"];
    seen.insert({card, port});
    EXPECT_EQ(p["state"], "HEALTHY") << p["reason"];
    EXPECT_EQ(p["reason"], "up 8/8 lanes");
    EXPECT_DOUBLE_EQ(p["speed_gbps"].get<double>(), 800.0);
    EXPECT_EQ(p["lane_count"], 8);
    // mesh8: card a port (b-1) <-> card b port a, a < b.
    const int peer = port >= card ? port + 1 : port;
    ASSERT_TRUE(p["neighbor"].is_object());
    EXPECT_EQ(p["neighbor"]["card"], peer);
    EXPECT_EQ(p["neighbor"]["port"], card > peer ? card - 1 : card);
    ASSERT_EQ(p["lanes"].size(), 8u);
    for (const auto& l : p["lanes"]) {
      for (const char* k : {"lane", "tx_power_mw", "tx_power_dbm", "rx_power_mw", "rx_power_dbm", "tx_bias_ma",
                            "snr_db", "fec", "pre_fec_ber"}) {
        ASSERT_TRUE(l.contains(k)) << "missing lane." << k;
      }
      check_dbm(l["tx_power_mw"], l["tx_power_dbm"]);
      check_dbm(l["rx_power_mw"], l["rx_power_dbm"]);
      for (const char* k : {"codewords", "corrected", "uncorrectable", "symbol_errors", "bins"}) {
        ASSERT_TRUE(l["fec"].contains(k)) << "missing fec." << k;
      }
      EXPECT_EQ(l["fec"]["bins"].size(), 16u);
      EXPECT_TRUE(l["pre_fec_ber"].is_null() || l["pre_fec_ber"].get<double>() >= 0.0);
    }
  }
  EXPECT_EQ(seen.size(), 56u);
}

TEST(NpoLinkShow, TextHasOneLinePerPort) {
  const auto r = npo_test::run_command(std::string(NPO_LINK) + " show --train" + kBackend);
  ASSERT_EQ(r.status, 0) << r.out;
  // Header + 56 port lines, then a blank line and the legend that explains every column.
  const auto table = r.out.substr(0, r.out.find("\n\n"));
  std::size_t lines = 1;
  for (char ch : table) lines += ch == '\n';
  EXPECT_EQ(lines, 57u) << table;
  EXPECT_NE(r.out.find("STATE: HEALTHY"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("KP4 limit"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("HEALTHY"), std::string::npos);
  EXPECT_NE(r.out.find("up 8/8 lanes"), std::string::npos);
  // mesh8 cables ports 0..6 of each card: the 8 ports 7 are left out, and the footer says so.
  EXPECT_NE(r.out.find("0 DISABLED; worst lane"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n8 ports without a module not listed (--all shows them)\n"), std::string::npos) << r.out;
  const auto all = npo_test::run_command(std::string(NPO_LINK) + " show --train --all" + kBackend);
  EXPECT_NE(all.out.find("64 ports:"), std::string::npos) << all.out;
  EXPECT_EQ(all.out.find("without a module not listed"), std::string::npos) << all.out;
}

TEST(NpoLinkTrain, RetrainsBothEndsWithStageTimesAndCodes) {
  const json j = run_json("train --card 0 --port 0");
  ASSERT_EQ(j["ports"].size(), 2u);  // this end and the far end (card 1 port 0)
  EXPECT_EQ(j["ports"][1]["card"], 1);
  EXPECT_EQ(j["ports"][1]["port"], 0);
  for (const auto& p : j["ports"]) {
    EXPECT_EQ(p["result"], "OK") << p["detail"];
    for (const char* s : {"detect", "module_ready", "datapath_init", "cdr_lock", "fec_lock", "neighbor"}) {
      ASSERT_TRUE(p["stage_ms"].contains(s)) << s;
    }
    EXPECT_GT(p["total_ms"].get<double>(), 0.0);
    EXPECT_EQ(p["lanes_up"], 8);
  }
  const json all = run_json("train");
  EXPECT_EQ(all["ports"].size(), 56u);
  for (const auto& p : all["ports"]) EXPECT_EQ(p["result"], "OK");
}

TEST(NpoLinkHealth, VerdictsWithReasons) {
  const json j = run_json("health --interval 0.2 --train");
  ASSERT_EQ(j["ports"].size(), 56u);
  EXPECT_EQ(j["interval_ns"], 200'000'000);
  for (const auto& p : j["ports"]) {
    EXPECT_EQ(p["state"], "HEALTHY");
    ASSERT_EQ(p["lanes"].size(), 8u);
    for (const auto& l : p["lanes"]) {
      EXPECT_FALSE(l["reasons"].empty());  // a verdict always says why
      EXPECT_TRUE(l["verdict"] == "GOOD" || l["verdict"] == "DEGRADED" || l["verdict"] == "FAILING");
    }
  }
}

TEST(NpoLinkPrbs, BothEndsPerLane) {
  const json j = run_json("prbs --pattern PRBS31 --seconds 0.1 --card 2 --port 3");
  EXPECT_EQ(j["pattern"], "PRBS31");
  EXPECT_EQ(j["side"], "media");
  ASSERT_EQ(j["ports"].size(), 2u);
  EXPECT_EQ(j["ports"][0]["card"], 2);
  EXPECT_EQ(j["ports"][1]["card"], 4);  // card 2 port 3 <-> card 4 port 2
  EXPECT_EQ(j["ports"][1]["port"], 2);
  for (const auto& p : j["ports"]) {
    ASSERT_EQ(p["lanes"].size(), 8u);
    for (const auto& l : p["lanes"]) {
      for (const char* k : {"lane", "locked", "bits", "errors", "ber"}) ASSERT_TRUE(l.contains(k)) << k;
      if (l["bits"].get<std::uint64_t>() > 0) {
        EXPECT_NEAR(l["ber"].get<double>(), l["errors"].get<double>() / l["bits"].get<double>(), 1e-15);
      }
    }
  }
  const auto bad = npo_test::run_command(std::string(NPO_LINK) + " prbs --pattern PRBS8" + kBackend + " 2>&1");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.out.find("PRBS31"), std::string::npos);  // the message lists the accepted names
}

TEST(NpoLinkDdm, DecodesEveryModuleOverTheMailbox) {
  const json j = run_json("ddm --train");
  ASSERT_EQ(j["modules"].size(), 56u);
  for (const auto& m : j["modules"]) {
    EXPECT_EQ(m["module"]["spec"], "cmis");
    EXPECT_EQ(m["module"]["identifier"]["name"], "QSFP-DD");
    // `ddm` brings links up first (like `show`); a module state other than ModuleReady is still
    // accepted in case one is in low power (CMIS 5.2 §6.3.2).
    const std::string st = m["module"]["module_state"]["name"];
    EXPECT_TRUE(st == "ModuleReady" || st == "ModuleLowPwr" || st == "ModulePwrUp") << st;
    // One DDM entry per media lane in use; the NPO-ENGINE-800G application is 8 lanes.
    EXPECT_EQ(m["module"]["lanes"].size(), m["module"]["media_lane_count"].get<std::size_t>());
    if (!m["module"]["applications"].empty()) {
      EXPECT_EQ(m["module"]["lanes"].size(), 8u);
    }
    // The cage's power (mailbox POWER_READ): class 8, 16 W max; powered up with 8 data-path
    // lanes it draws its max; the temperature is the DDM one.
    const auto& pw = m["power"];
    ASSERT_TRUE(pw.is_object()) << m.dump();
    EXPECT_EQ(pw["power_class"], 8);
    EXPECT_DOUBLE_EQ(pw["max_power_w"].get<double>(), 16.0);
    if (st == "ModuleReady") {
      EXPECT_DOUBLE_EQ(pw["draw_w"].get<double>(), 16.0);
    }
    EXPECT_NEAR(pw["temperature_c"].get<double>(), m["module"]["temperature_c"].get<double>(), 0.5);
  }
  // The text listing says it on one line per module.
  const auto r = npo_test::run_command(std::string(NPO_LINK) + " ddm --train --card 0 --port 0" + kBackend);
  EXPECT_NE(r.out.find("  power: class 8 (max 16.00 W), cage draw 16.000 W, powered up"), std::string::npos) << r.out;
}

TEST(NpoLinkFec, CountersAndBinsAndWatch) {
  const auto r = npo_test::run_command(std::string(NPO_LINK) + " fec --train --watch 0.1 --count 2" + kBackend);
  ASSERT_EQ(r.status, 0) << r.out;
  std::size_t headers = 0;
  for (std::size_t at = 0; (at = r.out.find("card 0 port 0:", at)) != std::string::npos; ++at) ++headers;
  EXPECT_EQ(headers, 2u);  // two repeats
  EXPECT_NE(r.out.find("CODEWORDS"), std::string::npos);
}

TEST(NpoLinkArgs, BadNumbersAreRefusedBeforeTouchingTheCards) {
  // Each of these used to run: --watch -1 once, --watch nan forever, --seconds 0 with bits
  // counted and BER 0, --lanes 256 truncated to no lanes, all with exit 0.
  for (const auto& [args, want] : std::vector<std::pair<std::string, std::string>>{
           {"show --watch -1", "--watch -1: expected seconds in (0, 86400]"},
           {"show --watch 0", "--watch 0: expected seconds"},
           {"fec --watch nan", "--watch nan: expected seconds"},
           {"show --watch inf --count 2", "--watch inf: expected seconds"},
           {"show --count 3", "--count needs --watch"},
           {"show --watch 0.1 --count 0", "--count 0: expected N >= 1"},
           {"prbs --seconds 0", "--seconds 0: expected seconds"},
           {"prbs --seconds -1", "--seconds -1: expected seconds"},
           {"prbs --seconds nan", "--seconds nan: expected seconds"},
           {"prbs --lanes 256", "--lanes 0x100: expected a bitmap"},
           {"prbs --lanes 0", "--lanes 0x0: expected a bitmap"},
           {"health --interval 0", "--interval 0: expected seconds"},
           {"health --interval -1", "--interval -1: expected seconds"}}) {
    SCOPED_TRACE(args);
    const auto r = npo_test::run_command("timeout 60 " + std::string(NPO_LINK) + " " + args + kBackend + " 2>&1");
    EXPECT_EQ(r.status, 2) << r.out;
    EXPECT_NE(r.out.find(want), std::string::npos) << r.out;
  }
}

TEST(NpoLinkPrbs, PortWithoutModuleIsAnError) {
  // mesh8 cables ports 0..6; port 7 has no module. Used to print 8 unlocked lanes, exit 0.
  const auto r =
      npo_test::run_command(std::string(NPO_LINK) + " prbs --seconds 0.1 --card 0 --port 7" + kBackend + " 2>&1");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("card 0 port 7 has no module"), std::string::npos) << r.out;
}

TEST(NpoLinkTrain, AnExplicitPortIsListedEvenWithoutModule) {
  // Used to print nothing (text) or "ports": [] (JSON) and exit 0. A port asked for that has
  // no module did not train: exit 4 (it used to be 0, TRIAL finding 6).
  const auto r = npo_test::run_command(std::string(NPO_LINK) + " train --card 0 --port 7" + kBackend + " --json");
  EXPECT_EQ(r.status, 4) << r.out;
  const json j = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j["failed"], 1);
  ASSERT_EQ(j["ports"].size(), 1u);
  EXPECT_EQ(j["ports"][0]["card"], 0);
  EXPECT_EQ(j["ports"][0]["port"], 7);
  EXPECT_EQ(j["ports"][0]["result"], "NO_MODULE") << j.dump();
}

TEST(NpoLinkShow, NoModulesSaysSoInsteadOfAnEmptyTable) {
  // emu:4 has no cables, so no modules: the table used to be a bare header.
  const auto r = npo_test::run_command(std::string(NPO_LINK) + " show --backend 'emu:4?clock=virtual' 2>&1");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("no port has a module (--all lists every port)"), std::string::npos) << r.out;
}

TEST(NpoLinkDdm, CardAndPortSelectOneModule) {
  // README's first command runs `npo-link ddm --card 0 --port 0`; ddm had no such options
  // (exit 109, "arguments were not expected"), which stopped the README chain there.
  const json j = run_json("ddm --card 2 --port 3");
  ASSERT_EQ(j["modules"].size(), 1u);
  EXPECT_EQ(j["modules"][0]["card"], 2);
  EXPECT_EQ(j["modules"][0]["port"], 3);
  EXPECT_EQ(run_json("ddm --card 1")["modules"].size(), 7u);
  // The text shows the module's DDM (mailbox) and the card's BAR0 mirror, and says the mirror
  // was sampled at another instant (its last digits may differ from the mailbox reading).
  const auto text = npo_test::run_command(std::string(NPO_LINK) + " ddm --card 2 --port 3" + kBackend);
  EXPECT_NE(text.out.find("card's DDM mirror in BAR0 (what LinkMonitor reads without the mailbox; sampled at another "
                          "instant, just before the mailbox read"),
            std::string::npos)
      << text.out;
  // A card or port that does not exist is a bad command line: 2, naming the count (it was 1,
  // "card 8 outside 0..7"; TRIAL finding 4 makes every view refuse it the same way).
  for (const auto& [args, want, status] : std::vector<std::tuple<std::string, std::string, int>>{
           {"ddm --card 8", "card 8 not present (8 cards)", 2},
           {"ddm --card 0 --port 16", "port 16 not present (card 0 has 8 ports)", 2},
           {"ddm --card 0 --port 7", "card 0 port 7 has no module", 1}}) {
    const auto r = npo_test::run_command(std::string(NPO_LINK) + " " + args + kBackend + " 2>&1");
    EXPECT_EQ(r.status, status) << args << "\n" << r.out;
    EXPECT_NE(r.out.find(want), std::string::npos) << args << "\n" << r.out;
  }
}

TEST(NpoLinkDecode, JsonOfANonUtf8FileNameIsValid) {
  // The file name goes into the JSON; a raw 0xff used to abort in json::dump (type_error 316).
  const std::string path = "/tmp/npo-link-test-\xff-" + std::to_string(::getpid()) + ".hex";
  const auto r = npo_test::run_command("cp \"$(ls " NPO_TEST_DATA_DIR "/eeprom/*.hex | head -1)\" '" + path + "' && " +
                                       std::string(NPO_LINK) + " decode --json '" + path + "'; rc=$?; rm -f '" + path +
                                       "'; exit $rc");
  ASSERT_EQ(r.status, 0) << r.out;
  const json j = json::parse(r.out);
  EXPECT_TRUE(j.contains("vendor_name"));
}

// ---- Issue 18: link state that tells the truth; fleet scale ---------------------------------

/// Writes a scenario file for this test process; returns its path.
std::string scenario(const std::string& name, const std::string& yaml) {
  const std::string path = "/tmp/npo-link-test-" + name + "-" + std::to_string(::getpid()) + ".yaml";
  FILE* f = std::fopen(path.c_str(), "w");
  EXPECT_NE(f, nullptr);
  if (f != nullptr) {
    std::fputs(yaml.c_str(), f);
    std::fclose(f);
  }
  return path;
}

std::string backend_with(const std::string& scenario_path) {
  return " --backend 'emu:mesh8?clock=virtual&hbm=1M&scenario=" + scenario_path + "'";
}

/// The JSON Lines of a --json --watch run: one object per line.
std::vector<json> json_lines(const std::string& out) {
  std::vector<json> v;
  std::size_t at = 0;
  while (at < out.size()) {
    const auto nl = out.find('\n', at);
    const std::string line = out.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
    if (!line.empty()) {
      EXPECT_NO_THROW(v.push_back(json::parse(line))) << line;
    }
    if (nl == std::string::npos) break;
    at = nl + 1;
  }
  return v;
}

std::size_t count_of(const std::string& hay, const std::string& needle) {
  std::size_t n = 0;
  for (std::size_t at = 0; (at = hay.find(needle, at)) != std::string::npos; at += needle.size()) ++n;
  return n;
}

TEST(NpoLinkShow, ReadingNeverTrains) {
  // `show` used to bring every link up when one was down. An in-process emu: backend starts
  // with its links down: show prints them as they are, says how to train, and changes nothing.
  const auto r = npo_test::run_command(std::string(NPO_LINK) + " show --json" + kBackend + " 2>/dev/null");
  ASSERT_EQ(r.status, 0) << r.out;
  const json j = json::parse(r.out);
  ASSERT_EQ(j["ports"].size(), 56u);
  for (const auto& p : j["ports"]) {
    EXPECT_EQ(p["state"], "DISABLED") << p["reason"];
    EXPECT_EQ(p["reason"], "disabled by host");
    EXPECT_EQ(p["train_count"], 0);  // never trained
    EXPECT_EQ(p["link_up"], false);
    EXPECT_EQ(p["speed_gbps"], 0.0);
    EXPECT_EQ(p["lane_count"], 0);
  }
  const auto hint = npo_test::run_command(std::string(NPO_LINK) + " show" + kBackend + " 2>&1 >/dev/null");
  EXPECT_NE(hint.out.find("npo-link train"), std::string::npos) << hint.out;
  EXPECT_NE(hint.out.find("--train"), std::string::npos) << hint.out;
}

TEST(NpoLinkShow, WatchOfLinkFaultsTellsTheTruth) {
  // Faults on live links (after the bring-up --train runs): a training_timeout (the live link
  // keeps its lock), a lane_loss (the port gives up: FAILED, saying why and how to recover),
  // a module removal (the port stays listed). --json --watch is JSON Lines.
  const auto path = scenario("truth",
                             "faults:\n"
                             "  - {at_ms: 2500, kind: training_timeout, card: 0, port: 3, count: 2}\n"
                             "  - {at_ms: 2500, kind: lane_loss, card: 2, port: 0, lane: 3}\n"
                             "  - {at_ms: 2500, kind: module_removal, card: 1, port: 5}\n");
  const auto r = npo_test::run_command("timeout 120 " + std::string(NPO_LINK) +
                                       " show --train --json --watch 1 --count 8" + backend_with(path));
  std::remove(path.c_str());
  EXPECT_EQ(r.status, 4) << r.out;  // a port FAILED
  const auto frames = json_lines(r.out);
  ASSERT_EQ(frames.size(), 8u) << r.out;
  for (std::size_t f = 0; f < frames.size(); ++f) {
    const auto& fr = frames[f];
    EXPECT_EQ(fr["frame"], f + 1);
    EXPECT_TRUE(fr["time"].is_string());
    for (const auto& p : fr["ports"]) {
      // Up only with lock on every lane in use; speed and lanes only when up.
      if (p["link_state"] == "up") {
        EXPECT_EQ(p["link_up"], true);
        for (const auto& l : p["lanes"]) {
          if (l["in_use"] == true) {
            EXPECT_EQ(l["cdr_lock"], true) << p["card"] << ":" << p["port"];
          }
        }
      }
      if (p["link_up"] == false) {
        EXPECT_EQ(p["speed_gbps"], 0.0) << p["card"] << ":" << p["port"];
        EXPECT_EQ(p["lane_count"], 0) << p["card"] << ":" << p["port"];
      }
      // A DEGRADED port never gives a FAILED reason.
      if (p["state"] == "DEGRADED") {
        EXPECT_EQ(p["reason"].get<std::string>().find("KP4"), std::string::npos);
      }
    }
  }
  const auto& last = frames.back()["ports"];
  auto port = [&](int card, int p) -> json {
    for (const auto& x : last) {
      if (x["card"] == card && x["port"] == p) return x;
    }
    return json();
  };
  const json tt = port(0, 3);
  ASSERT_FALSE(tt.is_null());
  EXPECT_EQ(tt["state"], "HEALTHY") << tt["reason"];  // the fault is one of the next training
  const json ll = port(2, 0);
  ASSERT_FALSE(ll.is_null());
  EXPECT_EQ(ll["state"], "FAILED");
  EXPECT_EQ(ll["link_state"], "fault");
  const std::string why = ll["reason"];
  EXPECT_EQ(why.find("card in Fault"), std::string::npos) << why;
  EXPECT_NE(why.find("port in Fault"), std::string::npos) << why;
  EXPECT_NE(why.find("lane 3 without CDR lock"), std::string::npos) << why;
  EXPECT_NE(why.find("7/8 lanes"), std::string::npos) << why;
  const json mr = port(1, 5);
  ASSERT_FALSE(mr.is_null()) << "a removed module's port must stay listed";
  EXPECT_EQ(mr["state"], "FAILED");
  EXPECT_EQ(mr["reason"], "module removed");
  EXPECT_EQ(mr["module_lost"], true);
  EXPECT_EQ(frames.back()["summary"]["exit_status"], 4);
}

TEST(NpoLinkShow, AFlappingPortIsReportedNotTakenDown) {
  // Reading never changes a link: the flap policy (which disables a port, CTRL.ENABLE = 0)
  // is not enforced by show; the port is FAILED "flapping: ..." and still enabled (it keeps
  // flapping up and down), and the exit status is 4.
  const auto path =
      scenario("flap", "faults: [{at_ms: 500, kind: flap_storm, card: 0, port: 1, count: 8, duration_ms: 50}]\n");
  const auto r = npo_test::run_command(std::string(NPO_LINK) +
                                       " show --train --json --watch 0.2 --count 6 --card 0 --port 1 --interval 0.1" +
                                       backend_with(path));
  std::remove(path.c_str());
  EXPECT_EQ(r.status, 4) << r.out;
  const auto frames = json_lines(r.out);
  ASSERT_EQ(frames.size(), 6u);
  const auto& p = frames.back()["ports"][0];
  EXPECT_EQ(p["state"], "FAILED") << p["reason"];
  EXPECT_EQ(p["reason"].get<std::string>().rfind("flapping: 5 flaps in 60 s", 0), 0u) << p["reason"];
  EXPECT_NE(p["card_state"], "disabled");  // not taken down
}

TEST(NpoLinkShow, WatchFramesHaveATimestampAndTheLegendOnce) {
  const auto r = npo_test::run_command(std::string(NPO_LINK) + " show --train --watch 0.5 --count 3" + kBackend);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(count_of(r.out, "--- npo-link show frame "), 3u) << r.out;
  EXPECT_EQ(count_of(r.out, "platform clock "), 3u);
  EXPECT_EQ(count_of(r.out, "STATE: HEALTHY"), 1u);  // the legend once
  EXPECT_EQ(count_of(r.out, "56 ports: 56 HEALTHY, 0 DEGRADED, 0 FAILED, 0 DISABLED"), 3u);
}

TEST(NpoLinkShow, FiltersSummaryAndExitCodes) {
  // Healthy: exit 0; the filters select cards, ports and states; the summary counts them.
  auto r = npo_test::run_command(std::string(NPO_LINK) + " show --train --card 1,2 --port 0" + kBackend);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("2 ports: 2 HEALTHY, 0 DEGRADED, 0 FAILED, 0 DISABLED; worst lane "), std::string::npos)
      << r.out;
  EXPECT_EQ(count_of(r.out, "HEALTHY   "), 2u) << r.out;
  // A lane lost while mesh8 trains: the link comes up on 7 lanes, both ends DEGRADED: exit 3.
  const auto path = scenario("degraded", "faults: [{at_ms: 60, kind: lane_loss, card: 2, port: 0, lane: 3}]\n");
  r = npo_test::run_command(std::string(NPO_LINK) + " show --train --state DEGRADED" + backend_with(path));
  EXPECT_EQ(r.status, 3) << r.out;
  EXPECT_NE(r.out.find("2 ports: 0 HEALTHY, 2 DEGRADED, 0 FAILED, 0 DISABLED"), std::string::npos) << r.out;
  r = npo_test::run_command(std::string(NPO_LINK) + " show --train --json --state FAILED" + backend_with(path));
  EXPECT_EQ(r.status, 0) << r.out;  // no FAILED port selected
  EXPECT_EQ(json::parse(r.out)["ports"].size(), 0u);
  std::remove(path.c_str());
  r = npo_test::run_command(std::string(NPO_LINK) + " show --state BROKEN" + kBackend + " 2>&1");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("expected HEALTHY, DEGRADED, FAILED or DISABLED"), std::string::npos) << r.out;
}

TEST(NpoLinkShow, AFreshPoolNamesTheDarkSwitchPortsToo) {
  // A pool cables every port to an optical switch with no cross-connect yet: the ports show no
  // module (dark). The reason used to be "disabled by host (no module)" alone.
  const std::string path = "/tmp/npo-link-test-pool-" + std::to_string(::getpid()) + ".yaml";
  auto r = npo_test::run_command(std::string(NPO_EMU) + " topo generate pool --cards 4 --ports 2 -o " + path);
  ASSERT_EQ(r.status, 0) << r.out;
  const std::string be = " --backend 'emu:file=" + path + "?clock=virtual&hbm=1M'";
  r = npo_test::run_command(std::string(NPO_LINK) + " show --all" + be + " 2>&1");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(
      count_of(r.out, "disabled by host; no module (or its cable ends at a switch port with no cross-connect yet)"), 8u)
      << r.out;
  r = npo_test::run_command(std::string(NPO_LINK) + " show --train" + be + " 2>&1");
  EXPECT_NE(r.out.find("or every cabled port ends at an optical-switch port with no cross-connect yet"),
            std::string::npos)
      << r.out;
  std::remove(path.c_str());
}

TEST(NpoLinkShow, AtScaleTheDefaultIsTheSummaryAndWhatIsNotHealthy) {
  // 72 cards of a 2D torus: 288 ports. The default view is the summary (and the ports that
  // are not HEALTHY: none here); --full lists them all.
  const std::string path = "/tmp/npo-link-test-torus72-" + std::to_string(::getpid()) + ".yaml";
  auto r = npo_test::run_command(std::string(NPO_EMU) + " topo generate torus2d --cards 72 > " + path);
  ASSERT_EQ(r.status, 0);
  const std::string be = " --backend 'emu:file=" + path + "?clock=virtual&hbm=1M'";
  r = npo_test::run_command(std::string(NPO_LINK) + " show --train" + be);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("288 ports: 288 HEALTHY, 0 DEGRADED, 0 FAILED, 0 DISABLED"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(288 HEALTHY ports not listed; --full lists every port)"), std::string::npos) << r.out;
  EXPECT_LT(count_of(r.out, "\n"), 20u) << r.out;
  r = npo_test::run_command(std::string(NPO_LINK) + " show --train --full" + be);
  EXPECT_EQ(count_of(r.out, "up 8/8 lanes"), 288u);
  std::remove(path.c_str());
}

TEST(NpoLinkShow, ARemovedCardIsMarkedAndTheLiveCardsShown) {
  // Issue 19 item 8: one removed card made show/health print nothing but
  // "snapshot: unavailable: card removed [card=2]".
  const auto path = scenario("removed", "faults: [{at_ms: 1500, kind: surprise_removal, card: 2}]\n");
  auto r = npo_test::run_command("timeout 60 " + std::string(NPO_LINK) + " show --train --watch 1 --count 3" +
                                 backend_with(path) + " 2>&1");
  EXPECT_EQ(r.status, 4) << r.out;
  const auto last = r.out.substr(r.out.rfind("--- npo-link show frame 3"));
  EXPECT_NE(last.find("   2    -  REMOVED"), std::string::npos) << last;
  EXPECT_NE(last.find("card 2 REMOVED"), std::string::npos) << last;  // in the summary
  EXPECT_NE(last.find("   7    6  "), std::string::npos) << last;     // a live card's port
  EXPECT_EQ(r.out.find("unavailable"), std::string::npos) << r.out;
  r = npo_test::run_command("timeout 60 " + std::string(NPO_LINK) +
                            " health --train --json --interval 0.5 --watch 1 --count 3" + backend_with(path));
  EXPECT_EQ(r.status, 4) << r.out;
  const auto frames = json_lines(r.out);
  ASSERT_EQ(frames.size(), 3u) << r.out;
  EXPECT_EQ(frames.back()["removed_cards"], json::array({2}));
  std::set<int> cards;
  for (const auto& p : frames.back()["ports"]) cards.insert(p["card"].get<int>());
  EXPECT_EQ(cards, (std::set<int>{0, 1, 3, 4, 5, 6, 7}));
  std::remove(path.c_str());
}

TEST(NpoLinkDdm, WatchGoesOnWhenTheModuleIsRemoved) {
  // `ddm --watch` exited with rc 1 on the very event it watched. Thresholds and raised flags
  // are listed as `ethtool -m` lists them.
  const auto path = scenario("ddm", "faults: [{at_ms: 1500, kind: module_removal, card: 1, port: 5}]\n");
  const auto r = npo_test::run_command("timeout 60 " + std::string(NPO_LINK) +
                                       " ddm --train --card 1 --port 5 --watch 1 --count 4" + backend_with(path));
  std::remove(path.c_str());
  EXPECT_EQ(r.status, 4) << r.out;
  EXPECT_EQ(count_of(r.out, "--- npo-link ddm frame "), 4u) << r.out;
  EXPECT_NE(r.out.find("card 1 port 5: module removed"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("thresholds (CMIS page 02h)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tx power"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("high alarm"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("flags: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("module flags raised: "), std::string::npos) << r.out;
}

TEST(NpoLinkTrain, AFailedTrainingExits4AndNumbersAttemptsPerRequest) {
  // Used to exit 0 after TIMEOUT_CDR_LOCK, with attempts numbered 1,2,3,1,2,3,1,2,3 unexplained.
  const auto path =
      scenario("trainfail", "faults: [{at_ms: 0, kind: training_timeout, card: 0, port: 3, count: 20}]\n");
  auto r = npo_test::run_command("timeout 60 " + std::string(NPO_LINK) + " train --card 0 --port 3" +
                                 backend_with(path) + " 2>&1");
  EXPECT_EQ(r.status, 4) << r.out;
  EXPECT_NE(r.out.find("card 0 port 3: TIMEOUT_CDR_LOCK"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("attempt N.M: the card's attempt M of train request N"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("attempt 1.3 at"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("attempt 3.3 at"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1 of 1 port did not train"), std::string::npos) << r.out;
  r = npo_test::run_command("timeout 60 " + std::string(NPO_LINK) + " train --card 0 --port 3 --json" +
                            backend_with(path));
  std::remove(path.c_str());
  EXPECT_EQ(r.status, 4) << r.out;
  const json j = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out;
  const auto& at = j["ports"][0]["attempts"];
  ASSERT_EQ(at.size(), 9u) << r.out;
  EXPECT_EQ(at[3]["attempt"], 1);
  EXPECT_EQ(at[3]["request"], 2);
  EXPECT_EQ(at[8]["request"], 3);
  // Every port trains: 0, no failure line.
  r = npo_test::run_command(std::string(NPO_LINK) + " train --card 0 --port 1" + kBackend);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out.find("did not train"), std::string::npos) << r.out;
}

TEST(NpoLinkDdm, SummaryNamesWhereTheAlarmComesFrom) {
  // A lane's rx_los / rx_cdr_lol made the summary say "flags raised: alarm" under "module
  // flags raised: none", which read as a contradiction.
  const auto path = scenario("ddmlos", "faults: [{at_ms: 1500, kind: lane_loss, card: 1, port: 5, lane: 3}]\n");
  const auto r = npo_test::run_command("timeout 60 " + std::string(NPO_LINK) +
                                       " ddm --train --card 1 --port 5 --watch 1 --count 3" + backend_with(path));
  std::remove(path.c_str());
  EXPECT_EQ(r.status, 4) << r.out;
  EXPECT_NE(r.out.find("flags raised: alarm (lane flags rx_cdr_lol, rx_los; no module flag)"), std::string::npos)
      << r.out;
}

TEST(NpoLinkEvents, StateChangesWithTimeCardPortLaneAndReason) {
  const auto path = scenario("events", "faults: [{at_ms: 1500, kind: module_removal, card: 1, port: 5}]\n");
  const auto r = npo_test::run_command("NPO_LOG_LEVEL=info timeout 60 " + std::string(NPO_LINK) +
                                       " events --train --json --watch 0.5 --count 6" + backend_with(path) +
                                       " 2>/tmp/npo-link-test-events-" + std::to_string(::getpid()) + ".log");
  EXPECT_EQ(r.status, 4) << r.out;
  bool module = false, port = false;
  for (const auto& e : json_lines(r.out)) {
    for (const char* k : {"timestamp_ns", "card", "port", "lane", "what", "from", "to", "reason"}) {
      ASSERT_TRUE(e.contains(k)) << k;
    }
    if (e["what"] == "module" && e["card"] == 1 && e["port"] == 5) {
      module = true;
      EXPECT_EQ(e["from"], "present");
      EXPECT_EQ(e["to"], "removed");
      EXPECT_GE(e["timestamp_ns"].get<std::uint64_t>(), 1'500'000'000u);
    }
    if (e["what"] == "port" && e["card"] == 1 && e["port"] == 5) {
      port = true;
      EXPECT_EQ(e["from"], "HEALTHY");
      EXPECT_EQ(e["to"], "FAILED");
      EXPECT_EQ(e["reason"], "module removed");
    }
  }
  EXPECT_TRUE(module) << r.out;
  EXPECT_TRUE(port) << r.out;
  // The same events at log level info.
  const auto log = npo_test::run_command("cat /tmp/npo-link-test-events-" + std::to_string(::getpid()) + ".log");
  EXPECT_NE(log.out.find("link event"), std::string::npos) << log.out;
  EXPECT_NE(log.out.find("card=1 port=5 module present -> removed"), std::string::npos) << log.out;
  std::remove(("/tmp/npo-link-test-events-" + std::to_string(::getpid()) + ".log").c_str());
  std::remove(path.c_str());
}

// ---- Trial findings 3, 7, 16: a one-shot sees now; flap storms; the event log's clock -------

TEST(NpoLinkHealth, OneShotReportsALaneThatIsDegradedNow) {
  // A one-shot health took one interval after a snapshot that judged the counters since
  // link-up, so hysteresis (2 intervals to worsen) kept a lane at 1e-4 GOOD: rc 0; show
  // printed the BER averaged since link-up. Both now sample 2 intervals first.
  const auto path =
      scenario("ramp", "faults: [{at_ms: 100, kind: ber_ramp, card: 5, port: 2, value: 1e-4, duration_ms: 300}]\n");
  auto r =
      npo_test::run_command(std::string(NPO_LINK) + " health --train --json --card 5 --port 2" + backend_with(path));
  EXPECT_EQ(r.status, 3) << r.out;
  json j = json::parse(r.out);
  ASSERT_EQ(j["ports"].size(), 1u);
  EXPECT_EQ(j["ports"][0]["state"], "DEGRADED") << j["ports"][0]["reason"];
  EXPECT_EQ(j["interval_ns"], 1'000'000'000u);  // --interval's default, the last of 2
  ASSERT_EQ(j["ports"][0]["lanes"].size(), 8u);
  for (const auto& l : j["ports"][0]["lanes"]) {
    EXPECT_EQ(l["verdict"], "DEGRADED") << l["reasons"];
    EXPECT_GT(l["pre_fec_ber"].get<double>(), 5e-5);
  }
  r = npo_test::run_command(std::string(NPO_LINK) + " show --train --json --card 5 --port 2" + backend_with(path));
  EXPECT_EQ(r.status, 3) << r.out;
  j = json::parse(r.out);
  ASSERT_EQ(j["ports"].size(), 1u);
  EXPECT_EQ(j["ports"][0]["state"], "DEGRADED") << j["ports"][0]["reason"];
  EXPECT_GT(j["ports"][0]["worst_pre_fec_ber"].get<double>(), 5e-5);  // the last interval's
  EXPECT_EQ(j["interval_ns"], 500'000'000u);                          // show --interval's default
  r = npo_test::run_command(std::string(NPO_LINK) + " show --train --card 5 --port 2 --interval 0.25" +
                            backend_with(path));
  EXPECT_EQ(r.status, 3) << r.out;
  EXPECT_NE(r.out.find("   5    2  DEGRADED     800   8/8  2:4        "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("over the last\ninterval (not since link-up)"), std::string::npos) << r.out;
  std::remove(path.c_str());
  r = npo_test::run_command(std::string(NPO_LINK) + " show --interval 0" + kBackend + " 2>&1");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("--interval 0: expected seconds in (0, 86400]"), std::string::npos) << r.out;
}

TEST(NpoLinkEvents, AFlapStormIsListedAndThePortDegraded) {
  // flap_storm count 3, one a second: events printed only its header and show stayed HEALTHY.
  const auto path =
      scenario("storm", "faults: [{at_ms: 500, kind: flap_storm, card: 0, port: 1, count: 3, duration_ms: 1000}]\n");
  auto r = npo_test::run_command("timeout 60 " + std::string(NPO_LINK) +
                                 " events --train --json --watch 0.5 --count 8" + backend_with(path));
  EXPECT_EQ(r.status, 3) << r.out;
  std::vector<std::string> flaps;
  bool degraded = false;
  for (const auto& e : json_lines(r.out)) {
    if (e["card"] != 0 || e["port"] != 1) continue;
    if (e["what"] == "flap") {
      flaps.push_back(e["from"].get<std::string>() + "->" + e["to"].get<std::string>());
      EXPECT_NE(e["reason"].get<std::string>().find("link went down and retrained 1 time"), std::string::npos)
          << e["reason"];
    }
    if (e["what"] == "port" && e["to"] == "DEGRADED") {
      degraded = true;
      EXPECT_EQ(e["from"], "HEALTHY");
      EXPECT_EQ(e["reason"], "up 8/8 lanes: 2 flaps in the last 300 s");
    }
  }
  EXPECT_EQ(flaps, (std::vector<std::string>{"0->1", "1->2", "2->3"})) << r.out;
  EXPECT_TRUE(degraded) << r.out;
  r = npo_test::run_command("timeout 60 " + std::string(NPO_LINK) +
                            " show --train --json --watch 0.5 --count 8 --card 0 --port 1" + backend_with(path));
  std::remove(path.c_str());
  EXPECT_EQ(r.status, 3) << r.out;
  const auto frames = json_lines(r.out);
  ASSERT_EQ(frames.size(), 8u);
  const auto& p = frames.back()["ports"][0];
  EXPECT_EQ(p["state"], "DEGRADED");
  EXPECT_EQ(p["reason"], "up 8/8 lanes: 3 flaps in the last 300 s");
  EXPECT_EQ(p["flap_count"], 3);
}

TEST(NpoLinkEvents, TheTextSaysWhatTimeSIsAndWhatHistoryThereIs) {
  const auto r = npo_test::run_command(std::string(NPO_LINK) + " events --train" + kBackend);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out.rfind("        TIME-S  CARD PORT LANE  WHAT", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("TIME-S: the platform clock, s,"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("CLOCK_MONOTONIC, i.e. time since boot"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("flaps since the card's reset"), std::string::npos) << r.out;
}

}  // namespace
