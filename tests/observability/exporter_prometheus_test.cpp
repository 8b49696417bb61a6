// SPDX-License-Identifier: Apache-2.0
// Issue 17 points 1, 2, 3, 6 end to end: npo-emud holds mesh8 (links trained), npo-exporter
// watches it read-only (emu-remote ...?mode=ro), `promtool check metrics` accepts the
// exposition, Debian's Prometheus (loopback, temporary data dir, free port) scrapes it and a
// PromQL query through /api/v1/query returns the expected series; then a card is removed and
// the daemon is killed and restarted: the exporter reports npo_card_up / npo_up at 0 and
// recovers, every scrape answering within a bound. Both programs log JSON lines that parse.
// In between, a job in another process does DMA on one card and the exporter shows the card's
// activity counters (registers.md §9) with the exact op and byte counts.
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/child_process.hpp"
#include "common/emud_process.hpp"
#include "common/run_command.hpp"

namespace {

namespace fs = std::filesystem;
using npo_test::ChildProcess;
using npo_test::EmudProcess;

/// A TCP port on 127.0.0.1 that was free a moment ago.
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(fd);
    return -1;
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

/// Samples of one exposition: "name{labels}" -> value.
std::map<std::string, double> parse_samples(const std::string& text) {
  std::map<std::string, double> m;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const auto sp = line.rfind(' ');
    m[line.substr(0, sp)] = std::stod(line.substr(sp + 1));
  }
  return m;
}

/// How many samples of family `name` have value `v`.
int count_value(const std::map<std::string, double>& m, const std::string& name, double v) {
  int n = 0;
  for (const auto& [k, x] : m) {
    if ((k == name || k.starts_with(name + "{")) && x == v) ++n;
  }
  return n;
}

struct Scrape {
  int status = 0;
  std::string content_type;
  std::string body;
  double seconds = 0;
};

Scrape get(int port, const std::string& path) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(5, 0);
  c.set_read_timeout(15, 0);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = c.Get(path.c_str());
  Scrape s;
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!r) return s;
  s.status = r->status;
  s.content_type = r->get_header_value("Content-Type");
  s.body = r->body;
  return s;
}

/// Percent-encodes a query parameter (RFC 3986 unreserved characters kept).
std::string url_encode(const std::string& v) {
  std::string r;
  for (unsigned char c : v) {
    if (std::isalnum(c) != 0 || c == '-' || c == '_' || c == '.' || c == '~') {
      r += static_cast<char>(c);
    } else {
      char b[4];
      std::snprintf(b, sizeof b, "%%%02X", c);
      r += b;
    }
  }
  return r;
}

/// Every line of `out` that starts with '{' parses as a JSON log object with the issue's keys;
/// returns how many there were.
int check_json_lines(const std::string& out) {
  std::istringstream in(out);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] != '{') continue;
    const auto j = nlohmann::json::parse(line);
    for (const char* k : {"time", "level", "logger", "card", "port", "lane", "queue", "code", "message"})
      EXPECT_TRUE(j.contains(k)) << k << " missing: " << line;
    ++n;
  }
  return n;
}

class ExporterPrometheusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/npo-obs-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    tmp_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(tmp_, ec);
  }
  /// Scrapes until `pred(samples)` holds or `timeout_s` pass; every scrape must answer
  /// within 10 s (no stuck scrape). Returns the last samples.
  template <typename Pred>
  std::map<std::string, double> scrape_until(ChildProcess& exporter, int port, Pred pred, double timeout_s) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    std::map<std::string, double> m;
    for (;;) {
      const Scrape s = get(port, "/metrics");
      (void)exporter.pump(0);
      EXPECT_EQ(s.status, 200) << exporter.output();
      EXPECT_LT(s.seconds, 10.0);
      if (s.status != 200) return m;
      m = parse_samples(s.body);
      if (pred(m) || std::chrono::steady_clock::now() > deadline) return m;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }
  fs::path tmp_;
};

TEST_F(ExporterPrometheusTest, PrometheusScrapesAndTheExporterSurvivesFaults) {
  EmudProcess emud;
  ASSERT_TRUE(emud.start(NPO_EMUD, "emu:mesh8", {"--log-format", "json"})) << emud.output();
  // The daemon's own lines are JSON objects too.
  EXPECT_GE(check_json_lines(emud.output()), 1) << emud.output();
  EXPECT_NE(emud.output().find(R"("message":"ready cards=8)"), std::string::npos) << emud.output();

  ChildProcess exporter;
  ASSERT_TRUE(exporter.start({NPO_EXPORTER, "--backend", emud.uri(), "--listen", "127.0.0.1:0", "--log-format", "json",
                              "--log-level", "info"}));
  ASSERT_TRUE(exporter.wait_for("listening on 127.0.0.1:", 10000)) << exporter.output();
  ASSERT_TRUE(exporter.wait_for("\n", 2000));
  const auto at = exporter.output().find("listening on 127.0.0.1:");
  const int port = std::stoi(exporter.output().substr(at + 23));

  // 1. The exposition: content type, values, promtool's lint.
  const Scrape first = get(port, "/metrics");
  ASSERT_EQ(first.status, 200);
  EXPECT_EQ(first.content_type, "text/plain; version=0.0.4; charset=utf-8");
  auto m = parse_samples(first.body);
  EXPECT_EQ(m["npo_up"], 1);
  EXPECT_EQ(count_value(m, "npo_card_up", 1), 8);
  EXPECT_EQ(count_value(m, "npo_port_link_up", 1), 56);  // mesh8: 7 cabled ports per card
  EXPECT_EQ(m[R"(npo_port_state{card="0",port="0",state="HEALTHY"})"], 1);
  EXPECT_EQ(m[R"(npo_port_training_state{card="0",port="0",state="up"})"], 1);
  EXPECT_EQ(m[R"(npo_port_speed_bytes_per_second{card="0",port="0"})"], 1e11);  // 800 Gb/s
  EXPECT_EQ(count_value(m, "npo_lane_in_use", 1), 56 * 8);
  EXPECT_GT(m[R"(npo_lane_fec_codewords_total{card="2",port="3",lane="5"})"], 0);
  EXPECT_GT(m[R"(npo_lane_snr_decibels{card="2",port="3",lane="5"})"], 10);
  EXPECT_GT(m[R"(npo_lane_rx_power_watts{card="2",port="3",lane="5"})"], 0);
  EXPECT_LT(m[R"(npo_lane_rx_power_watts{card="2",port="3",lane="5"})"], 0.01);  // watts, not mW
  EXPECT_GT(m[R"(npo_port_module_temperature_celsius{card="2",port="3"})"], 10);
  EXPECT_EQ(m.count(R"(npo_lane_health{card="2",port="3",lane="5",verdict="GOOD"})"), 1u);
  // Power (mailbox POWER_READ): trained links, powered-up modules (16 W, class 8), no throttling.
  EXPECT_EQ(count_value(m, "npo_card_power_limit_watts", 700), 8);
  EXPECT_EQ(count_value(m, "npo_card_throttled", 0), 8);
  EXPECT_GT(m[R"(npo_card_power_watts{card="0"})"], 60 + 7 * 16);
  EXPECT_GT(m[R"(npo_card_power_avg_watts{card="0"})"], 60);
  EXPECT_GT(m[R"(npo_card_energy_joules_total{card="0"})"], 0);
  EXPECT_GT(m[R"(npo_card_temperature_celsius{card="0"})"], 30);
  EXPECT_EQ(m[R"(npo_module_power_watts{card="2",port="3"})"], 16);
  EXPECT_EQ(m[R"(npo_module_power_class{card="2",port="3"})"], 8);
  EXPECT_EQ(m.count(R"(npo_module_power_watts{card="2",port="7"})"), 0u) << "mesh8: port 7 has no module";
  const fs::path metrics_file = tmp_ / "metrics.txt";
  { std::ofstream(metrics_file) << first.body; }
  const auto lint = npo_test::run_command("promtool check metrics < " + metrics_file.string() + " 2>&1");
  EXPECT_EQ(lint.status, 0) << lint.out;
  EXPECT_EQ(lint.out, "") << "promtool check metrics findings:\n" << lint.out;
  // The activity counters of every card (registers.md §9): 32 queues x ok/error, nothing moved
  // yet on a fresh daemon.
  EXPECT_EQ(count_value(m, "npo_dma_queue_ops_total", 0), 8 * 32 * 2);
  EXPECT_EQ(count_value(m, "npo_dma_queue_bytes_total", 0), 8 * 32);
  EXPECT_EQ(count_value(m, "npo_card_windows", 0), 8);
  EXPECT_EQ(m.count(R"(npo_mailbox_errors_total{card="5"})"), 1u);
  const double mbox_errors_before = m[R"(npo_mailbox_errors_total{card="5"})"];

  // 1b. Another process owns card 5 and does DMA on engine 2 (its queue 0): 10 copies of 64 KiB
  // and one failing op, 3 windows exported, one mailbox request answered with an error. The
  // exporter (read-only, another process again) shows exactly that, read from the card.
  {
    ChildProcess job;
    ASSERT_TRUE(job.start({NPO_DMA_CLIENT, emud.uri() + "?card=5", "2", "10", "65536", "3", "1"}));
    ASSERT_TRUE(job.wait_for("ready", 30000)) << job.output();
    EXPECT_NE(job.output().find("ready ok=10 error=1 bytes=655360"), std::string::npos) << job.output();
    const Scrape during = get(port, "/metrics");
    ASSERT_EQ(during.status, 200);
    const auto d = parse_samples(during.body);
    EXPECT_EQ(d.at(R"(npo_dma_queue_ops_total{card="5",engine="2",queue="0",status="ok"})"), 10);
    EXPECT_EQ(d.at(R"(npo_dma_queue_ops_total{card="5",engine="2",queue="0",status="error"})"), 1);
    EXPECT_EQ(d.at(R"(npo_dma_queue_bytes_total{card="5",engine="2",queue="0"})"), 655360);
    EXPECT_EQ(count_value(d, "npo_dma_queue_ops_total", 0), 8 * 32 * 2 - 2);  // nothing else moved
    EXPECT_EQ(count_value(d, "npo_dma_queue_bytes_total", 0), 8 * 32 - 1);
    EXPECT_EQ(d.at(R"(npo_card_windows{card="5"})"), 3);
    EXPECT_EQ(count_value(d, "npo_card_windows", 0), 7);
    EXPECT_EQ(d.at(R"(npo_mailbox_errors_total{card="5"})"), mbox_errors_before + 1);
    const fs::path during_file = tmp_ / "metrics-dma.txt";
    { std::ofstream(during_file) << during.body; }
    const auto lint2 = npo_test::run_command("promtool check metrics < " + during_file.string() + " 2>&1");
    EXPECT_EQ(lint2.status, 0) << lint2.out;
    EXPECT_EQ(lint2.out, "") << lint2.out;
    // The job ends: its windows go with it (the daemon releases the card), the counters stay
    // (only a card reset clears them).
    EXPECT_EQ(job.stop(10000), 0) << job.output();
    const auto after = scrape_until(
        exporter, port, [](auto& s) { return s[R"(npo_card_windows{card="5"})"] == 0; }, 10);
    EXPECT_EQ(after.at(R"(npo_card_windows{card="5"})"), 0);
    EXPECT_EQ(after.at(R"(npo_dma_queue_ops_total{card="5",engine="2",queue="0",status="ok"})"), 10);
    EXPECT_EQ(after.at(R"(npo_dma_queue_bytes_total{card="5",engine="2",queue="0"})"), 655360);
  }

  // 2. A real Prometheus scrapes it; PromQL through the HTTP API.
  const int prom_port = free_port();
  ASSERT_GT(prom_port, 0);
  const fs::path cfg = tmp_ / "prometheus.yml";
  {
    std::ofstream out(cfg);
    // scrape_timeout defaults to the interval when the interval is under 10 s: a 1 s interval
    // timed every scrape out under ThreadSanitizer on a loaded 2-core CI machine (one scrape of
    // mesh8 reads ~1500 registers through the daemon). The exporter's own bound is 10 s.
    out << "global:\n  scrape_interval: 10s\n  scrape_timeout: 10s\n  evaluation_interval: 1s\n"
        << "rule_files:\n  - " << NPO_SOURCE_DIR << "/tools/npo-exporter/alerts/npo-alerts.yml\n"
        << "scrape_configs:\n  - job_name: npo\n    static_configs:\n      - targets: ['127.0.0.1:" << port << "']\n";
  }
  ChildProcess prom;
  ASSERT_TRUE(
      prom.start({"prometheus", "--config.file=" + cfg.string(), "--storage.tsdb.path=" + (tmp_ / "data").string(),
                  "--web.listen-address=127.0.0.1:" + std::to_string(prom_port), "--log.level=warn"}));
  std::optional<nlohmann::json> result;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    (void)prom.pump(0);
    const Scrape q = get(prom_port, "/api/v1/query?query=sum(npo_port_link_up%7Bjob%3D%22npo%22%7D)");
    if (q.status == 200) {
      const auto j = nlohmann::json::parse(q.body);
      if (j["status"] == "success" && !j["data"]["result"].empty()) {
        result = j;
        break;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  if (!result.has_value()) {
    // Prometheus logs a failed scrape only at debug level; its targets API says why.
    const Scrape targets = get(prom_port, "/api/v1/targets");
    FAIL() << "no npo series in Prometheus within 60 s; targets: " << targets.body << "\n" << prom.output();
  }
  EXPECT_EQ((*result)["data"]["result"][0]["value"][1], "56");
  // One series per lane in use, labelled as exported, plus the target's job/instance.
  const Scrape lanes = get(prom_port, "/api/v1/query?query=npo_lane_health%7Bverdict%3D%22GOOD%22%2Ccard%3D%221%22%7D");
  ASSERT_EQ(lanes.status, 200);
  const auto lj = nlohmann::json::parse(lanes.body);
  ASSERT_EQ(lj["data"]["result"].size(), 7u * 8u);
  EXPECT_EQ(lj["data"]["result"][0]["metric"]["job"], "npo");
  EXPECT_EQ(lj["data"]["result"][0]["metric"]["instance"], "127.0.0.1:" + std::to_string(port));
  // The alert rules loaded and evaluate (healthy fabric: nothing firing).
  const Scrape rules = get(prom_port, "/api/v1/rules");
  ASSERT_EQ(rules.status, 200);
  const auto rj = nlohmann::json::parse(rules.body);
  ASSERT_EQ(rj["data"]["groups"].size(), 1u);
  EXPECT_EQ(rj["data"]["groups"][0]["rules"].size(), 7u);
  // The Grafana dashboard: every panel's PromQL (variables filled in) is accepted by this
  // Prometheus, and every npo_ metric it names is one the exporter writes.
  {
    std::ifstream in(std::string(NPO_SOURCE_DIR) + "/tools/npo-exporter/grafana/npo-fabric.json");
    const auto dash = nlohmann::json::parse(in);
    ASSERT_GE(dash["panels"].size(), 10u);
    std::size_t exprs = 0;
    for (const auto& panel : dash["panels"]) {
      for (const auto& target : panel["targets"]) {
        std::string e = target["expr"];
        for (auto v = e.find("$instance"); v != std::string::npos; v = e.find("$instance")) e.replace(v, 9, ".*");
        const Scrape q = get(prom_port, "/api/v1/query?query=" + url_encode(e));
        EXPECT_EQ(q.status, 200) << panel["title"] << ": " << e << "\n" << q.body;
        // Metric names: "npo_" and lower-case letters and '_' (no <regex>: GCC 12 warns inside
        // it under the sanitizer presets).
        for (auto p = e.find("npo_"); p != std::string::npos; p = e.find("npo_", p + 1)) {
          if (p > 0 && (std::isalnum(static_cast<unsigned char>(e[p - 1])) != 0 || e[p - 1] == '_')) continue;
          std::size_t end = p + 4;
          while (end < e.size() && ((e[end] >= 'a' && e[end] <= 'z') || e[end] == '_')) ++end;
          const std::string name = e.substr(p, end - p);
          EXPECT_NE(first.body.find("# TYPE " + name + " "), std::string::npos)
              << panel["title"] << " names " << name << ", which the exporter does not write";
          p = end - 1;
        }
        ++exprs;
      }
    }
    EXPECT_GE(exprs, 10u);
  }
  EXPECT_EQ(prom.stop(15000), 0) << prom.output();

  // 3. A card removed: its npo_card_up goes to 0, the others stay, the exporter stays up.
  const auto fault = npo_test::run_command(std::string(NPO_EMU) + " fault --socket-dir " + emud.dir() +
                                           " --kind surprise_removal --card 3 2>&1");
  ASSERT_EQ(fault.status, 0) << fault.out;
  m = scrape_until(
      exporter, port, [](auto& s) { return s[R"(npo_card_up{card="3"})"] == 0; }, 20);
  EXPECT_EQ(m[R"(npo_card_up{card="3"})"], 0);
  EXPECT_EQ(count_value(m, "npo_card_up", 1), 7);
  EXPECT_EQ(m["npo_up"], 1);
  EXPECT_EQ(m.count(R"(npo_port_link_up{card="3",port="0"})"), 0u);  // a removed card has no ports

  // 4. The daemon dies: npo_up 0 within a few scrapes, each answering promptly.
  emud.kill();
  m = scrape_until(
      exporter, port, [](auto& s) { return s["npo_up"] == 0; }, 20);
  EXPECT_EQ(m["npo_up"], 0);
  EXPECT_EQ(count_value(m, "npo_card_up", 1), 0);  // every card seen before is reported at 0 while down
  m = scrape_until(
      exporter, port, [](auto& s) { return s["npo_up"] == 0; }, 1);  // still answering while down
  EXPECT_EQ(m["npo_up"], 0);

  // 5. ... and comes back in the same socket directory: the exporter reconnects.
  EmudProcess emud2;
  ASSERT_TRUE(emud2.start_in(NPO_EMUD, "emu:mesh8", emud.dir())) << emud2.output();
  m = scrape_until(
      exporter, port, [](auto& s) { return s["npo_up"] == 1 && count_value(s, "npo_port_link_up", 1) == 56; }, 30);
  EXPECT_EQ(m["npo_up"], 1);
  EXPECT_EQ(count_value(m, "npo_card_up", 1), 8);
  EXPECT_EQ(count_value(m, "npo_port_link_up", 1), 56);
  EXPECT_GE(m["npo_exporter_reconnects_total"], 1);

  EXPECT_EQ(exporter.stop(10000), 0) << exporter.output();
  // The exporter's log (info: the link events it saw) is JSON lines with the issue's keys,
  // and the card removal is among them with its card number.
  EXPECT_GE(check_json_lines(exporter.output()), 1) << exporter.output();
  EXPECT_NE(exporter.output().find(R"("card":3)"), std::string::npos) << exporter.output();
}

/// Starts an exporter on 127.0.0.1:0 and returns the port it printed (-1: none in 10 s).
int start_exporter(ChildProcess& exporter, const std::string& backend) {
  if (!exporter.start({NPO_EXPORTER, "--backend", backend, "--listen", "127.0.0.1:0"})) return -1;
  if (!exporter.wait_for("listening on 127.0.0.1:", 10000) || !exporter.wait_for("\n", 2000)) return -1;
  const auto at = exporter.output().find("listening on 127.0.0.1:");
  return std::stoi(exporter.output().substr(at + 23));
}

// Two exporters must not share a port (cpp-httplib's default SO_REUSEPORT let the second bind
// it too and take every other scrape): the second fails with the reason, exit 1, and the
// first keeps every scrape. A port held by another program gives the same reason.
TEST_F(ExporterPrometheusTest, SecondExporterOnTheSamePortFailsWithTheReason) {
  ChildProcess first;
  const int port = start_exporter(first, "emu:mesh8");
  ASSERT_GT(port, 0) << first.output();
  const std::string addr = "127.0.0.1:" + std::to_string(port);

  ChildProcess second;
  ASSERT_TRUE(second.start({NPO_EXPORTER, "--backend", "emu:mesh8", "--listen", addr}));
  EXPECT_TRUE(second.wait_for("cannot listen", 10000)) << second.output();
  EXPECT_EQ(second.stop(10000), 1) << second.output();
  EXPECT_NE(second.output().find("npo-exporter: cannot listen on " + addr + ": address already in use"),
            std::string::npos)
      << second.output();
  EXPECT_EQ(second.output().find("listening on"), std::string::npos) << second.output();
  // Every scrape reaches the first one (its scrape counter counts each of them).
  for (int i = 1; i <= 4; ++i) {
    const Scrape s = get(port, "/metrics");
    ASSERT_EQ(s.status, 200);
    EXPECT_EQ(parse_samples(s.body)["npo_exporter_scrapes_total"], i);
  }
  EXPECT_EQ(first.stop(10000), 0) << first.output();

  // A port another program listens on (SO_REUSEADDR only, like most servers).
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  const int yes = 1;
  ASSERT_EQ(::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes), 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 4), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const std::string held = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  ChildProcess third;
  ASSERT_TRUE(third.start({NPO_EXPORTER, "--backend", "emu:mesh8", "--listen", held}));
  EXPECT_TRUE(third.wait_for("cannot listen", 10000)) << third.output();
  EXPECT_EQ(third.stop(10000), 1) << third.output();
  ::close(fd);
  EXPECT_NE(third.output().find("cannot listen on " + held + ": address already in use"), std::string::npos)
      << third.output();
}

// The daemon dies between scrapes: every later scrape says npo_up 0 and keeps one npo_card_up
// series per card seen before, at 0 with the same labels (the NpoCardDown alert fires and
// holds), and the exposition stays valid (no family twice).
TEST_F(ExporterPrometheusTest, CardsStayAtZeroWhileTheDaemonIsGone) {
  EmudProcess emud;
  ASSERT_TRUE(emud.start(NPO_EMUD, "emu:mesh8")) << emud.output();
  ChildProcess exporter;
  const int port = start_exporter(exporter, emud.uri());
  ASSERT_GT(port, 0) << exporter.output();
  auto m = scrape_until(
      exporter, port, [](auto& s) { return s["npo_up"] == 1; }, 20);
  ASSERT_EQ(m["npo_up"], 1);
  EXPECT_EQ(count_value(m, "npo_card_up", 1), 8);

  emud.kill();
  for (int i = 0; i < 3; ++i) {
    const Scrape s = get(port, "/metrics");
    ASSERT_EQ(s.status, 200) << exporter.output();
    m = parse_samples(s.body);
    EXPECT_EQ(m["npo_up"], 0) << s.body;
    EXPECT_EQ(count_value(m, "npo_card_up", 0), 8) << "scrape " << i << " after the daemon died:\n" << s.body;
    EXPECT_EQ(count_value(m, "npo_card_up", 1), 0);
    for (int c = 0; c < 8; ++c) EXPECT_EQ(m.count("npo_card_up{card=\"" + std::to_string(c) + "\"}"), 1u) << c;
    EXPECT_EQ(m.count(R"(npo_port_link_up{card="0",port="0"})"), 0u);  // no port of an unreachable card
    const fs::path f = tmp_ / ("down-" + std::to_string(i) + ".txt");
    { std::ofstream(f) << s.body; }
    const auto lint = npo_test::run_command("promtool check metrics < " + f.string() + " 2>&1");
    EXPECT_EQ(lint.status, 0) << lint.out;
    EXPECT_EQ(lint.out, "") << lint.out;
  }
  EXPECT_EQ(exporter.stop(10000), 0) << exporter.output();
}

// Partitions (issue 32 point 3): every card's npo_card_partition is the GLOBAL.PARTITION the
// daemon set, and npo_card_info carries it as a label.
TEST_F(ExporterPrometheusTest, EveryCardIsLabelledWithItsPartition) {
  EmudProcess emud;
  ASSERT_TRUE(emud.start(NPO_EMUD, "emu:mesh8", {"--partition", "0-2=7", "--partition", "5-7=9"})) << emud.output();
  ChildProcess exporter;
  const int port = start_exporter(exporter, emud.uri());
  ASSERT_GT(port, 0) << exporter.output();
  auto m = scrape_until(
      exporter, port, [](auto& s) { return s["npo_up"] == 1; }, 20);
  ASSERT_EQ(m["npo_up"], 1);
  const int want[8] = {7, 7, 7, 0, 0, 9, 9, 9};
  for (int c = 0; c < 8; ++c) {
    EXPECT_EQ(m.at("npo_card_partition{card=\"" + std::to_string(c) + "\"}"), want[c]) << c;
    int info = 0;
    const std::string label = "card=\"" + std::to_string(c) + "\",";
    const std::string part = "partition=\"" + std::to_string(want[c]) + "\"";
    for (const auto& [k, v] : m) {
      if (k.starts_with("npo_card_info{") && k.find(label) != std::string::npos) {
        ++info;
        EXPECT_NE(k.find(part), std::string::npos) << k;
        EXPECT_EQ(v, 1);
      }
    }
    EXPECT_EQ(info, 1) << "card " << c << ": one npo_card_info series";
  }
  EXPECT_EQ(exporter.stop(10000), 0) << exporter.output();
}

}  // namespace
