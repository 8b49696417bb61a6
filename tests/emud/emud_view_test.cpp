// SPDX-License-Identifier: Apache-2.0
// What emu-remote clients and the tools see of the daemon as a whole (trial findings 1, 2,
// 10, 11): a daemon that dies ends a watch at once with `unavailable` naming it; a card
// removed inside the daemon is one REMOVED card, not an unreadable daemon; a directory no
// daemon serves is an error; the sockets' group and mode. Each test starts its own daemon;
// every wait is bounded.
#include <grp.h>
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

namespace {

// Finding 2: a card removed inside the daemon before a tool opens it is that card REMOVED
// (npo-smi row + exit 4, npo-link show row + exit 4, naming card 7), not an error of the
// whole daemon (it was `failed_precondition: ... is ffff:ffff, not an NPO card`, rc 1).
TEST(EmudView, CardRemovedInsideTheDaemonIsListedRemovedNotAnError) {
  EmudProcess d;
  ASSERT_TRUE(d.start(NPO_EMUD, "emu:mesh8")) << d.output();
  auto inj = npo_test::run_command(std::string(NPO_EMU) + " fault --socket-dir " + d.dir() +
                                   " --kind surprise_removal --card 7 2>&1");
  ASSERT_EQ(inj.status, 0) << inj.out;
  auto smi = npo_test::run_command(std::string(NPO_SMI) + " --backend " + d.uri() + " 2>&1");
  EXPECT_EQ(smi.status, 4) << smi.out;
  EXPECT_NE(smi.out.find("8 cards"), std::string::npos) << smi.out;
  EXPECT_NE(smi.out.find("7    0000:08:00.0 1ee7:0a01"), std::string::npos) << smi.out;
  EXPECT_NE(smi.out.find("REMOVED"), std::string::npos) << smi.out;
  EXPECT_NE(smi.out.find("7 of 8 cards present; card 7 REMOVED"), std::string::npos) << smi.out;
  EXPECT_NE(smi.out.find("card 7 0000:08:00.0 was removed"), std::string::npos) << smi.out;
  EXPECT_EQ(smi.out.find("not an NPO card"), std::string::npos) << smi.out;
  auto json = npo_test::run_command(std::string(NPO_SMI) + " --backend " + d.uri() + " --json 2>/dev/null");
  EXPECT_EQ(json.status, 4) << json.out;
  EXPECT_NE(json.out.find("\"removed\": true"), std::string::npos) << json.out;
  auto show = npo_test::run_command(std::string(NPO_LINK) + " show --backend " + d.uri() + " --card 0,7 --port 6 2>&1");
  EXPECT_EQ(show.status, 4) << show.out;
  EXPECT_NE(show.out.find("   7    -  REMOVED"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("card 7 REMOVED"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("   0    6  "), std::string::npos) << "card 0 still shown:\n" << show.out;
  // ddm of a removed card (and a --port check that skips its 0 ports): REMOVED, exit 4.
  auto ddm = npo_test::run_command(std::string(NPO_LINK) + " ddm --backend " + d.uri() + " --card 7 --port 0 2>&1");
  EXPECT_EQ(ddm.status, 4) << ddm.out;
  EXPECT_NE(ddm.out.find("card 7: REMOVED"), std::string::npos) << ddm.out;
  EXPECT_NE(ddm.out.find("1 card(s) removed"), std::string::npos) << ddm.out;
  // topo cannot discover a graph through a removed card: it says which, exit 4 (it was a
  // tool error, rc 1, "link bring-up: unavailable: card removed").
  auto topo = npo_test::run_command(std::string(NPO_SMI) + " --backend " + d.uri() + " topo 2>&1");
  EXPECT_EQ(topo.status, 4) << topo.out;
  EXPECT_NE(topo.out.find("card 7 (0000:08:00.0) was removed, so the fabric cannot be discovered"), std::string::npos)
      << topo.out;
  // Through the library: the System opens all 8; card 7 is marked, its calls fail unavailable.
  auto sys = npo::System::open(d.uri() + "?mode=ro");
  ASSERT_TRUE(sys.has_value()) << sys.error().to_string();
  ASSERT_EQ((*sys)->device_count(), 8u);
  EXPECT_TRUE((*sys)->device(7).info().removed);
  EXPECT_FALSE((*sys)->device(6).info().removed);
  sys->reset();
  EXPECT_EQ(d.stop(), 0) << d.output();
  std::filesystem::remove_all(d.dir());
}

// Finding 11: a directory a daemon left after a clean stop (sockets removed) is no daemon,
// not "0 cards".
TEST(EmudView, StoppedDaemonDirectoryIsAnErrorNotAnEmptySystem) {
  EmudProcess d;
  ASSERT_TRUE(d.start(NPO_EMUD, "emu:2", {"--no-bring-up"})) << d.output();
  EXPECT_EQ(d.stop(), 0) << d.output();
  ASSERT_TRUE(std::filesystem::is_directory(d.dir()));
  auto sys = npo::System::open(d.uri());
  ASSERT_FALSE(sys.has_value());
  EXPECT_EQ(sys.error().code(), Code::kUnavailable);
  EXPECT_NE(sys.error().message().find("no npo-emud serving " + d.dir()), std::string::npos) << sys.error().to_string();
  auto smi = npo_test::run_command(std::string(NPO_SMI) + " --backend " + d.uri() + " 2>&1");
  EXPECT_EQ(smi.status, 1) << smi.out;
  EXPECT_NE(smi.out.find("no npo-emud serving " + d.dir()), std::string::npos) << smi.out;
  EXPECT_EQ(smi.out.find("0 cards"), std::string::npos) << smi.out;
  std::filesystem::remove_all(d.dir());
}

}  // namespace

namespace {

// Finding 10: --socket-group / --socket-mode set who may connect (group, mode of every card
// socket, a searchable directory); bad values are refused with exit 2; the installed unit's
// ExecStart is the configured install prefix, not a hardcoded /usr/local/bin.
TEST(EmudView, SocketGroupAndModeLetAGroupConnect) {
  const gid_t gid = ::getegid();
  const group* g = ::getgrgid(gid);
  ASSERT_NE(g, nullptr);
  EmudProcess d;
  ASSERT_TRUE(d.start(NPO_EMUD, "emu:2", {"--no-bring-up", "--socket-group", g->gr_name, "--socket-mode", "0660"}))
      << d.output();
  for (const std::string& p : {d.dir() + "/card-0.sock", d.dir() + "/card-1.sock"}) {
    struct stat st {};
    ASSERT_EQ(::stat(p.c_str(), &st), 0) << p;
    EXPECT_EQ(st.st_mode & 07777, 0660u) << p;
    EXPECT_EQ(st.st_gid, gid) << p;
  }
  struct stat ds {};
  ASSERT_EQ(::stat(d.dir().c_str(), &ds), 0);
  EXPECT_EQ(ds.st_mode & 07777, 0750u);
  auto sys = npo::System::open(d.uri() + "?mode=ro");
  EXPECT_TRUE(sys.has_value()) << sys.error().to_string();
  if (sys) sys->reset();  // drop it before the stop
  EXPECT_EQ(d.stop(), 0) << d.output();
  std::filesystem::remove_all(d.dir());
  auto bad = npo_test::run_command(std::string(NPO_EMUD) + " --topology emu:2 --socket-dir " + d.dir() +
                                   " --socket-mode 0999 2>&1");
  EXPECT_EQ(bad.status, 2) << bad.out;
  EXPECT_NE(bad.out.find("expected an octal mode"), std::string::npos) << bad.out;
  auto nogroup = npo_test::run_command(std::string(NPO_EMUD) + " --topology emu:2 --socket-dir " + d.dir() +
                                       " --socket-group no-such-group-npo 2>&1");
  EXPECT_EQ(nogroup.status, 2) << nogroup.out;
  EXPECT_NE(nogroup.out.find("no such group"), std::string::npos) << nogroup.out;
  std::filesystem::remove_all(d.dir());
  const std::string unit = slurp(NPO_EMUD_UNIT);
  EXPECT_NE(unit.find(std::string("ExecStart=") + NPO_INSTALL_BINDIR + "/npo-emud "), std::string::npos) << unit;
  EXPECT_EQ(unit.find("@CMAKE"), std::string::npos) << unit;
}

// Finding 10 as another user sees it (needs root to become nobody:nogroup; skipped otherwise):
// a daemon started without --socket-group keeps its socket directory to its own user, and the
// client is told permission_denied with the --socket-group hint, not "no npo-emud serving DIR";
// with --socket-group nogroup --socket-mode 0660 the same user connects.
TEST(EmudView, AnotherUserIsToldPermissionDeniedOrLetInByTheSocketGroup) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run a client as nobody:nogroup";
  const group* ng = ::getgrnam("nogroup");
  if (ng == nullptr) GTEST_SKIP() << "no group nogroup";
  const std::string as_nobody = "setpriv --reuid=65534 --regid=" + std::to_string(ng->gr_gid) + " --clear-groups ";
  auto probe = npo_test::run_command(as_nobody + NPO_SMI + " --help >/dev/null 2>&1");
  if (probe.status != 0) GTEST_SKIP() << "nobody cannot run " << NPO_SMI << " (setpriv missing or build dir closed)";
  {
    EmudProcess d;
    ASSERT_TRUE(d.start(NPO_EMUD, "emu:2", {"--no-bring-up"})) << d.output();
    ASSERT_EQ(::chmod(d.dir().c_str(), 0700), 0);
    auto smi = npo_test::run_command(as_nobody + NPO_SMI + " --backend " + d.uri() + " 2>&1");
    EXPECT_EQ(smi.status, 1) << smi.out;
    EXPECT_NE(smi.out.find("permission_denied"), std::string::npos) << smi.out;
    EXPECT_NE(smi.out.find("--socket-group"), std::string::npos) << smi.out;
    EXPECT_EQ(smi.out.find("no npo-emud serving"), std::string::npos) << smi.out;
    // A searchable directory, sockets from the umask (srwxr-xr-x): refused at the connect.
    ASSERT_EQ(::chmod(d.dir().c_str(), 0755), 0);
    auto smi2 = npo_test::run_command(as_nobody + NPO_SMI + " --backend " + d.uri() + " 2>&1");
    EXPECT_EQ(smi2.status, 1) << smi2.out;
    EXPECT_NE(smi2.out.find("permission_denied"), std::string::npos) << smi2.out;
    EXPECT_EQ(smi2.out.find("is npo-emud running"), std::string::npos) << smi2.out;
    EXPECT_EQ(d.stop(), 0) << d.output();
    std::filesystem::remove_all(d.dir());
  }
  EmudProcess d;
  ASSERT_TRUE(d.start(NPO_EMUD, "emu:2", {"--no-bring-up", "--socket-group", "nogroup", "--socket-mode", "0660"}))
      << d.output();
  auto smi = npo_test::run_command(as_nobody + NPO_SMI + " --backend " + d.uri() + " 2>&1");
  EXPECT_EQ(smi.status, 0) << smi.out;
  EXPECT_NE(smi.out.find("2 cards"), std::string::npos) << smi.out;
  EXPECT_EQ(d.stop(), 0) << d.output();
  std::filesystem::remove_all(d.dir());
}

}  // namespace
