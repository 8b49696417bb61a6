// SPDX-License-Identifier: Apache-2.0
// Process isolation on npo-emud (docs/spec/emud-protocol.md §5.13): an owner maps its own card's
// HBM, and another card's bytes only window by window (WINDOW_FD), when it holds the key, the
// generation and the window owner's partition -- checked by the daemon, not by the library.
// The client here is raw (no npo-hal library between it and the socket): what it asks for
// beyond that is refused and changes no byte. The window owners are library processes.
#include <fcntl.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "common/dma_run.hpp"
#include "common/emud_raw.hpp"
#include "npo/hal/device.hpp"
#include "npo/hal/dma.hpp"
#include "npo/hal/memory.hpp"
#include "npo/hal/system.hpp"
#include "npo/hal/window.hpp"
#include "shared_state.hpp"  // white box: the layout of the state ENGINE_SHARE hands out

namespace {

namespace emud = npo::fw::emud;
using npo::Code;
using npo_test::EmudProcess;
using npo_test::Raw;
using npo_test::sock;

using Reply = std::tuple<int, std::vector<std::byte>, int>;

Reply hbm(const Raw& r, std::uint32_t card) {
  std::array<std::byte, emud::engine::kHbmBytes> b{};
  emud::store<std::uint32_t>(b, emud::engine::kHbmCard, card);
  if (!r.send(npo_test::message(emud::Command::kHbmFd, b))) return {-2, {}, -1};
  return r.recv_fd();
}

Reply window_fd(const Raw& r, std::uint32_t card, const npo::WindowHandle& h, std::uint16_t generation,
                std::uint64_t key) {
  std::array<std::byte, emud::engine::kWindowBytes> b{};
  emud::store<std::uint32_t>(b, emud::engine::kWindowCard, card);
  emud::store<std::uint16_t>(b, emud::engine::kWindowIndex, h.window_id);
  emud::store<std::uint16_t>(b, emud::engine::kWindowGeneration, generation);
  emud::store<std::uint64_t>(b, emud::engine::kWindowKey, key);
  if (!r.send(npo_test::message(emud::Command::kWindowFd, b))) return {-2, {}, -1};
  return r.recv_fd();
}

/// An owner connection that took its engines (HBM_FD needs ENGINE_SHARE); the state fd in
/// `*state_fd` when asked for (the caller closes it), else closed.
bool owner_with_engines(const Raw& r, int* state_fd = nullptr) {
  if (r.call(npo_test::version_msg(false)) != 0) return false;
  const int efd = ::eventfd(0, EFD_CLOEXEC);
  if (!r.send(npo_test::shadow_msg(), std::span(&efd, 1))) return false;
  ::close(efd);
  auto [sc, sb, sfd] = r.recv_fd();
  if (sfd >= 0) ::close(sfd);
  std::array<std::byte, emud::engine::kShareBytes> b{};
  if (sc != 0 || !r.send(npo_test::message(emud::Command::kEngineShare, b))) return false;
  auto [ec, eb, efd2] = r.recv_fd();
  if (state_fd != nullptr) {
    *state_fd = efd2;
  } else if (efd2 >= 0) {
    ::close(efd2);
  }
  return ec == 0;
}

constexpr std::uint64_t kWin = 64 << 10;

TEST(EmudIsolation, ARawClientReachesItsOwnHbmAndTheWindowsItMayImportOnly) {
  EmudProcess d;
  // Cards 0-3 in partition 7, 4-7 in partition 9.
  ASSERT_TRUE(d.start(NPO_EMUD, "emu:mesh8", {"--partition", "0-3=7", "--partition", "4-7=9"})) << d.output();
  // The window owners: card 1 (partition 7, the raw client's) and card 5 (partition 9).
  auto sys = npo::System::open(d.uri() + "?owner=1,5");
  ASSERT_TRUE(sys.has_value()) << sys.error().to_string();
  npo::Device* c1 = nullptr;
  npo::Device* c5 = nullptr;
  for (std::size_t i = 0; i < (*sys)->device_count(); ++i) {
    auto& dev = (*sys)->device(i);
    if (dev.info().fabric_id == 2) c1 = &dev;  // card k has fabric ID k + 1
    if (dev.info().fabric_id == 6) c5 = &dev;
  }
  ASSERT_NE(c1, nullptr);
  ASSERT_NE(c5, nullptr);
  auto rw = npo::export_window(*c1, 1 << 20, kWin, {.read = true, .write = true});
  ASSERT_TRUE(rw.has_value()) << rw.error().to_string();
  auto ro = npo::export_window(*c1, 2 << 20, kWin, {.read = true, .write = false});
  ASSERT_TRUE(ro.has_value()) << ro.error().to_string();
  auto other = npo::export_window(*c5, 1 << 20, kWin);
  ASSERT_TRUE(other.has_value()) << other.error().to_string();
  auto view = npo::map_window(*c1, **rw);
  ASSERT_TRUE(view.has_value()) << view.error().to_string();
  std::ranges::fill((*view)->bytes(), std::byte{0x5a});
  const auto h = (*rw)->handle();

  Raw r(sock(d, 0));
  ASSERT_TRUE(owner_with_engines(r));
  // HBM_FD: its own card only.
  auto [own_code, own_body, own_fd] = hbm(r, 0);
  EXPECT_EQ(own_code, 0);
  if (own_fd >= 0) ::close(own_fd);
  auto [c1_code, c1_body, c1_fd] = hbm(r, 1);
  EXPECT_EQ(c1_code, static_cast<int>(Code::kPermissionDenied)) << "another card's whole HBM";
  EXPECT_LT(c1_fd, 0);
  // WINDOW_FD: the key, the generation and the partition must all be right.
  auto [k_code, k_body, k_fd] = window_fd(r, 1, h, h.generation, h.key ^ 1);
  EXPECT_EQ(k_code, static_cast<int>(Code::kPermissionDenied)) << "wrong key";
  EXPECT_LT(k_fd, 0);
  auto [g_code, g_body, g_fd] = window_fd(r, 1, h, static_cast<std::uint16_t>(h.generation + 1), h.key);
  EXPECT_EQ(g_code, static_cast<int>(Code::kFailedPrecondition)) << "another generation";
  EXPECT_LT(g_fd, 0);
  const auto oh = (*other)->handle();
  auto [p_code, p_body, p_fd] = window_fd(r, 5, oh, oh.generation, oh.key);
  EXPECT_EQ(p_code, static_cast<int>(Code::kPermissionDenied)) << "card 5 is in partition 9, the client's card in 7";
  EXPECT_LT(p_fd, 0);
  for (int i = 0; i < 20 && d.output().find("partition 7, the window's card in 9") == std::string::npos; ++i) {
    d.pump(100);
  }
  EXPECT_NE(d.output().find("partition 7, the window's card in 9"), std::string::npos) << d.output();
  // Refused requests changed nothing of the window.
  EXPECT_TRUE(std::ranges::all_of((*view)->bytes(), [](std::byte b) { return b == std::byte{0x5a}; }));

  // The right request: an fd of exactly the window's bytes, the same bytes its owner sees.
  auto [code, body, fd] = window_fd(r, 1, h, h.generation, h.key);
  ASSERT_EQ(code, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(body.size(), emud::engine::kWindowReplyBytes);
  EXPECT_EQ(emud::load<std::uint64_t>(body, emud::engine::kWindowReplySize), kWin);
  EXPECT_EQ(emud::load<std::uint64_t>(body, emud::engine::kWindowReplyOffset), 1u << 20);
  struct stat st {};
  ASSERT_EQ(::fstat(fd, &st), 0);
  EXPECT_EQ(static_cast<std::uint64_t>(st.st_size), kWin) << "the fd reaches the window and nothing beside it";
  void* big = ::mmap(nullptr, 2 * kWin, PROT_READ, MAP_SHARED, fd, 0);
  if (big != MAP_FAILED) {
    // A mapping past the fd's end exists, but touching it past kWin would SIGBUS: the bytes are not there.
    ::munmap(big, 2 * kWin);
  }
  auto* p = static_cast<std::byte*>(::mmap(nullptr, kWin, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  ::close(fd);
  ASSERT_NE(p, MAP_FAILED);
  EXPECT_EQ(p[0], std::byte{0x5a});
  EXPECT_EQ(p[kWin - 1], std::byte{0x5a});
  std::memset(p, 0xa5, kWin);
  EXPECT_EQ((*view)->bytes()[0], std::byte{0xa5}) << "the importer's bytes are the window's";
  EXPECT_EQ((*view)->bytes()[kWin - 1], std::byte{0xa5});

  // A window without remote writes goes out read-only.
  const auto rh = (*ro)->handle();
  auto [r_code, r_body, r_fd] = window_fd(r, 1, rh, rh.generation, rh.key);
  ASSERT_EQ(r_code, 0);
  ASSERT_GE(r_fd, 0);
  EXPECT_EQ(emud::load<std::uint32_t>(r_body, emud::engine::kWindowReplyFlags) & emud::engine::kWindowWritable, 0u);
  errno = 0;
  EXPECT_EQ(::mmap(nullptr, kWin, PROT_READ | PROT_WRITE, MAP_SHARED, r_fd, 0), MAP_FAILED);
  EXPECT_EQ(errno, EACCES);
  void* rp = ::mmap(nullptr, kWin, PROT_READ, MAP_SHARED, r_fd, 0);
  EXPECT_NE(rp, MAP_FAILED);
  if (rp != MAP_FAILED) ::munmap(rp, kWin);
  ::close(r_fd);

  // Revocation: the owner's bytes leave the importer's mapping; what the importer writes after
  // reaches no card, and the window cannot be imported again.
  ASSERT_TRUE((*rw)->revoke().has_value());
  view->reset();
  std::memset(p, 0x77, kWin);
  auto [a_code, a_body, a_fd] = window_fd(r, 1, h, h.generation, h.key);
  EXPECT_EQ(a_code, static_cast<int>(Code::kNotFound)) << "revoked";
  EXPECT_LT(a_fd, 0);
  // Card 1's HBM at the old window's range still holds what it held at the revocation.
  auto again = npo::export_window(*c1, 1 << 20, kWin);
  ASSERT_TRUE(again.has_value()) << again.error().to_string();
  auto again_view = npo::map_window(*c1, **again);
  ASSERT_TRUE(again_view.has_value()) << again_view.error().to_string();
  EXPECT_TRUE(std::ranges::all_of((*again_view)->bytes(), [](std::byte b) { return b == std::byte{0xa5}; }))
      << "a write through a revoked window's mapping changed card 1's HBM";
  ::munmap(p, kWin);
}

TEST(EmudIsolation, AnOwnersEnginesImportWindowsAsTheirOpsNeedThem) {
  // The library path: card 0's engines (run in this process, spec §5.12) reach card 1's window
  // after the daemon admitted its import, and card 5's (another partition) never.
  EmudProcess d;
  ASSERT_TRUE(d.start(NPO_EMUD, "emu:mesh8", {"--partition", "0-3=7", "--partition", "4-7=9"})) << d.output();
  auto sys = npo::System::open(d.uri() + "?owner=0,1,5");
  ASSERT_TRUE(sys.has_value()) << sys.error().to_string();
  std::array<npo::Device*, 8> dev{};
  for (std::size_t i = 0; i < (*sys)->device_count(); ++i)
    dev.at((*sys)->device(i).info().fabric_id - 1) = &(*sys)->device(i);
  ASSERT_TRUE(dev[0] && dev[1] && dev[5]);
  EXPECT_EQ(dev[0]->partition().value(), 7u);
  EXPECT_EQ(dev[5]->partition().value(), 9u);
  auto q = dev[0]->open_queue({.depth = 32}).value();
  auto host = npo::allocate_host_memory(*dev[0], kWin).value();
  std::memset(host->bytes().data(), 0x3c, kWin);
  auto w1 = npo::export_window(*dev[1], 0, kWin).value();
  auto w5 = npo::export_window(*dev[5], 0, kWin).value();
  auto m1 = npo::map_window(*dev[1], *w1).value();
  auto m5 = npo::map_window(*dev[5], *w5).value();
  std::memset(m1->bytes().data(), 0, kWin);
  std::memset(m5->bytes().data(), 0, kWin);
  ASSERT_TRUE(q->enqueue_remote_write(npo::DmaAddress::host(host->iova()), w5->handle(), 0, 4096));
  ASSERT_TRUE(q->enqueue_remote_write(npo::DmaAddress::host(host->iova()), w1->handle(), 0, kWin));
  ASSERT_TRUE(q->enqueue_remote_read(w1->handle(), 4096, npo::DmaAddress::host(host->iova() + 8192), 4096));
  auto c = npo_test::run(*q, 3);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].status, npo::OpStatus::kPartitionDenied);
  EXPECT_EQ(c[1].status, npo::OpStatus::kOk);
  EXPECT_EQ(c[2].status, npo::OpStatus::kOk);
  EXPECT_TRUE(std::ranges::all_of(m5->bytes(), [](std::byte b) { return b == std::byte{0}; }));
  EXPECT_TRUE(std::ranges::all_of(m1->bytes(), [](std::byte b) { return b == std::byte{0x3c}; }));
  // The daemon logged the one import it admitted (the refused op never asked: the card's own
  // partition check stopped it first).
  const std::string imported =
      "card=0 pid=" + std::to_string(::getpid()) + ": imports card 1 window " + std::to_string(w1->handle().window_id);
  for (int i = 0; i < 20 && d.output().find(imported) == std::string::npos; ++i) d.pump(100);
  EXPECT_NE(d.output().find(imported), std::string::npos) << d.output();
  EXPECT_EQ(d.output().find("imports card 5"), std::string::npos) << d.output();
  // Revoked: the next op fails as revoked, and a new window on the same slot is imported anew.
  ASSERT_TRUE(w1->revoke().has_value());
  ASSERT_TRUE(q->enqueue_remote_write(npo::DmaAddress::host(host->iova()), w1->handle(), 0, 4096));
  EXPECT_EQ(npo_test::run(*q, 1).at(0).status, npo::OpStatus::kWindowRevoked);
  m1.reset();
  w1.reset();
  auto w1b = npo::export_window(*dev[1], 8 * kWin, kWin).value();
  ASSERT_TRUE(q->enqueue_remote_write(npo::DmaAddress::host(host->iova()), w1b->handle(), 0, 4096));
  EXPECT_EQ(npo_test::run(*q, 1).at(0).status, npo::OpStatus::kOk);
  auto m1b = npo::map_window(*dev[1], *w1b).value();
  EXPECT_EQ(m1b->bytes()[0], std::byte{0x3c});
}

/// Runs `poke` in a forked child: true when the child was killed by SIGSEGV (the write faulted).
template <class F>
bool faults(F poke) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::signal(SIGSEGV, SIG_DFL);
    poke();
    ::_exit(0);
  }
  int st = 0;
  return pid > 0 && ::waitpid(pid, &st, 0) == pid && WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV;
}

TEST(EmudIsolation, ARawClientWritesTheEngineStateOfItsOwnCardOnly) {
  // Engine state (spec §5.13): an owner maps the whole state read-only and its own card's engine
  // pages (queue registers, engine counters) read-write; routes, window tables, link words,
  // flags and GLOBAL.PARTITION -- its own card's too -- only npo-emud writes.
  EmudProcess d;
  ASSERT_TRUE(d.start(NPO_EMUD, "emu:mesh8", {"--partition", "0-3=7", "--partition", "4-7=9"})) << d.output();
  auto sys = npo::System::open(d.uri() + "?owner=1");
  ASSERT_TRUE(sys.has_value()) << sys.error().to_string();
  npo::Device* owned = nullptr;
  for (std::size_t i = 0; i < (*sys)->device_count(); ++i) {
    if ((*sys)->device(i).info().fabric_id == 2) owned = &(*sys)->device(i);  // card 1
  }
  ASSERT_NE(owned, nullptr);
  auto& c1 = *owned;
  auto w = npo::export_window(c1, 1 << 20, kWin);
  ASSERT_TRUE(w.has_value()) << w.error().to_string();
  const unsigned wid = (*w)->handle().window_id;

  Raw r(sock(d, 0));
  int state_fd = -1;
  ASSERT_TRUE(owner_with_engines(r, &state_fd));
  ASSERT_GE(state_fd, 0);
  struct stat st {};
  ASSERT_EQ(::fstat(state_fd, &st), 0);
  const auto bytes = static_cast<std::size_t>(st.st_size);
  errno = 0;
  EXPECT_EQ(::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, state_fd, 0), MAP_FAILED);
  EXPECT_EQ(errno, EPERM) << "the state maps read-only";
  const std::uint32_t ones = 0xffffffffu;
  EXPECT_LT(::pwrite(state_fd, &ones, 4, static_cast<off_t>(npo::emu::FabricState::kHeaderBytes)), 0);
  void* p = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, state_fd, 0);
  ::close(state_fd);
  ASSERT_NE(p, MAP_FAILED);
  auto* cards =
      reinterpret_cast<npo::emu::CardState*>(static_cast<std::byte*>(p) + npo::emu::FabricState::kHeaderBytes);
  errno = 0;
  EXPECT_NE(::mprotect(p, bytes, PROT_READ | PROT_WRITE), 0);
  EXPECT_EQ(errno, EACCES) << "a read-only mapping cannot be made writable";
  // What the client sees is the daemon's: the partitions, card 1's open window.
  EXPECT_EQ(cards[0].partition.load(), 7u);
  EXPECT_EQ(cards[5].partition.load(), 9u);
  const std::uint32_t ctrl = cards[1].windows[wid].ctrl.load();
  const std::uint64_t key = cards[1].windows[wid].key.load();
  EXPECT_NE(npo::fw::regs::window::kCtrlValid.get(ctrl), 0u) << "card 1's window is open";
  const std::uint32_t route = cards[1].routes[1].load();
  // Every write beside its own engine pages faults and changes nothing: its own partition word,
  // card 1's window entry, route table and link word.
  EXPECT_TRUE(faults([&] { cards[0].partition.store(9); }));
  EXPECT_TRUE(faults([&] { cards[1].windows[wid].key.store(key ^ 1); }));
  EXPECT_TRUE(faults([&] { cards[1].routes[1].store(~route); }));
  EXPECT_TRUE(faults([&] { cards[1].link[0].store(0); }));
  EXPECT_TRUE(faults([&] { cards[0].flags.store(0); }));
  EXPECT_EQ(cards[0].partition.load(), 7u);
  EXPECT_EQ(cards[1].windows[wid].key.load(), key);
  EXPECT_EQ(cards[1].windows[wid].ctrl.load(), ctrl);
  EXPECT_EQ(cards[1].routes[1].load(), route);
  // ENGINE_FD: its own card's engine pages, exactly; nothing of another card.
  std::array<std::byte, emud::engine::kShareBytes> b{};
  ASSERT_TRUE(r.send(npo_test::message(emud::Command::kEngineFd, b)));
  auto [code, body, efd] = r.recv_fd();
  ASSERT_EQ(code, 0);
  ASSERT_GE(efd, 0);
  ASSERT_EQ(::fstat(efd, &st), 0);
  EXPECT_EQ(static_cast<std::uint64_t>(st.st_size), npo::emu::kEngineBytes);
  EXPECT_EQ(emud::load<std::uint64_t>(body, emud::engine::kEngineReplyOffset),
            npo::emu::FabricState::kHeaderBytes + npo::emu::kEngineOffset);
  ::close(efd);
  ::munmap(p, bytes);
  // Card 1's window still works for its owner.
  auto view = npo::map_window(c1, **w);
  ASSERT_TRUE(view.has_value()) << view.error().to_string();
}

}  // namespace
