// SPDX-License-Identifier: Apache-2.0
// Cross-process fabric traffic on one npo-emud (issue 13 point 6): one process per card, each
// exports a window, the handles are exchanged through the test process, every process
// remote-writes into every other's window and reads it back (data checked by the writer and,
// afterwards, by the owner through its own aperture). mesh8 with 8 processes; a generated 2D
// torus with 16, whose routes cross several hops. And a revoke in the owner while another
// process writes: no byte changes after revoke() returns.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/dma_run.hpp"
#include "common/emud_process.hpp"
#include "common/run_command.hpp"
#include "npo/hal/dma.hpp"
#include "npo/hal/memory.hpp"
#include "npo/hal/system.hpp"
#include "npo/hal/window.hpp"

namespace {

using npo::DmaAddress;
using npo::OpStatus;
using Handle = std::array<std::byte, npo::WindowHandle::kSerializedSize>;

struct Proc {
  pid_t pid = -1;
  int down = -1;  ///< parent writes
  int up = -1;    ///< parent reads
};

bool read_full(int fd, void* out, std::size_t n, int ms = 60000) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  auto* p = static_cast<char*>(out);
  std::size_t got = 0;
  while (got < n) {
    pollfd pf{fd, POLLIN, 0};
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0 || ::poll(&pf, 1, static_cast<int>(left)) <= 0) return false;
    const ssize_t r = ::read(fd, p + got, n - got);
    if (r <= 0) return false;
    got += static_cast<std::size_t>(r);
  }
  return true;
}
bool write_full(int fd, const void* in, std::size_t n) { return ::write(fd, in, n) == static_cast<ssize_t>(n); }

Proc spawn(const std::function<int(int in, int out)>& body) {
  int down[2], up[2];
  Proc p;
  if (::pipe2(down, O_CLOEXEC) != 0 || ::pipe2(up, O_CLOEXEC) != 0) return p;
  p.pid = ::fork();
  if (p.pid == 0) {
    ::close(down[1]);
    ::close(up[0]);
    const int rc = body(down[0], up[1]);
    ::_exit(rc);
  }
  ::close(down[0]);
  ::close(up[1]);
  p.down = down[1];
  p.up = up[0];
  return p;
}

/// Waits (bounded) for every child; their exit codes (-1: killed or timed out).
std::vector<int> reap(std::vector<Proc>& ps, int ms) {
  std::vector<int> rc(ps.size(), -1);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  std::size_t left = ps.size();
  while (left > 0 && std::chrono::steady_clock::now() < deadline) {
    for (std::size_t i = 0; i < ps.size(); ++i) {
      if (ps[i].pid <= 0) continue;
      int st = 0;
      if (::waitpid(ps[i].pid, &st, WNOHANG) == ps[i].pid) {
        rc[i] = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        ps[i].pid = -1;
        --left;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (auto& p : ps) {
    if (p.pid > 0) {
      ::kill(p.pid, SIGKILL);
      ::waitpid(p.pid, nullptr, 0);
      p.pid = -1;
    }
    ::close(p.down);
    ::close(p.up);
  }
  return rc;
}

std::byte pattern(unsigned writer, unsigned owner, std::size_t i) {
  return static_cast<std::byte>((writer * 31 + owner * 7 + i * 13 + (i >> 8)) & 0xff);
}

/// The whole exchange on `n` cards of the daemon at `uri`; every child's exit code.
std::vector<int> all_to_all(const std::string& uri, unsigned n, std::size_t len) {
  std::vector<Proc> ps;
  for (unsigned me = 0; me < n; ++me) {
    ps.push_back(spawn([&, me](int in, int out) -> int {
      auto sys = npo::System::open(uri + "?card=" + std::to_string(me));
      if (!sys) return 10;
      auto& dev = (*sys)->device(0);
      auto w = npo::export_window(dev, 0, n * len);  // slot j: what card j writes
      if (!w) return 11;
      const Handle mine = (*w)->handle().serialize();
      if (!write_full(out, mine.data(), mine.size())) return 12;
      std::vector<Handle> all(n);
      for (auto& h : all)
        if (!read_full(in, h.data(), h.size())) return 13;
      auto q = dev.open_queue({.engine = 1, .depth = 64});
      auto src = npo::allocate_host_memory(dev, len);
      auto back = npo::allocate_host_memory(dev, len);
      if (!q || !src || !back) return 14;
      for (unsigned j = 0; j < n; ++j) {
        if (j == me) continue;
        auto h = npo::import_window(**sys, all[j]);
        if (!h) return 15;
        for (std::size_t i = 0; i < len; ++i) (*src)->bytes()[i] = pattern(me, j, i);
        std::memset((*back)->bytes().data(), 0, len);
        if (!(*q)->enqueue_remote_write(DmaAddress::host((*src)->iova()), *h, me * len, len)) return 16;
        if (!(*q)->enqueue_remote_read(*h, me * len, DmaAddress::host((*back)->iova()), len)) return 17;
        const auto c = npo_test::run(**q, 2);
        if (c.size() != 2 || c[0].status != OpStatus::kOk || c[1].status != OpStatus::kOk) return 18;
        if (std::memcmp((*src)->bytes().data(), (*back)->bytes().data(), len) != 0) return 19;
      }
      const char done = 'w';
      if (!write_full(out, &done, 1)) return 20;
      char go = 0;
      if (!read_full(in, &go, 1) || go != 'v') return 21;
      // Everyone has written: my window holds each writer's pattern in its slot.
      auto map = npo::map_window(dev, **w);
      if (!map) return 22;
      std::vector<std::byte> seen(len);
      for (unsigned j = 0; j < n; ++j) {
        if (j == me) continue;
        if (!(*map)->read(j * len, seen)) return 23;
        for (std::size_t i = 0; i < len; ++i)
          if (seen[i] != pattern(j, me, i)) return 24;
      }
      return 0;
    }));
  }
  std::vector<Handle> hs(n);
  bool ok = true;
  for (unsigned i = 0; i < n && ok; ++i) ok = read_full(ps[i].up, hs[i].data(), hs[i].size());
  for (unsigned i = 0; i < n && ok; ++i)
    for (const auto& h : hs) ok = ok && write_full(ps[i].down, h.data(), h.size());
  for (unsigned i = 0; i < n && ok; ++i) {
    char c = 0;
    ok = read_full(ps[i].up, &c, 1, 120000) && c == 'w';
  }
  for (unsigned i = 0; i < n && ok; ++i) ok = write_full(ps[i].down, "v", 1);
  EXPECT_TRUE(ok) << "the exchange between the test and its children broke";
  return reap(ps, 120000);
}

TEST(EmudFabric, EightProcessesOnMesh8WriteAndReadEveryOthersWindow) {
  npo_test::EmudProcess d;
  ASSERT_TRUE(d.start(NPO_EMUD, "emu:mesh8?hbm=16M")) << d.output();
  const auto rc = all_to_all(d.uri(), 8, 64u << 10);
  for (unsigned i = 0; i < rc.size(); ++i) EXPECT_EQ(rc[i], 0) << "process of card " << i;
  EXPECT_EQ(d.stop(), 0);
  for (unsigned i = 0; i < 8; ++i) {
    EXPECT_NE(d.output().find("disconnect card=" + std::to_string(i) + " pid="), std::string::npos) << i;
  }
}

TEST(EmudFabric, SixteenProcessesOnATorusCrossSeveralHops) {
  char tmpl[] = "/tmp/npo-emud-torus-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string file = std::string(tmpl) + "/torus16.yaml";
  const auto gen =
      npo_test::run_command(std::string(NPO_EMU) + " topo generate torus2d --cards 16 --hbm 16M -o " + file);
  ASSERT_EQ(gen.status, 0) << gen.out;
  npo_test::EmudProcess d;
  ASSERT_TRUE(d.start(NPO_EMUD, file)) << d.output();
  EXPECT_NE(d.output().find("ready cards=16 links_up=64 links_failed=0 unreachable_pairs=0"), std::string::npos)
      << d.output();
  const auto rc = all_to_all(d.uri(), 16, 32u << 10);
  for (unsigned i = 0; i < rc.size(); ++i) EXPECT_EQ(rc[i], 0) << "process of card " << i;
  EXPECT_EQ(d.stop(), 0);
  std::filesystem::remove_all(tmpl);
}

TEST(EmudFabric, RevokeInTheOwnerWhileAnotherProcessWritesFreezesTheWindow) {
  npo_test::EmudProcess d;
  ASSERT_TRUE(d.start(NPO_EMUD, "emu:mesh8?hbm=16M")) << d.output();
  const std::string uri = d.uri();
  constexpr std::size_t kLen = 64u << 10;
  // The writer: card 0, remote writes into the window, a different byte value each round,
  // until told to stop; reports how many ops failed (after the revoke they all must).
  std::vector<Proc> ps;
  ps.push_back(spawn([&](int in, int out) -> int {
    auto sys = npo::System::open(uri + "?card=0");
    if (!sys) return 10;
    auto& dev = (*sys)->device(0);
    Handle hb{};
    if (!read_full(in, hb.data(), hb.size())) return 11;
    auto h = npo::import_window(**sys, hb);
    auto q = dev.open_queue({.engine = 1, .depth = 64});
    auto src = npo::allocate_host_memory(dev, kLen);
    if (!h || !q || !src) return 12;
    std::uint32_t failed = 0, ok = 0;
    for (unsigned round = 1;; ++round) {
      std::memset((*src)->bytes().data(), static_cast<int>(round & 0xff), kLen);
      (void)(*q)->enqueue_remote_write(DmaAddress::host((*src)->iova()), *h, 0, kLen);
      for (const auto& c : npo_test::run(**q, 1)) (c.status == OpStatus::kOk ? ok : failed)++;
      if (round == 8 && !write_full(out, "s", 1)) return 13;  // started
      pollfd pf{in, POLLIN, 0};
      if (round > 8 && ::poll(&pf, 1, 0) > 0) break;
    }
    return write_full(out, &ok, 4) && write_full(out, &failed, 4) ? 0 : 14;
  }));
  // The owner: card 1. Exports, hands the handle over, revokes while the writer runs.
  auto sys = npo::System::open(uri + "?card=1");
  ASSERT_TRUE(sys.has_value()) << sys.error().to_string();
  auto& dev = (*sys)->device(0);
  auto w = npo::export_window(dev, 0, kLen).value();
  auto map = npo::map_window(dev, *w).value();
  const Handle hb = w->handle().serialize();
  ASSERT_TRUE(write_full(ps[0].down, hb.data(), hb.size()));
  char started = 0;
  ASSERT_TRUE(read_full(ps[0].up, &started, 1));
  ASSERT_TRUE(w->revoke().has_value());
  std::vector<std::byte> at_revoke(kLen), later(kLen);
  ASSERT_TRUE(map->read(0, at_revoke).has_value());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the writer keeps trying
  ASSERT_TRUE(map->read(0, later).has_value());
  ASSERT_TRUE(write_full(ps[0].down, "q", 1));
  std::uint32_t ok = 0, failed = 0;
  ASSERT_TRUE(read_full(ps[0].up, &ok, 4));
  ASSERT_TRUE(read_full(ps[0].up, &failed, 4));
  const auto rc = reap(ps, 30000);
  EXPECT_EQ(rc[0], 0);
  EXPECT_GE(ok, 8u);
  EXPECT_GT(failed, 0u) << "writes after the revoke fail";
  EXPECT_EQ(std::memcmp(at_revoke.data(), later.data(), kLen), 0) << "no byte changed after revoke() returned";
  EXPECT_NE(at_revoke[0], std::byte{0}) << "the writer did write before the revoke";
  map.reset();
  w.reset();
  sys->reset();
  EXPECT_EQ(d.stop(), 0);
}

}  // namespace
