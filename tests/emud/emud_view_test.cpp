// SPDX-License-Identifier: Apache-2.0
// What emu-remote clients and the tools see of the daemon as a whole (trial findings 1, 2,
// 10, 11): a daemon that dies ends a watch at once with `unavailable` naming it; a card
// removed inside the daemon is one REMOVED card, not an unreadable daemon; a directory no
// daemon serves is an error; the sockets' group and mode. Each test starts its own daemon;
// every wait is bounded.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "common/emud_process.hpp"
#include "common/run_command.hpp"
#include "npo/hal/backend/registry.hpp"
#include "npo/hal/system.hpp"

namespace {

using npo::Code;
using npo_test::EmudProcess;

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// Waits up to `ms` for `needle` in the file at `path`; the file's text.
std::string wait_for(const std::string& path, const std::string& needle, int ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  std::string s = slurp(path);
  while (s.find(needle) == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    s = slurp(path);
  }
  return s;
}

// Finding 1: a watch on card 1 while the daemon dies (SIGKILL, then a clean SIGTERM stop):
// the tool exits 1 within a few seconds with `unavailable` naming the daemon (it used to
// print REMOVED frames forever, or spin on all-ones registers decoded as a flap count).
TEST(EmudView, WatchEndsWithUnavailableNamingTheDaemonWhenItDies) {
  for (const bool clean : {false, true}) {
    SCOPED_TRACE(clean ? "SIGTERM" : "SIGKILL");
    EmudProcess d;
    ASSERT_TRUE(d.start(NPO_EMUD, "emu:mesh8")) << d.output();
    const std::string out = d.dir() + ".watch";
    std::filesystem::remove(out);
    // In the background: the command returns at once, the watch writes its file.
    auto bg = npo_test::run_command("( " + std::string(NPO_LINK) + " show --backend " + d.uri() +
                                    " --card 1 --port 0 --watch 0.2 --count 300 >" + out + " 2>&1; echo \"rc=$?\" >>" +
                                    out + " ) >/dev/null 2>&1 &");
    ASSERT_EQ(bg.status, 0);
    const std::string first = wait_for(out, "show frame 2 ", 30000);
    ASSERT_NE(first.find("show frame 2 "), std::string::npos) << first;
    // A library client of the same daemon: a card it never called is told too.
    auto be = npo::backend::builtin_registry().open(d.uri());
    ASSERT_TRUE(be.has_value());
    auto fns = (*be)->enumerate();
    ASSERT_TRUE(fns.has_value() && fns->size() == 8);
    auto dev0 = (*be)->open((*fns)[0].address);
    auto dev3 = (*be)->open((*fns)[3].address);
    ASSERT_TRUE(dev0.has_value() && dev3.has_value());
    EXPECT_TRUE((*dev3)->check_connection().has_value());
    if (clean) {
      EXPECT_EQ(d.stop(), 0) << d.output();
    } else {
      d.kill();
    }
    const auto t0 = std::chrono::steady_clock::now();
    const std::string s = wait_for(out, "rc=", 10000);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_NE(s.find("rc="), std::string::npos) << "the watch did not end within 10 s:\n" << s;
    EXPECT_LT(took, 5.0) << s;
    EXPECT_NE(s.find("rc=1"), std::string::npos) << s;
    EXPECT_NE(s.find("unavailable: emu-remote: npo-emud at " + d.dir() + " is gone"), std::string::npos) << s;
    EXPECT_EQ(s.find("REMOVED"), std::string::npos) << "a dead daemon is not a removed card:\n" << s;
    std::array<std::byte, 4> b{};
    auto r = (*dev0)->config_read(0, b);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code(), Code::kUnavailable);
    EXPECT_NE(r.error().message().find("npo-emud at " + d.dir() + " is gone"), std::string::npos)
        << r.error().to_string();
    auto c3 = (*dev3)->check_connection();
    ASSERT_FALSE(c3.has_value()) << "card 3 made no call since the daemon died, but shares its fate";
    EXPECT_EQ(c3.error().code(), Code::kUnavailable);
    std::filesystem::remove(out);
    std::filesystem::remove_all(d.dir());
  }
}

}  // namespace
