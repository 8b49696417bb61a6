// SPDX-License-Identifier: Apache-2.0
#include "npo/hal/log.hpp"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;

std::vector<std::string> read_lines(const fs::path& p) {
  std::ifstream in(p);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

class LogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = fs::temp_directory_path() / ("npo-log-test-" + std::to_string(::getpid()) + ".log");
    fs::remove(path_);
  }
  void TearDown() override {
    ASSERT_TRUE(npo::log::configure({.level = "warn"}).has_value());  // back to stderr
    fs::remove(path_);
  }
  fs::path path_;
};

TEST_F(LogTest, LevelNames) {
  EXPECT_EQ(npo::log::parse_level("warning").value(), spdlog::level::warn);
  EXPECT_EQ(npo::log::parse_level("off").value(), spdlog::level::off);
  auto bad = npo::log::parse_level("loud");
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().code(), npo::Code::kInvalidArgument);
  EXPECT_NE(bad.error().message().find("trace, debug, info, warn, error, critical, off"), std::string::npos);
}

TEST_F(LogTest, BadLevelIsRejectedAndConfigurationKept) {
  ASSERT_TRUE(npo::log::configure({.level = "error"}).has_value());
  auto r = npo::log::configure({.level = "chatty"});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(npo::log::get(npo::log::Subsystem::kDma).level(), spdlog::level::err);
}

TEST_F(LogTest, OneLoggerPerSubsystemWithLevelFiltering) {
  ASSERT_TRUE(npo::log::configure({.level = "info", .format = npo::log::Format::kText, .file = path_.string()}));
  npo::log::get(npo::log::Subsystem::kDma).info("queue {} up", 3);
  npo::log::get(npo::log::Subsystem::kOptics).debug("hidden at info");
  npo::log::get(npo::log::Subsystem::kOptics).warn("lane {} degraded", 5);
  npo::log::get(npo::log::Subsystem::kDma).flush();
  const auto lines = read_lines(path_);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find("[npo.dma] [info] queue 3 up"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("[npo.optics] [warning] lane 5 degraded"), std::string::npos) << lines[1];
  EXPECT_EQ(npo::log::logger_name(npo::log::Subsystem::kVfio), "npo.vfio");
}

TEST_F(LogTest, JsonLinesAreValidJsonWithEscaping) {
  ASSERT_TRUE(npo::log::configure({.level = "debug", .format = npo::log::Format::kJsonLines, .file = path_.string()}));
  npo::log::get(npo::log::Subsystem::kMailbox).error("reply \"bad\"\n\tcrc=0x{:08x} \\ end", 0xdeadbeefu);
  npo::log::get(npo::log::Subsystem::kMailbox).flush();
  const auto lines = read_lines(path_);
  ASSERT_EQ(lines.size(), 1u);
  const auto j = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(j["logger"], "npo.mailbox");
  EXPECT_EQ(j["level"], "error");
  // Issue 17 renamed the keys for ELK/Loki: ts -> time, msg -> message.
  EXPECT_EQ(j["message"], "reply \"bad\"\n\tcrc=0xdeadbeef \\ end");
  EXPECT_TRUE(j["time"].get<std::string>().ends_with("Z"));
}

// Issue 17: one object per event with time, level, card, port, lane, queue, code, message;
// the numbers come from the message's key=value tokens, the code from code= or an npo::Error.
TEST_F(LogTest, JsonLinesCarryCardPortLaneQueueAndCode) {
  ASSERT_TRUE(npo::log::configure({.level = "info", .format = npo::log::Format::kJsonLines, .file = path_.string()}));
  npo::log::get(npo::log::Subsystem::kOptics).info("link event card=3 port=2 lane=7 code=TIMEOUT_FEC_LOCK");
  const npo::Error e(npo::Code::kUnavailable, "card removed", 0, {.card = 5, .queue = 1});
  npo::log::get(npo::log::Subsystem::kDma).warn("submit failed: {}", e.to_string());
  npo::log::get(npo::log::Subsystem::kCore).info("system 'emu:mesh8': 8 cards");
  npo::log::get(npo::log::Subsystem::kCore).info("card 6 0000:07:00.0 fabric 7 port 4: ok");
  npo::log::get(npo::log::Subsystem::kCore).flush();
  const auto lines = read_lines(path_);
  ASSERT_EQ(lines.size(), 4u);
  std::vector<nlohmann::json> j;
  for (const auto& l : lines) j.push_back(nlohmann::json::parse(l));
  for (const auto& o : j) {
    for (const char* k : {"time", "level", "logger", "card", "port", "lane", "queue", "code", "message"})
      EXPECT_TRUE(o.contains(k)) << k << " missing in " << o.dump();
    // RFC 3339 UTC with microseconds: 2026-12-01T15:55:18.123456Z
    const auto t = o["time"].get<std::string>();
    EXPECT_EQ(t.size(), 27u) << t;
    EXPECT_EQ(t[10], 'T');
    EXPECT_EQ(t.back(), 'Z');
  }
  EXPECT_EQ(j[0]["card"], 3);
  EXPECT_EQ(j[0]["port"], 2);
  EXPECT_EQ(j[0]["lane"], 7);
  EXPECT_TRUE(j[0]["queue"].is_null());
  EXPECT_EQ(j[0]["code"], "TIMEOUT_FEC_LOCK");
  EXPECT_EQ(j[0]["level"], "info");
  EXPECT_EQ(j[0]["logger"], "npo.optics");
  EXPECT_EQ(j[1]["card"], 5);
  EXPECT_EQ(j[1]["queue"], 1);
  EXPECT_EQ(j[1]["code"], "unavailable");
  EXPECT_EQ(j[1]["level"], "warning");
  EXPECT_TRUE(j[2]["card"].is_null());
  EXPECT_TRUE(j[2]["code"].is_null());
  EXPECT_EQ(j[2]["message"], "system 'emu:mesh8': 8 cards");
  EXPECT_EQ(j[3]["card"], 6);
  EXPECT_EQ(j[3]["port"], 4);
  EXPECT_TRUE(j[3]["code"].is_null());  // no code= and no error code name followed by ": "
}

TEST_F(LogTest, ReconfigureWhileLoggingFromThreads) {
  ASSERT_TRUE(npo::log::configure({.level = "info", .file = path_.string()}));
  std::atomic<bool> stop{false};
  std::vector<std::thread> ts;
  for (int t = 0; t < 2; ++t) {
    ts.emplace_back([&stop, t] {
      while (!stop.load()) npo::log::get(npo::log::Subsystem::kTopology).info("thread {}", t);
    });
  }
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(npo::log::configure({.level = i % 2 ? "info" : "warn", .file = path_.string()}));
  }
  stop = true;
  for (auto& t : ts) t.join();
  SUCCEED();  // the assertion is ThreadSanitizer's: no race between configure() and logging
}

TEST_F(LogTest, UnwritableFileIsUnavailable) {
  auto r = npo::log::configure({.file = "/proc/npo-log-test/y.log"});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), npo::Code::kUnavailable);
}

}  // namespace

namespace {
// NPO_LOG_LEVEL is read once per process, so this runs in a re-executed child (threadsafe
// death-test style): a typo in the variable is said on stderr, not silently ignored.
TEST(LogEnvironment, UnknownLevelInNpoLogLevelIsReportedAndWarnKept) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        ::setenv("NPO_LOG_LEVEL", "verbose", 1);
        auto& dma = npo::log::get(npo::log::Subsystem::kDma);
        const bool warn_level = dma.level() == spdlog::level::warn;
        dma.info("an info line that must not appear");
        std::exit(warn_level ? 0 : 3);
      },
      ::testing::ExitedWithCode(0),
      "NPO_LOG_LEVEL: unknown log level 'verbose' \\(accepted: trace, debug, info, warn, error, critical, off\\); "
      "logging at 'warn'");
}
}  // namespace
