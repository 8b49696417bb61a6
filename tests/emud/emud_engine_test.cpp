// SPDX-License-Identifier: Apache-2.0
// npo-emud protocol 1.5 (docs/spec/emud-protocol.md §5.12): an owner runs its card's DMA engines
// in its own process over the shared engine state. These tests prove the engines run there (with
// the daemon stopped), that the daemon still sees what they do (counters, fault records), that
// the commands refuse what they must, and that an owner that dies inside a batch leaves no lock
// and no in-flight count behind.
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "common/dma_run.hpp"
#include "common/emud_process.hpp"
#include "common/emud_raw.hpp"
#include "npo/fw/emud.hpp"
#include "npo/fw/regs.hpp"
#include "npo/hal/dma.hpp"
#include "npo/hal/memory.hpp"
#include "npo/hal/system.hpp"
#include "npo/hal/window.hpp"
#include "shared_state.hpp"  // white box: the layout of the state ENGINE_SHARE hands out

namespace {

namespace emud = npo::fw::emud;
namespace regs = npo::fw::regs;
using npo::Code;
using npo::DmaAddress;
using npo::OpStatus;
using npo_test::EmudProcess;
using npo_test::Raw;
using npo_test::sock;

// Commands of protocol 1.5 (and what they need) on a raw connection.
int hello(const Raw& r, bool read_only) { return r.call(npo_test::version_msg(read_only)); }
/// DOORBELL_SHADOW with a fresh eventfd; the reply's page fd is closed.
int shadow(const Raw& r) {
  const int efd = ::eventfd(0, EFD_CLOEXEC);
  if (!r.send(npo_test::shadow_msg(), std::span(&efd, 1))) return -2;
  ::close(efd);
  auto [code, body, fd] = r.recv_fd();
  if (fd >= 0) ::close(fd);
  return code;
}
/// The reply's code, body and attached fd (the caller closes it).
using Reply = std::tuple<int, std::vector<std::byte>, int>;
Reply share(const Raw& r) {
  std::array<std::byte, emud::engine::kShareBytes> b{};
  if (!r.send(npo_test::message(emud::Command::kEngineShare, b))) return {-2, {}, -1};
  return r.recv_fd();
}
Reply engine_pages(const Raw& r) {
  std::array<std::byte, emud::engine::kShareBytes> b{};
  if (!r.send(npo_test::message(emud::Command::kEngineFd, b))) return {-2, {}, -1};
  return r.recv_fd();
}
Reply hbm(const Raw& r, std::uint32_t card) {
  std::array<std::byte, emud::engine::kHbmBytes> b{};
  emud::store<std::uint32_t>(b, emud::engine::kHbmCard, card);
  if (!r.send(npo_test::message(emud::Command::kHbmFd, b))) return {-2, {}, -1};
  return r.recv_fd();
}
/// A posted ENGINE_EVENT: true when sent.
bool event(const Raw& r, std::uint32_t kind, std::uint32_t queue, std::uint64_t value, std::uint64_t flags) {
  std::array<std::byte, emud::engine::kEventBytes> b{};
  emud::store<std::uint32_t>(b, emud::engine::kEventKind, kind);
  emud::store<std::uint32_t>(b, emud::engine::kEventQueue, queue);
  emud::store<std::uint64_t>(b, emud::engine::kEventValue, value);
  emud::store<std::uint64_t>(b, emud::engine::kEventFlags, flags);
  return r.send(npo_test::message(emud::Command::kEngineEvent, b, emud::kFlagNoReply));
}
/// A 32-bit BAR0 register; all-ones on failure.
std::uint32_t read32(const Raw& r, std::uint64_t off) {
  if (!r.send(npo_test::access_msg(emud::Command::kRegionRead, 0, off, 4))) return 0xffffffffu;
  auto [code, body] = r.recv();
  if (code != 0 || body.size() != emud::access::kBytes + 4) return 0xffffffffu;
  return emud::load<std::uint32_t>(body, emud::access::kBytes);
}

/// SIGCONT for `pid` when it goes out of scope (an assertion must not leave the daemon stopped).
struct Resume {
  pid_t pid;
  ~Resume() { ::kill(pid, SIGCONT); }
};

/// Polls `q` for `n` completions for up to `ms`; what came.
std::vector<npo::OpCompletion> poll_for(npo::DmaQueue& q, std::size_t n, int ms) {
  std::vector<npo::OpCompletion> out;
  std::array<npo::OpCompletion, 16> cs;
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (out.size() < n && std::chrono::steady_clock::now() < end) {
    const std::size_t got = q.poll(cs);
    out.insert(out.end(), cs.begin(), cs.begin() + static_cast<std::ptrdiff_t>(got));
    if (got == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return out;
}

/// Reads the daemon's output until it holds `text`, for up to `ms`. (Plain text: std::regex
/// trips GCC 12's -Wmaybe-uninitialized in the sanitizer builds.)
bool wait_output(EmudProcess& d, const std::string& text, int ms) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (d.output().find(text) == std::string::npos) {
    if (std::chrono::steady_clock::now() >= end || !d.pump(20)) return d.output().find(text) != std::string::npos;
  }
  return true;
}

// ---- Tests ------------------------------------------------------------------------------------

TEST(EmudEngine, AnOwnersDoorbellRunsItsCardsEngineInItsOwnProcessAndTheDaemonCountsIt) {
  EmudProcess d;
  ASSERT_TRUE(d.start(NPO_EMUD, "emu:mesh8")) << d.output();
  constexpr std::size_t kLen = 64u << 10;
  // Card 0 (local engines, the default) and card 1 (engine=daemon), one System each.
  auto s0 = npo::System::open(d.uri() + "?card=0");
  ASSERT_TRUE(s0.has_value()) << s0.error().to_string();
  auto s1 = npo::System::open(d.uri() + "?card=1&engine=daemon");
  ASSERT_TRUE(s1.has_value()) << s1.error().to_string();
  auto& dev0 = (*s0)->device(0);
  auto& dev1 = (*s1)->device(0);
  // Card 1 exports a window; card 0 writes into it and reads it back across the fabric.
  auto w = npo::export_window(dev1, 0, kLen);
  ASSERT_TRUE(w.has_value()) << w.error().to_string();
  auto h = npo::import_window(**s0, (*w)->handle().serialize());
  ASSERT_TRUE(h.has_value()) << h.error().to_string();
  auto q0 = dev0.open_queue({.engine = 0, .depth = 64}).value();
  auto q1 = dev1.open_queue({.engine = 0, .depth = 64}).value();
  auto src = npo::allocate_host_memory(dev0, kLen).value();
  auto back = npo::allocate_host_memory(dev0, kLen).value();
  auto mem1 = npo::allocate_host_memory(dev1, kLen).value();
  for (std::size_t i = 0; i < kLen; ++i) src->bytes()[i] = static_cast<std::byte>(i * 7 + 1);
  // One op on each queue while the daemon runs: every posted write of the queues' setup has
  // been handled (a doorbell waits for them) before the daemon stops.
  ASSERT_TRUE(q0->enqueue_fill(DmaAddress::host(back->iova()), 0, kLen));
  ASSERT_EQ(npo_test::run(*q0, 1).size(), 1u);
  // The first remote op on the window imports it (WINDOW_FD, spec §5.13): a daemon round trip
  // outside the batch; from then on the window's bytes are mapped here.
  ASSERT_TRUE(q0->enqueue_remote_write(DmaAddress::host(back->iova()), *h, 0, 4096));
  ASSERT_EQ(npo_test::run(*q0, 1).at(0).status, OpStatus::kOk);
  ASSERT_TRUE(q1->enqueue_fill(DmaAddress::host(mem1->iova()), 0, kLen));
  ASSERT_EQ(npo_test::run(*q1, 1).size(), 1u);

  ASSERT_EQ(::kill(d.pid(), SIGSTOP), 0);
  Resume resume{d.pid()};
  ASSERT_TRUE(npo_test::all_threads_stopped(d.pid()));
  // Card 0: the remote write and read, and a local copy, complete with the daemon stopped.
  ASSERT_TRUE(q0->enqueue_remote_write(DmaAddress::host(src->iova()), *h, 0, kLen));
  ASSERT_TRUE(q0->enqueue_remote_read(*h, 0, DmaAddress::host(back->iova()), kLen));
  ASSERT_TRUE(q0->submit());
  auto c = poll_for(*q0, 2, 5000);
  ASSERT_EQ(c.size(), 2u) << "card 0's engine runs in this process: nothing waits for the stopped daemon";
  EXPECT_EQ(c[0].status, OpStatus::kOk);
  EXPECT_EQ(c[1].status, OpStatus::kOk);
  EXPECT_EQ(std::memcmp(src->bytes().data(), back->bytes().data(), kLen), 0);
  // Card 1 (engine=daemon): its op waits for the daemon. Not polled while the daemon is stopped
  // (a poll that finds nothing for a while asks the card over the socket whether it is gone).
  ASSERT_TRUE(q1->enqueue_fill(DmaAddress::host(mem1->iova()), 0x0303030303030303ULL, kLen));
  ASSERT_TRUE(q1->submit());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(std::atomic_ref<std::byte>(mem1->bytes()[kLen - 1]).load(), std::byte{0})
      << "engine=daemon: the stopped daemon ran card 1's engine";
  ASSERT_EQ(::kill(d.pid(), SIGCONT), 0);
  c = poll_for(*q1, 1, 10000);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, OpStatus::kOk);
  EXPECT_EQ(mem1->bytes()[kLen - 1], std::byte{3});

  // The daemon counted card 0's ops, which ran in this process (shared DMA totals): 1 fill of
  // 64 KiB, the importing 4 KiB write, then 64 KiB each way. The disconnect line says what the owner's session moved.
  q0.reset();
  src.reset();
  back.reset();
  s0->reset();
  const std::string line = "disconnect card=0 pid=" + std::to_string(::getpid()) + " mode=owner dma_maps_dropped=";
  ASSERT_TRUE(wait_output(d, line, 10000)) << d.output();
  const std::string out = d.output();
  const std::string rest = out.substr(out.find(line), out.find('\n', out.find(line)) - out.find(line));
  EXPECT_NE(rest.find(" dma_ops=4 dma_bytes=" + std::to_string(3 * kLen + 4096)), std::string::npos) << rest;
  EXPECT_NE(out.find("card=0 pid=" + std::to_string(::getpid()) + ": the owner runs the card's DMA engines"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("card=1 pid=" + std::to_string(::getpid()) + ": the owner runs"), std::string::npos)
      << "engine=daemon asked for no shared engine state";
}

TEST(EmudEngine, EngineShareHbmFdAndEventsRefuseWhatTheyMust) {
  EmudProcess d;
  ASSERT_TRUE(d.start(NPO_EMUD, "emu:mesh8")) << d.output();
  {
    Raw ro(sock(d, 2));
    ASSERT_EQ(hello(ro, true), 0);
    EXPECT_EQ(std::get<0>(share(ro)), static_cast<int>(Code::kPermissionDenied)) << "an observer runs no engine";
  }
  Raw r(sock(d, 2));
  ASSERT_EQ(hello(r, false), 0);
  EXPECT_EQ(std::get<0>(share(r)), static_cast<int>(Code::kFailedPrecondition)) << "no shadow page yet";
  EXPECT_EQ(std::get<0>(hbm(r, 0)), static_cast<int>(Code::kFailedPrecondition)) << "HBM_FD before ENGINE_SHARE";
  EXPECT_EQ(std::get<0>(engine_pages(r)), static_cast<int>(Code::kFailedPrecondition)) << "ENGINE_FD before the share";
  ASSERT_TRUE(event(r, emud::engine::kEventError, 0, 1, 0));
  EXPECT_EQ(r.recv().first, static_cast<int>(Code::kFailedPrecondition)) << "a posted ENGINE_EVENT before the share";
  ASSERT_EQ(shadow(r), 0);
  auto [code, body, state_fd] = share(r);
  ASSERT_EQ(code, 0);
  ASSERT_GE(state_fd, 0) << "the shared state comes with the reply";
  ASSERT_EQ(body.size(), emud::engine::kShareReplyBytes);
  EXPECT_EQ(emud::load<std::uint32_t>(body, emud::engine::kReplyCards), 8u);
  EXPECT_EQ(emud::load<std::uint32_t>(body, emud::engine::kReplyCard), 2u);
  EXPECT_EQ(emud::load<std::uint32_t>(body, emud::engine::kReplyLayout), npo::emu::FabricState::kLayout);
  EXPECT_NE(emud::load<std::uint32_t>(body, emud::engine::kReplyLockTag) & 0x80000000u, 0u) << "a tag no pid is";
  struct stat st {};
  ASSERT_EQ(::fstat(state_fd, &st), 0);
  EXPECT_EQ(static_cast<std::uint64_t>(st.st_size), emud::load<std::uint64_t>(body, emud::engine::kReplyStateBytes));
  EXPECT_EQ(static_cast<std::uint64_t>(st.st_size),
            npo::emu::FabricState::kHeaderBytes + 8 * sizeof(npo::emu::CardState));
  // The state maps read-only (spec §5.13): no writable shared mapping, no upgrade of a
  // read-only one, no write(2).
  errno = 0;
  EXPECT_EQ(::mmap(nullptr, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, state_fd, 0), MAP_FAILED);
  EXPECT_EQ(errno, EPERM);
  void* ro = ::mmap(nullptr, st.st_size, PROT_READ, MAP_SHARED, state_fd, 0);
  ASSERT_NE(ro, MAP_FAILED);
  errno = 0;
  EXPECT_NE(::mprotect(ro, st.st_size, PROT_READ | PROT_WRITE), 0);
  EXPECT_EQ(errno, EACCES);
  ::munmap(ro, st.st_size);
  const std::uint32_t zero = 0;
  EXPECT_LT(::pwrite(state_fd, &zero, sizeof zero, static_cast<off_t>(npo::emu::FabricState::kHeaderBytes)), 0);
  ::close(state_fd);
  // ENGINE_FD: card 2's engine pages, exactly, read-write.
  auto [ecode, ebody, efd] = engine_pages(r);
  ASSERT_EQ(ecode, 0);
  ASSERT_GE(efd, 0);
  ASSERT_EQ(ebody.size(), emud::engine::kEngineReplyBytes);
  EXPECT_EQ(emud::load<std::uint64_t>(ebody, emud::engine::kEngineReplyOffset),
            npo::emu::FabricState::kHeaderBytes + 2 * sizeof(npo::emu::CardState) + npo::emu::kEngineOffset);
  EXPECT_EQ(emud::load<std::uint64_t>(ebody, emud::engine::kEngineReplySize), npo::emu::kEngineBytes);
  ASSERT_EQ(::fstat(efd, &st), 0);
  EXPECT_EQ(static_cast<std::uint64_t>(st.st_size), npo::emu::kEngineBytes);
  void* rw = ::mmap(nullptr, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, efd, 0);
  EXPECT_NE(rw, MAP_FAILED);
  if (rw != MAP_FAILED) ::munmap(rw, st.st_size);
  ::close(efd);
  EXPECT_EQ(std::get<0>(share(r)), static_cast<int>(Code::kAlreadyExists));
  // HBM_FD: card 8 is past mesh8; card 5's HBM is not this owner's (spec §5.13: windows only);
  // card 2's memfd holds its own HBM.
  EXPECT_EQ(std::get<0>(hbm(r, 8)), static_cast<int>(Code::kOutOfRange));
  auto [other_code, other_body, other_fd] = hbm(r, 5);
  EXPECT_EQ(other_code, static_cast<int>(Code::kPermissionDenied));
  EXPECT_LT(other_fd, 0);
  auto [hcode, hbody, hfd] = hbm(r, 2);
  ASSERT_EQ(hcode, 0);
  ASSERT_GE(hfd, 0);
  ASSERT_EQ(hbody.size(), emud::engine::kHbmReplyBytes);
  const auto hbm_bytes = emud::load<std::uint64_t>(hbody, emud::engine::kHbmReplySize);
  EXPECT_GT(hbm_bytes, 0u);
  ASSERT_EQ(::fstat(hfd, &st), 0);
  EXPECT_GE(static_cast<std::uint64_t>(st.st_size),
            emud::load<std::uint64_t>(hbody, emud::engine::kHbmReplyFdOffset) + hbm_bytes);
  ::close(hfd);
  // ENGINE_EVENT: a bad kind and a vector past 64 are refused; an IOMMU fault is recorded as the
  // card records its own (FAULT_IOVA, FAULT_INFO with the queue, ERR_STATUS.IOMMU_FAULT).
  ASSERT_TRUE(event(r, 9, 0, 0, 0));
  EXPECT_EQ(r.recv().first, static_cast<int>(Code::kInvalidArgument));
  ASSERT_TRUE(event(r, emud::engine::kEventMsix, 0, 64, 0));
  EXPECT_EQ(r.recv().first, static_cast<int>(Code::kOutOfRange));
  ASSERT_TRUE(event(r, emud::engine::kEventIommuFault, 13, 0xdead000, emud::engine::kEventWrite));
  namespace g = regs::global;
  EXPECT_NE(read32(r, g::kErrStatus) & g::kErrIommuFault.mask(), 0u);
  EXPECT_EQ(read32(r, g::kFaultIova), 0xdead000u);
  const std::uint32_t info = read32(r, g::kFaultInfo);
  EXPECT_EQ(g::kFaultInfoEngine.get(info), 13u / regs::kQueuesPerEngine);
  EXPECT_EQ(g::kFaultInfoQueue.get(info), 13u % regs::kQueuesPerEngine);
  EXPECT_EQ(g::kFaultInfoWrite.get(info), 1u);
  pollfd p{r.fd, POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 200), 0) << "a posted event that was taken sends no reply";
  // The URI option: a bad value and a contradiction are refused before anything connects;
  // doorbell=socket alone leaves the engines to the daemon.
  auto bogus = npo::System::open(d.uri() + "?card=0&engine=bogus");
  ASSERT_FALSE(bogus.has_value());
  EXPECT_EQ(bogus.error().code(), Code::kInvalidArgument);
  EXPECT_NE(bogus.error().message().find("engine=bogus is neither local nor daemon"), std::string::npos)
      << bogus.error().to_string();
  auto both = npo::System::open(d.uri() + "?card=0&engine=local&doorbell=socket");
  ASSERT_FALSE(both.has_value());
  EXPECT_EQ(both.error().code(), Code::kInvalidArgument);
  EXPECT_NE(both.error().message().find("engine=local needs doorbell=shadow"), std::string::npos)
      << both.error().to_string();
  {
    auto socket = npo::System::open(d.uri() + "?card=0&doorbell=socket");
    ASSERT_TRUE(socket.has_value()) << socket.error().to_string();
  }
  EXPECT_TRUE(wait_output(d, "disconnect card=0 pid=" + std::to_string(::getpid()) + " mode=owner", 5000));
  EXPECT_EQ(d.output().find("card=0 pid=" + std::to_string(::getpid()) + ": the owner runs"), std::string::npos)
      << "doorbell=socket: the daemon runs the engines";
}

TEST(EmudEngine, AnOwnerGoneInsideABatchLeavesNoQueueLockAndNoInflightWindowBehind) {
  EmudProcess d;
  ASSERT_TRUE(d.start(NPO_EMUD, "emu:mesh8")) << d.output();
  // Card 3's owner exports a window.
  auto s3 = npo::System::open(d.uri() + "?card=3");
  ASSERT_TRUE(s3.has_value()) << s3.error().to_string();
  auto w = npo::export_window((*s3)->device(0), 0, 1u << 20);
  ASSERT_TRUE(w.has_value()) << w.error().to_string();
  const unsigned wid = (*w)->handle().window_id;
  // A raw owner of card 0 takes the engine state, then plays engines that stopped inside a
  // batch: the locks of engine 0's queues held with its tag, a remote op of queue 5 on card 3's
  // window in flight.
  Raw observer(sock(d, 3));
  ASSERT_EQ(hello(observer, true), 0);
  namespace wr = regs::window;
  const std::uint64_t status = regs::window_reg(wid, wr::kStatus);
  {
    Raw r(sock(d, 0));
    ASSERT_EQ(hello(r, false), 0);
    ASSERT_EQ(shadow(r), 0);
    auto [code, body, state_fd] = share(r);
    ASSERT_EQ(code, 0);
    ASSERT_GE(state_fd, 0);
    const auto tag = emud::load<std::uint32_t>(body, emud::engine::kReplyLockTag);
    const auto bytes = emud::load<std::uint64_t>(body, emud::engine::kReplyStateBytes);
    void* p = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, state_fd, 0);
    ::close(state_fd);
    ASSERT_NE(p, MAP_FAILED);
    // Card 0's engine pages read-write over the read-only state (ENGINE_FD), as the library does.
    auto [ecode, ebody, efd] = engine_pages(r);
    ASSERT_EQ(ecode, 0);
    const auto eoff = emud::load<std::uint64_t>(ebody, emud::engine::kEngineReplyOffset);
    ASSERT_NE(::mmap(static_cast<std::byte*>(p) + eoff, npo::emu::kEngineBytes, PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_FIXED, efd, 0),
              MAP_FAILED);
    ::close(efd);
    auto* cards =
        reinterpret_cast<npo::emu::CardState*>(static_cast<std::byte*>(p) + npo::emu::FabricState::kHeaderBytes);
    for (unsigned q = 0; q < regs::kQueuesPerEngine; ++q) ASSERT_TRUE(cards[0].queues[q].lock.try_lock(tag)) << q;
    cards[0].queues[5].remote_window.store(((std::uint64_t{3} + 1) << 32) | wid);
    EXPECT_EQ(wr::kStatusInflight.get(read32(observer, status)), 1u) << "card 3 counts the op in flight";
    ::munmap(p, bytes);
    r.close();  // the owner is gone: the daemon frees what it held
  }
  // A new owner of card 0 drives engine 0's queues at once.
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  auto s0 = npo::System::open(d.uri() + "?card=0");
  while (!s0 && std::chrono::steady_clock::now() < end) {  // the disconnect is processed asynchronously
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    s0 = npo::System::open(d.uri() + "?card=0");
  }
  ASSERT_TRUE(s0.has_value()) << s0.error().to_string();
  EXPECT_TRUE(wait_output(
      d, "card=0 pid=" + std::to_string(::getpid()) + ": freed a queue lock the owner held when it went", 5000))
      << d.output();
  EXPECT_EQ(wr::kStatusInflight.get(read32(observer, status)), 0u) << "the dead owner's op counts no more";
  auto& dev0 = (*s0)->device(0);
  auto q = dev0.open_queue({.engine = 0, .depth = 16});
  ASSERT_TRUE(q.has_value()) << q.error().to_string();
  auto mem = npo::allocate_host_memory(dev0, 4096).value();
  ASSERT_TRUE((*q)->enqueue_fill(DmaAddress::host(mem->iova()), 0x0505050505050505ULL, 4096));
  const auto c = npo_test::run(**q, 1);
  ASSERT_EQ(c.size(), 1u) << "a queue the dead owner held runs";
  EXPECT_EQ(c[0].status, OpStatus::kOk);
  EXPECT_EQ(mem->bytes()[4095], std::byte{5});
  // Card 3's owner revokes its window: nothing is in flight any more, so it does not wait.
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE((*w)->revoke().has_value());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
}

}  // namespace
