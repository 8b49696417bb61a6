// SPDX-License-Identifier: Apache-2.0
// npo-emud and emu-remote (DESIGN.md "One supernode, many processes"): the daemon's life
// cycle, one owner per card, read-only attach, cross-process windows, crafted messages, a
// dead daemon and a client killed mid-DMA. Every test starts its own daemon (EmudProcess) and
// forks its client processes; every wait is bounded.
#include "npo/fw/emud.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/dma_run.hpp"
#include "common/emud_process.hpp"
#include "common/emud_raw.hpp"
#include "common/run_command.hpp"
#include "npo/fw/dma.hpp"
#include "npo/fw/mailbox.hpp"
#include "npo/fw/pci.hpp"
#include "npo/fw/regs.hpp"
#include "npo/hal/backend/host_memory.hpp"
#include "npo/hal/backend/registry.hpp"
#include "npo/hal/dma.hpp"
#include "npo/hal/memory.hpp"
#include "npo/hal/port.hpp"
#include "npo/hal/system.hpp"
#include "npo/hal/transceiver.hpp"
#include "npo/hal/window.hpp"

namespace {

namespace emud = npo::fw::emud;
using npo::Code;
using npo::DmaAddress;
using npo::OpStatus;
using npo_test::access_msg;
using npo_test::dma_map_msg;
using npo_test::EmudProcess;
using npo_test::message;
using npo_test::Raw;
using npo_test::shadow_msg;
using npo_test::sock;
using npo_test::version_msg;

// ---- Child processes ------------------------------------------------------------------------

/// A forked child running `body`; its exit status is body's return value.
struct Child {
  pid_t pid = -1;
  int to_child = -1;    ///< parent writes
  int from_child = -1;  ///< parent reads
  ~Child() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    if (to_child >= 0) ::close(to_child);
    if (from_child >= 0) ::close(from_child);
  }
  /// Waits up to `ms` for the child to exit; its exit code, or -1.
  int wait(int ms) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (std::chrono::steady_clock::now() < deadline) {
      int st = 0;
      if (::waitpid(pid, &st, WNOHANG) == pid) {
        pid = -1;
        return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return -1;
  }
};

/// Reads exactly `out.size()` bytes within `ms`. False on EOF or timeout.
bool read_full(int fd, std::span<std::byte> out, int ms = 20000) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  std::size_t got = 0;
  while (got < out.size()) {
    pollfd p{fd, POLLIN, 0};
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
    const ssize_t n = ::read(fd, out.data() + got, out.size() - got);
    if (n <= 0) return false;
    got += static_cast<std::size_t>(n);
  }
  return true;
}
bool write_full(int fd, std::span<const std::byte> in) {
  return ::write(fd, in.data(), in.size()) == static_cast<ssize_t>(in.size());
}
bool send_byte(int fd, char c) { return ::write(fd, &c, 1) == 1; }
char recv_byte(int fd, int ms = 20000) {
  std::array<std::byte, 1> b{};
  return read_full(fd, b, ms) ? static_cast<char>(b[0]) : '\0';
}

std::unique_ptr<Child> fork_child(const std::function<int(int in, int out)>& body) {
  int down[2], up[2];
  if (::pipe2(down, O_CLOEXEC) != 0 || ::pipe2(up, O_CLOEXEC) != 0) return nullptr;
  auto c = std::make_unique<Child>();
  c->pid = ::fork();
  if (c->pid == 0) {
    ::close(down[1]);
    ::close(up[0]);
    const int rc = body(down[0], up[1]);
    std::fflush(nullptr);
    ::_exit(rc);
  }
  ::close(down[0]);
  ::close(up[1]);
  c->to_child = down[1];
  c->from_child = up[0];
  return c;
}

std::string emud_path() { return NPO_EMUD; }

/// The phase bit of completion `i` in a completion ring at `cq` (dma.md §3.3), read as the host
/// polls it.
unsigned cq_phase(const std::byte* cq, unsigned i) {
  namespace cpl = npo::fw::dma::cpl;
  return std::atomic_ref<std::uint16_t>(
             *reinterpret_cast<std::uint16_t*>(const_cast<std::byte*>(cq) + i * cpl::kSize + cpl::kFlags))
             .load(std::memory_order_acquire) &
         cpl::kPhase;
}

// ---- Tests ------------------------------------------------------------------------------------

TEST(Emud, ReadyLineShutdownAndStaleDirectory) {
  EmudProcess d;
  ASSERT_TRUE(d.start(emud_path(), "emu:mesh8")) << d.output();
  EXPECT_NE(d.output().find("ready cards=8 links_up=56 links_failed=0 unreachable_pairs=0"), std::string::npos)
      << d.output();
  for (unsigned k = 0; k < 8; ++k) EXPECT_TRUE(std::filesystem::exists(sock(d, k))) << k;
  // A second daemon on the same directory is refused and names the first one's pid.
  EmudProcess second;
  EXPECT_FALSE(second.start_in(emud_path(), "emu:2", d.dir(), {"--no-bring-up"}, 10000));
  EXPECT_NE(second.output().find("served by another npo-emud (pid " + std::to_string(d.pid()) + ")"), std::string::npos)
      << second.output();
  // Killed: the sockets stay behind; a new daemon reuses the directory.
  const std::string dir = d.dir();
  d.kill();
  EXPECT_TRUE(std::filesystem::exists(dir + "/card-0.sock"));
  EmudProcess again;
  ASSERT_TRUE(again.start_in(emud_path(), "emu:2", dir, {"--no-bring-up"})) << again.output();
  EXPECT_NE(again.output().find("reused stale socket directory"), std::string::npos) << again.output();
  EXPECT_NE(again.output().find("ready cards=2"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir + "/card-7.sock")) << "stale sockets of the old daemon are removed";
  // SIGTERM: clean exit, sockets and lock removed.
  EXPECT_EQ(again.stop(), 0) << again.output();
  EXPECT_NE(again.output().find("SIGTERM received"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir + "/card-0.sock"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/npo-emud.lock"));
  std::filesystem::remove_all(dir);
}

TEST(Emud, OneOwnerPerCardNamesTheHolderAndReadOnlyAttachWatches) {
  EmudProcess d;
  ASSERT_TRUE(d.start(emud_path(), "emu:2", {"--no-bring-up"})) << d.output();
  const std::string uri = d.uri();
  auto holder = fork_child([&](int in, int out) {
    auto sys = npo::System::open(uri + "?card=0");
    if (!sys) return 2;
    send_byte(out, 'o');
    (void)recv_byte(in, 30000);
    return 0;
  });
  ASSERT_EQ(recv_byte(holder->from_child), 'o');
  auto again = npo::System::open(uri + "?card=0");
  ASSERT_FALSE(again.has_value());
  EXPECT_EQ(again.error().code(), Code::kUnavailable);
  EXPECT_NE(again.error().message().find("open by pid " + std::to_string(holder->pid)), std::string::npos)
      << again.error().to_string();
  // Card 1 is free.
  auto other = npo::System::open(uri + "?card=1");
  ASSERT_TRUE(other.has_value()) << other.error().to_string();
  EXPECT_EQ((*other)->device_count(), 1u);

  // Read-only attach to the held card: config space and BAR0 read, nothing else.
  auto be = npo::backend::builtin_registry().open(uri + "?card=0&mode=ro");
  ASSERT_TRUE(be.has_value()) << be.error().to_string();
  auto fns = (*be)->enumerate();
  ASSERT_TRUE(fns.has_value() && fns->size() == 1);
  auto dev = (*be)->open(fns->front().address);
  ASSERT_TRUE(dev.has_value()) << dev.error().to_string();
  std::array<std::byte, 4> id{};
  ASSERT_TRUE((*dev)->config_read(0, id).has_value());
  EXPECT_EQ(emud::load<std::uint16_t>(id, 0), npo::fw::pci::kVendorId);
  auto bar0 = (*dev)->mmio(0);
  ASSERT_TRUE(bar0.has_value());
  EXPECT_NE((*bar0)->read32(0), 0xffffffffu) << "BAR0 magic reads through a read-only attach";
  EXPECT_EQ((*dev)->config_write(4, id).error().code(), Code::kPermissionDenied);
  EXPECT_EQ((*dev)->reset().error().code(), Code::kPermissionDenied);
  dev->reset();

  send_byte(holder->to_child, 'q');
  EXPECT_EQ(holder->wait(10000), 0);
  // The holder is gone: the card opens at once.
  auto now = npo::System::open(uri + "?card=0");
  EXPECT_TRUE(now.has_value()) << now.error().to_string();
  EXPECT_EQ(d.stop(), 0);
  EXPECT_NE(d.output().find("mode=read-only"), std::string::npos);
  EXPECT_NE(d.output().find("connect card=0 pid=" + std::to_string(::getpid()) + " mode=owner"), std::string::npos)
      << d.output();
}

TEST(Emud, TwoProcessesRemoteWriteAndReadThroughAWindow) {
  EmudProcess d;
  ASSERT_TRUE(d.start(emud_path(), "emu:mesh8")) << d.output();
  const std::string uri = d.uri();
  constexpr std::size_t kLen = 256u << 10;
  // The owner: card 3 exports a window, sends its handle, then checks its HBM holds the bytes.
  auto owner = fork_child([&](int in, int out) {
    auto sys = npo::System::open(uri + "?card=3");
    if (!sys) return 2;
    auto w = npo::export_window((*sys)->device(0), 0, kLen);
    if (!w) return 3;
    const auto h = (*w)->handle().serialize();
    if (!write_full(out, h)) return 4;
    std::vector<std::byte> expect(kLen);
    if (!read_full(in, expect, 60000)) return 5;
    auto map = npo::map_window((*sys)->device(0), **w);
    if (!map) return 6;
    std::vector<std::byte> seen(kLen);
    if (!(*map)->read(0, seen)) return 7;
    return std::memcmp(seen.data(), expect.data(), kLen) == 0 ? 0 : 8;
  });
  std::array<std::byte, npo::WindowHandle::kSerializedSize> hb{};
  ASSERT_TRUE(read_full(owner->from_child, hb));
  auto sys = npo::System::open(uri + "?card=0");
  ASSERT_TRUE(sys.has_value()) << sys.error().to_string();
  ASSERT_EQ((*sys)->device_count(), 1u);
  auto h = npo::import_window(**sys, hb);
  ASSERT_TRUE(h.has_value()) << "owner card 3 is on the fabric, opened by another process: " << h.error().to_string();
  auto& dev = (*sys)->device(0);
  auto q = dev.open_queue({.engine = 1, .depth = 64});
  ASSERT_TRUE(q.has_value()) << q.error().to_string();
  auto src = npo::allocate_host_memory(dev, kLen).value();
  auto back = npo::allocate_host_memory(dev, kLen).value();
  std::mt19937 rng(13);
  for (auto& b : src->bytes()) b = static_cast<std::byte>(rng());
  ASSERT_TRUE((*q)->enqueue_remote_write(DmaAddress::host(src->iova()), *h, 0, kLen));
  ASSERT_TRUE((*q)->enqueue_remote_read(*h, 0, DmaAddress::host(back->iova()), kLen));
  const auto c = npo_test::run(**q, 2);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].status, OpStatus::kOk);
  EXPECT_EQ(c[1].status, OpStatus::kOk);
  EXPECT_EQ(std::memcmp(src->bytes().data(), back->bytes().data(), kLen), 0);
  ASSERT_TRUE(write_full(owner->to_child, src->bytes()));
  EXPECT_EQ(owner->wait(30000), 0) << "the owner's HBM holds what the other process wrote";
}

TEST(Emud, CraftedMessagesStayInsideTheClientsMemoryAndCard) {
  EmudProcess d;
  ASSERT_TRUE(d.start(emud_path(), "emu:2", {"--no-bring-up"})) << d.output();
  Raw r(sock(d, 0));
  ASSERT_GE(r.fd, 0);
  const int inval = static_cast<int>(Code::kInvalidArgument);
  // Nothing before VERSION.
  EXPECT_EQ(r.call(access_msg(emud::Command::kRegionRead, emud::kRegionConfig, 0, 4)),
            static_cast<int>(Code::kFailedPrecondition));
  // Malformed: short, size field lying, unknown command, reply flag, bad body size, stray fd.
  std::array<std::byte, 8> shortm{};
  EXPECT_EQ(r.call(shortm), inval);
  auto lying = version_msg(false);
  emud::store<std::uint32_t>(lying, emud::hdr::kSize, 999);
  EXPECT_EQ(r.call(lying), inval);
  EXPECT_EQ(r.call(message(static_cast<emud::Command>(77), {})), inval);
  EXPECT_EQ(r.call(message(emud::Command::kDeviceReset, {}, emud::kTypeReply)), inval);
  EXPECT_EQ(r.call(message(emud::Command::kDeviceGetInfo, std::array<std::byte, 3>{})), inval);
  const int efd = ::memfd_create("x", MFD_CLOEXEC);
  EXPECT_EQ(r.call(message(emud::Command::kDeviceGetInfo, {}), std::span(&efd, 1)), inval);
  ::close(efd);
  // Attach as owner; the connection survived every bad message.
  ASSERT_EQ(r.call(version_msg(false)), 0);
  EXPECT_EQ(r.call(version_msg(false)), static_cast<int>(Code::kFailedPrecondition)) << "VERSION twice";
  // Accesses outside the regions: config past 4 KiB fails, BAR0 past its end reads all-ones.
  EXPECT_EQ(r.call(access_msg(emud::Command::kRegionRead, emud::kRegionConfig, 4000, 200)),
            static_cast<int>(Code::kOutOfRange));
  EXPECT_EQ(r.call(access_msg(emud::Command::kRegionRead, emud::kRegionConfig, ~0ULL - 2, 4)),
            static_cast<int>(Code::kOutOfRange));
  ASSERT_TRUE(r.send(access_msg(emud::Command::kRegionRead, 0, 1ULL << 40, 8)));
  auto [code, body] = r.recv();
  ASSERT_EQ(code, 0);
  ASSERT_EQ(body.size(), emud::access::kBytes + 8);
  EXPECT_EQ(emud::load<std::uint64_t>(body, emud::access::kBytes), ~0ULL);
  EXPECT_EQ(r.call(access_msg(emud::Command::kRegionRead, 0, 0, 3)), inval) << "BAR accesses are 4 or 8 bytes";
  EXPECT_EQ(r.call(access_msg(emud::Command::kRegionRead, 6, 0, 4)), inval);
  // DMA_MAP: the daemon maps only what the fd holds, and seals it so it cannot shrink later.
  const int mfd = ::memfd_create("crafted", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_EQ(::ftruncate(mfd, 8192), 0);
  EXPECT_EQ(r.call(dma_map_msg(0x100000, 16384, 0), std::span(&mfd, 1)), static_cast<int>(Code::kOutOfRange));
  EXPECT_EQ(r.call(dma_map_msg(0x100000, 4096, 8192), std::span(&mfd, 1)), static_cast<int>(Code::kOutOfRange));
  EXPECT_EQ(r.call(dma_map_msg(0x100000, 4096, 1ULL << 46), std::span(&mfd, 1)), static_cast<int>(Code::kOutOfRange));
  EXPECT_EQ(r.call(dma_map_msg(0x100000, 4096, 0)), inval) << "no fd attached";
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  EXPECT_EQ(r.call(dma_map_msg(0x100000, 4096, 0), std::span(&pipefd[0], 1)), inval) << "not a memfd";
  ::close(pipefd[0]);
  ::close(pipefd[1]);
  const int unsealable = ::memfd_create("nosealing", MFD_CLOEXEC);
  ASSERT_EQ(::ftruncate(unsealable, 4096), 0);
  EXPECT_EQ(r.call(dma_map_msg(0x100000, 4096, 0), std::span(&unsealable, 1)), inval);
  ::close(unsealable);
  ASSERT_EQ(r.call(dma_map_msg(0x100000, 8192, 0), std::span(&mfd, 1)), 0);
  EXPECT_NE(::ftruncate(mfd, 4096), 0) << "a mapped memfd is sealed against shrinking (no SIGBUS in the daemon)";
  EXPECT_EQ(r.call(dma_map_msg(0x101000, 4096, 0), std::span(&mfd, 1)), static_cast<int>(Code::kAlreadyExists));
  std::array<std::byte, emud::dma_unmap::kBytes> um{};
  emud::store<std::uint64_t>(um, emud::dma_unmap::kIova, 0x100000);
  emud::store<std::uint64_t>(um, emud::dma_unmap::kSize, 4096);
  EXPECT_EQ(r.call(message(emud::Command::kDmaUnmap, um)), static_cast<int>(Code::kNotFound)) << "exact size only";
  emud::store<std::uint64_t>(um, emud::dma_unmap::kSize, 8192);
  EXPECT_EQ(r.call(message(emud::Command::kDmaUnmap, um)), 0);
  ::close(mfd);
  // SET_IRQS whose mask promises more fds than attached.
  std::array<std::byte, emud::irqs::kBytes> irq{};
  emud::store<std::uint32_t>(irq, emud::irqs::kCount, 2);
  emud::store<std::uint64_t>(irq, emud::irqs::kFdMask, 3);
  EXPECT_EQ(r.call(message(emud::Command::kSetIrqs, irq)), inval);

  // Another card: held by nobody, reached only through its own socket; read-only attach may
  // not write, map or reset.
  Raw ro(sock(d, 1));
  ASSERT_EQ(ro.call(version_msg(true)), 0);
  const int denied = static_cast<int>(Code::kPermissionDenied);
  EXPECT_EQ(ro.call(access_msg(emud::Command::kRegionWrite, emud::kRegionConfig, 4, 2, 0)), denied);
  EXPECT_EQ(ro.call(access_msg(emud::Command::kRegionWrite, 0, 0x10, 4, 1)), denied);
  EXPECT_EQ(ro.call(message(emud::Command::kDeviceReset, {})), denied);
  const int mfd2 = ::memfd_create("ro", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_EQ(::ftruncate(mfd2, 4096), 0);
  EXPECT_EQ(ro.call(dma_map_msg(0x100000, 4096, 0), std::span(&mfd2, 1)), denied);
  ::close(mfd2);
  // Card 0 is owned by `r`: a second owner is refused and stays unattached.
  Raw thief(sock(d, 0));
  const auto theirs = thief.call(version_msg(false));
  EXPECT_EQ(theirs, static_cast<int>(Code::kAlreadyExists)) << "same pid: already open by this process";
  EXPECT_EQ(thief.call(access_msg(emud::Command::kRegionWrite, 0, 0x10, 4, 1)),
            static_cast<int>(Code::kFailedPrecondition));
  // The HBM aperture fd handed to card 1's owner holds card 1's HBM and nothing else.
  {
    auto be = npo::backend::builtin_registry().open(d.uri() + "?card=1");
    ASSERT_TRUE(be.has_value());
    auto fns = (*be)->enumerate();
    ASSERT_TRUE(fns.has_value() && fns->size() == 1);
    auto dev = (*be)->open(fns->front().address);
    ASSERT_TRUE(dev.has_value()) << dev.error().to_string();
    auto ap = (*dev)->aperture_fd(2);
    ASSERT_TRUE(ap.has_value()) << ap.error().to_string();
    struct stat st {};
    ASSERT_EQ(::fstat(ap->fd, &st), 0);
    EXPECT_EQ(ap->offset, 0u);
    EXPECT_EQ(static_cast<std::uint64_t>(st.st_size), ap->size) << "one card's HBM per fd";
    EXPECT_EQ(ap->size, 64u << 20);
  }
  EXPECT_EQ(d.stop(), 0);
}

// Shadow doorbells (protocol §5.11): the daemon hands the owner a sealed page for its queues'
// SQ_TAIL and CQ_HEAD and takes an eventfd to be rung with; a value written there and rung
// reaches the card with no message, a message never overtakes one written before it, and a
// queue enabled or reset starts its shadow at 0 again.
TEST(Emud, ShadowDoorbellsReachTheCardThroughThePageInOrderWithTheSocket) {
  namespace qr = npo::fw::regs::queue;
  EmudProcess d;
  ASSERT_TRUE(d.start(emud_path(), "emu:2", {"--no-bring-up"})) << d.output();
  Raw r(sock(d, 0));
  ASSERT_GE(r.fd, 0);
  ASSERT_EQ(r.call(version_msg(false)), 0);
  const int inval = static_cast<int>(Code::kInvalidArgument);
  EXPECT_EQ(r.call(shadow_msg()), inval) << "no eventfd attached";
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  EXPECT_EQ(r.call(shadow_msg(), std::span(&pipefd[0], 1)), inval) << "a pipe is not an eventfd";
  ::close(pipefd[0]);
  ::close(pipefd[1]);
  const int sem = ::eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
  EXPECT_EQ(r.call(shadow_msg(), std::span(&sem, 1)), inval) << "a semaphore eventfd stays readable after a read";
  ::close(sem);
  const int efd = ::eventfd(0, EFD_CLOEXEC);
  ASSERT_GE(efd, 0);
  EXPECT_EQ(r.call(shadow_msg(1), std::span(&efd, 1)), inval) << "flags must be 0";
  ASSERT_TRUE(r.send(shadow_msg(), std::span(&efd, 1)));
  auto [code, body, page_fd] = r.recv_fd();
  ASSERT_EQ(code, 0);
  ASSERT_EQ(body.size(), emud::shadow::kBytes);
  EXPECT_EQ(emud::load<std::uint32_t>(body, emud::shadow::kFlags), npo::fw::regs::kNumQueues) << "queues covered";
  EXPECT_EQ(emud::load<std::uint32_t>(body, emud::shadow::kReserved), emud::shadow::kStride);
  ASSERT_GE(page_fd, 0);
  struct stat st {};
  ASSERT_EQ(::fstat(page_fd, &st), 0);
  EXPECT_EQ(static_cast<std::size_t>(st.st_size), emud::shadow::kPageBytes);
  const int seals = ::fcntl(page_fd, F_GET_SEALS);
  EXPECT_EQ(seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  EXPECT_NE(::ftruncate(page_fd, 0), 0) << "the client cannot shrink the page under the daemon";
  void* pm = ::mmap(nullptr, emud::shadow::kPageBytes, PROT_READ | PROT_WRITE, MAP_SHARED, page_fd, 0);
  ASSERT_NE(pm, MAP_FAILED);
  ::close(page_fd);
  auto* page = static_cast<std::byte*>(pm);
  auto word = [&](std::size_t off) {
    return std::atomic_ref<std::uint32_t>(*reinterpret_cast<std::uint32_t*>(page + off));
  };
  EXPECT_EQ(r.call(shadow_msg(), std::span(&efd, 1)), static_cast<int>(Code::kAlreadyExists));
  // The shadowed registers are written through the page only.
  const auto sq_tail0 = npo::fw::regs::queue_reg(0, qr::kSqTail);
  EXPECT_EQ(r.call(access_msg(emud::Command::kRegionWrite, 0, sq_tail0, 4, 1)),
            static_cast<int>(Code::kFailedPrecondition));
  EXPECT_EQ(r.call(access_msg(emud::Command::kRegionWrite, 0, sq_tail0 - 4, 8, 1ULL << 32)),
            static_cast<int>(Code::kFailedPrecondition))
      << "an 8-byte write whose upper half is SQ_TAIL";
  // Queue 0 with a ring of 4 NOP descriptors in client memory: bus master on, rings mapped.
  const int mfd = ::memfd_create("shadow-rings", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_EQ(::ftruncate(mfd, 8192), 0);
  void* rings = ::mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
  ASSERT_NE(rings, MAP_FAILED);
  std::memset(rings, 0, 8192);  // NOP descriptors, an empty CQ
  constexpr std::uint64_t kRing = 0x100000;
  ASSERT_EQ(r.call(dma_map_msg(kRing, 8192, 0), std::span(&mfd, 1)), 0);
  ::close(mfd);
  ASSERT_EQ(r.call(access_msg(emud::Command::kRegionWrite, emud::kRegionConfig, 4, 2, 0x6)), 0);
  auto posted = [&](std::uint64_t off, std::uint32_t count, std::uint64_t v) {
    const auto m = access_msg(emud::Command::kRegionWrite, 0, off, count, v);
    return r.send(message(emud::Command::kRegionWrite, std::span(m).subspan(emud::hdr::kBytes), emud::kFlagNoReply));
  };

  const std::uint32_t handled0 = word(emud::shadow::kHandled).load();
  EXPECT_EQ(handled0, 0u);
  ASSERT_TRUE(posted(npo::fw::regs::queue_reg(0, qr::kSqBase), 8, kRing));
  ASSERT_TRUE(posted(npo::fw::regs::queue_reg(0, qr::kCqBase), 8, kRing + 4096));
  ASSERT_TRUE(posted(npo::fw::regs::queue_reg(0, qr::kConfig), 4, qr::kConfigDepthLog2.make(2)));
  ASSERT_TRUE(posted(npo::fw::regs::queue_reg(0, qr::kCtrl), 4, qr::kCtrlEnable.mask()));
  auto read32 = [&](std::uint64_t off) -> std::int64_t {
    if (!r.send(access_msg(emud::Command::kRegionRead, 0, off, 4))) return -1;
    auto [c2, b2] = r.recv();
    if (c2 != 0 || b2.size() != emud::access::kBytes + 4) return -1;
    return emud::load<std::uint32_t>(b2, emud::access::kBytes);
  };
  ASSERT_EQ(read32(npo::fw::regs::queue_reg(0, qr::kStatus)) & qr::kStatusEnabled.mask(), qr::kStatusEnabled.mask());
  EXPECT_EQ(word(emud::shadow::kHandled).load(), 4u) << "every posted write is counted once handled";
  // Rung through the page alone: no message follows, and the card runs 3 NOPs.
  const std::size_t sq0 = 0 * emud::shadow::kStride + emud::shadow::kSqTail;
  word(sq0).store(3, std::memory_order_release);
  const std::uint64_t one = 1;
  ASSERT_EQ(::write(efd, &one, sizeof one), static_cast<ssize_t>(sizeof one));
  auto* cq = static_cast<std::byte*>(rings) + 4096;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  auto phase_of = [&](unsigned i) { return cq_phase(cq, i); };
  while (phase_of(2) == 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  EXPECT_NE(phase_of(2), 0) << "the third completion arrived without any message";
  EXPECT_EQ(read32(npo::fw::regs::queue_reg(0, qr::kSqHead)), 3);
  EXPECT_EQ(read32(npo::fw::regs::queue_reg(0, qr::kCqTail)), 3);
  // Written before a message, applied before it: the read that follows sees the 4th NOP rung.
  word(sq0).store(4, std::memory_order_release);
  EXPECT_EQ(read32(sq_tail0), 4) << "a message never overtakes a doorbell written before it";
  // CQ_HEAD goes through the page too; the card takes it (registers.md §5.4).
  word(0 * emud::shadow::kStride + emud::shadow::kCqHead).store(3, std::memory_order_release);
  EXPECT_EQ(read32(npo::fw::regs::queue_reg(0, qr::kCqHead)), 3);
  // A queue reset restarts the indexes: the page's slots follow, so an old value is not replayed.
  ASSERT_TRUE(posted(npo::fw::regs::queue_reg(0, qr::kReset), 4, qr::kResetQueue.mask()));
  EXPECT_EQ(read32(sq_tail0), 0);
  EXPECT_EQ(word(sq0).load(), 0u);
  EXPECT_EQ(word(emud::shadow::kHandled).load(), 5u);
  // Enabled again by an 8-byte write over CONFIG and CTRL: the slots restart too.
  word(sq0).store(7, std::memory_order_relaxed);  // as if left from before
  ASSERT_TRUE(posted(npo::fw::regs::queue_reg(0, qr::kConfig), 8,
                     (std::uint64_t{qr::kCtrlEnable.mask()} << 32) | qr::kConfigDepthLog2.make(2)));
  EXPECT_EQ(read32(npo::fw::regs::queue_reg(0, qr::kStatus)) & qr::kStatusEnabled.mask(), qr::kStatusEnabled.mask());
  EXPECT_EQ(word(sq0).load(), 0u) << "an old value would be replayed into the restarted queue";
  // A read-only attach gets no page.
  Raw ro(sock(d, 1));
  ASSERT_EQ(ro.call(version_msg(true)), 0);
  EXPECT_EQ(ro.call(shadow_msg(), std::span(&efd, 1)), static_cast<int>(Code::kPermissionDenied));
  ::close(efd);
  ::munmap(pm, emud::shadow::kPageBytes);
  ::munmap(rings, 8192);
  EXPECT_EQ(d.stop(), 0);
  EXPECT_NE(d.output().find("card=0 pid=" + std::to_string(::getpid()) + ": shadow doorbells for 32 queues"),
            std::string::npos)
      << d.output();
}

// The client side of §5.11's order: a doorbell through the page waits until the daemon has
// handled every posted write the thread sent before it. With npo-emud stopped (SIGSTOP) the
// queue's enable sits unread in the socket, so the SQ_TAIL doorbell after it must not return;
// rung past it, the card would see the doorbell first and drop it (a disabled queue).
TEST(Emud, AShadowDoorbellWaitsUntilThePostedWritesBeforeItWereHandled) {
  namespace qr = npo::fw::regs::queue;
  EmudProcess d;
  ASSERT_TRUE(d.start(emud_path(), "emu:2", {"--no-bring-up"})) << d.output();
  auto be = npo::backend::builtin_registry().open(d.uri() + "?card=0");
  ASSERT_TRUE(be.has_value());
  auto fns = (*be)->enumerate();
  ASSERT_TRUE(fns.has_value() && fns->size() == 1);
  auto dev = (*be)->open(fns->front().address);
  ASSERT_TRUE(dev.has_value()) << dev.error().to_string();
  auto bar0 = (*dev)->mmio(0);
  ASSERT_TRUE(bar0.has_value());
  const int mfd = ::memfd_create("shadow-order-rings", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_EQ(::ftruncate(mfd, 8192), 0);
  void* rings = ::mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
  ASSERT_NE(rings, MAP_FAILED);
  std::memset(rings, 0, 8192);  // NOP descriptors, an empty CQ
  npo::backend::register_host_memory_fd(rings, 8192, mfd, 0);
  constexpr std::uint64_t kRing = 0x100000;
  ASSERT_TRUE((*dev)->dma_map(rings, kRing, 8192, npo::backend::DmaAccess::kReadWrite).has_value());
  const std::array<std::byte, 2> command{std::byte{0x6}, std::byte{0}};  // memory space + bus master
  ASSERT_TRUE((*dev)->config_write(4, command).has_value());
  auto& b = **bar0;
  b.write64(npo::fw::regs::queue_reg(0, qr::kSqBase), kRing);
  b.write64(npo::fw::regs::queue_reg(0, qr::kCqBase), kRing + 4096);
  b.write32(npo::fw::regs::queue_reg(0, qr::kConfig), qr::kConfigDepthLog2.make(2));
  EXPECT_EQ(b.read32(npo::fw::regs::queue_reg(0, qr::kStatus)) & qr::kStatusEnabled.mask(), 0u);
  ASSERT_EQ(::kill(d.pid(), SIGSTOP), 0);
  // The stop takes effect when each thread next runs: wait until all of them are stopped, so
  // that none handles the write below before SIGCONT.
  const auto stop_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  auto all_stopped = [&] {
    const auto task_dir = "/proc/" + std::to_string(d.pid()) + "/task";
    std::error_code ec;
    for (const auto& t : std::filesystem::directory_iterator(task_dir, ec)) {
      std::ifstream f(t.path() / "stat");
      std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      const auto paren = stat.rfind(')');
      if (paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] != 'T') return false;
    }
    return !ec;
  };
  while (!all_stopped() && std::chrono::steady_clock::now() < stop_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(all_stopped()) << "npo-emud did not stop";
  b.write32(npo::fw::regs::queue_reg(0, qr::kCtrl), qr::kCtrlEnable.mask());  // posted: waits in the socket
  std::atomic<bool> rang{false};
  std::thread t([&] {
    b.write32(npo::fw::regs::queue_reg(0, qr::kSqTail), 2);
    rang.store(true);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(rang.load()) << "the doorbell returned before the daemon handled the enable posted before it";
  ASSERT_EQ(::kill(d.pid(), SIGCONT), 0);
  t.join();
  auto* cq = static_cast<std::byte*>(rings) + 4096;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  auto phase_of = [&](unsigned i) { return cq_phase(cq, i); };
  while (phase_of(1) == 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  EXPECT_NE(phase_of(1), 0) << "both NOPs completed";
  EXPECT_EQ(b.read32(npo::fw::regs::queue_reg(0, qr::kSqTail)), 2u);
  EXPECT_EQ(b.read32(npo::fw::regs::queue_reg(0, qr::kCqTail)), 2u);
  dev->reset();
  npo::backend::unregister_host_memory_fd(rings);
  ::munmap(rings, 8192);
  ::close(mfd);
  EXPECT_EQ(d.stop(), 0);
}

// Through the HAL, with the daemon running the engines (engine=daemon; by default the owner runs
// them itself, §5.12): an owner rings through the shadow page, doorbell=socket keeps posted
// REGION_WRITEs, and both move the same bytes. Queues are opened and closed over and over
// (the driver reads STATUS after its enable, so rule (2) of §5.11 is AShadowDoorbellWaits...'s),
// 64 ops through rings of 16, so every submit after the first also moves CQ_HEAD by the page.
TEST(Emud, QueuesRungThroughShadowDoorbellsMoveTheSameBytesAsSocketDoorbells) {
  EmudProcess d;
  ASSERT_TRUE(d.start(emud_path(), "emu:2", {"--no-bring-up"})) << d.output();
  constexpr std::size_t kLen = 256u << 10;
  // On one CPU with its session thread (npo-emud follows a bound client), a posted write only
  // wakes that thread, and the client rings the page before the daemon ran: the order is the
  // protocol's, not the scheduler's. Restored at the end.
  cpu_set_t before;
  CPU_ZERO(&before);
  ASSERT_EQ(::sched_getaffinity(0, sizeof before, &before), 0);
  if (CPU_COUNT(&before) > 1) {
    cpu_set_t one;
    CPU_ZERO(&one);
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &before)) {
        CPU_SET(c, &one);
        break;
      }
    }
    ASSERT_EQ(::sched_setaffinity(0, sizeof one, &one), 0);
  }
  for (const char* form : {"?card=0&engine=daemon", "?card=1&doorbell=socket"}) {
    SCOPED_TRACE(form);
    auto sys = npo::System::open(d.uri() + form);
    ASSERT_TRUE(sys.has_value()) << sys.error().to_string();
    auto& dev = (*sys)->device(0);
    auto src = npo::allocate_host_memory(dev, kLen).value();
    auto dst = npo::allocate_host_memory(dev, kLen).value();
    for (unsigned round = 0; round < 40; ++round) {
      for (std::size_t i = 0; i < kLen; ++i) src->bytes()[i] = static_cast<std::byte>(i * 7 + round);
      auto q = dev.open_queue({.engine = round % 4, .depth = 16}).value();
      // 64 ops through a ring of 16: every submit after the first also moves CQ_HEAD.
      std::size_t done = 0;
      for (unsigned k = 0; k < 64; ++k) {
        const std::uint32_t part = kLen / 64;
        ASSERT_TRUE(
            q->enqueue_copy(DmaAddress::host(src->iova() + k * part), DmaAddress::host(dst->iova() + k * part), part));
        if (k % 8 == 7) {
          auto c = npo_test::run(*q, 8);
          ASSERT_EQ(c.size(), 8u) << "round " << round << " op " << k;
          for (const auto& e : c) ASSERT_EQ(e.status, OpStatus::kOk);
          done += c.size();
        }
      }
      ASSERT_EQ(done, 64u);
      ASSERT_EQ(std::memcmp(src->bytes().data(), dst->bytes().data(), kLen), 0) << "round " << round;
    }
  }
  ASSERT_EQ(::sched_setaffinity(0, sizeof before, &before), 0);
  EXPECT_EQ(d.stop(), 0);
  EXPECT_NE(d.output().find("card=0 pid=" + std::to_string(::getpid()) + ": shadow doorbells for 32 queues"),
            std::string::npos)
      << d.output();
  EXPECT_EQ(d.output().find("card=1 pid=" + std::to_string(::getpid()) + ": shadow doorbells"), std::string::npos)
      << "doorbell=socket asks for no page";
}

TEST(Emud, UnsealedMemoryIsMappedGuardedAndItsShrinkingCannotKillTheDaemon) {
  // A memfd made without MFD_ALLOW_SEALING (DPDK's --no-huge memory) is mapped only with the
  // DMA_MAP flag UNSEALED (protocol §5.2), and then SIGBUS-guarded: the client shrinking it
  // under the card's DMA leaves the daemon running; the card sees zero pages there.
  EmudProcess d;
  ASSERT_TRUE(d.start(emud_path(), "emu:mesh8")) << d.output();
  {
    Raw r(sock(d, 1));
    ASSERT_GE(r.fd, 0);
    ASSERT_EQ(r.call(version_msg(false)), 0);
    const int fd = ::memfd_create("nosealing", MFD_CLOEXEC);
    ASSERT_EQ(::ftruncate(fd, 4096), 0);
    auto msg = dma_map_msg(0x100000, 4096, 0);
    EXPECT_EQ(r.call(msg, std::span(&fd, 1)), static_cast<int>(Code::kInvalidArgument)) << "no flag: refused";
    emud::store<std::uint32_t>(std::span(msg).subspan(emud::hdr::kBytes), emud::dma_map::kFlags, 4);
    EXPECT_EQ(r.call(msg, std::span(&fd, 1)), static_cast<int>(Code::kInvalidArgument)) << "unknown flag bit";
    emud::store<std::uint32_t>(std::span(msg).subspan(emud::hdr::kBytes), emud::dma_map::kFlags,
                               emud::dma_map::kFlagProcessMemory);
    EXPECT_EQ(r.call(msg, std::span(&fd, 1)), static_cast<int>(Code::kInvalidArgument))
        << "PROCESS_MEMORY carries an address, not an fd";
    emud::store<std::uint32_t>(std::span(msg).subspan(emud::hdr::kBytes), emud::dma_map::kFlags,
                               emud::dma_map::kFlagUnsealed);
    EXPECT_EQ(r.call(msg, std::span(&fd, 1)), 0) << "UNSEALED: mapped, guarded";
    ::close(fd);
  }
  constexpr std::size_t kLen = 64u << 10;
  auto sys = npo::System::open(d.uri() + "?card=0");
  ASSERT_TRUE(sys.has_value()) << sys.error().to_string();
  auto& dev = (*sys)->device(0);
  const int mfd = ::memfd_create("client-unsealed", MFD_CLOEXEC);
  ASSERT_GE(mfd, 0);
  ASSERT_EQ(::ftruncate(mfd, kLen), 0);
  void* p = ::mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
  ASSERT_NE(p, MAP_FAILED);
  auto* bytes = static_cast<std::byte*>(p);
  std::memset(bytes, 0x5a, kLen);
  npo::backend::register_host_memory_fd(p, kLen, mfd, 0);
  auto region = npo::register_host_memory(dev, std::span(bytes, kLen), true);
  ASSERT_TRUE(region.has_value()) << region.error().to_string();
  auto back = npo::allocate_host_memory(dev, kLen).value();
  auto q = dev.open_queue({.engine = 0, .depth = 64}).value();
  // Before: the card reads the client's bytes.
  ASSERT_TRUE(q->enqueue_copy(DmaAddress::host((*region)->iova()), DmaAddress::hbm(0), kLen));
  ASSERT_TRUE(q->enqueue_copy(DmaAddress::hbm(0), DmaAddress::host(back->iova()), kLen));
  auto c = npo_test::run(*q, 2);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].status, OpStatus::kOk);
  EXPECT_EQ(c[1].status, OpStatus::kOk);
  EXPECT_EQ(back->bytes()[kLen - 1], std::byte{0x5a});
  // The client shrinks the memfd to nothing (it must not touch its own mapping from now on),
  // then the card reads and writes it: the daemon's access faults and is repaired.
  ASSERT_EQ(::ftruncate(mfd, 0), 0);
  ASSERT_TRUE(q->enqueue_copy(DmaAddress::host((*region)->iova()), DmaAddress::hbm(0), kLen));
  ASSERT_TRUE(q->enqueue_copy(DmaAddress::hbm(0), DmaAddress::host(back->iova()), kLen));
  ASSERT_TRUE(q->enqueue_copy(DmaAddress::hbm(0), DmaAddress::host((*region)->iova()), kLen));
  c = npo_test::run(*q, 3);
  ASSERT_EQ(c.size(), 3u);
  for (const auto& x : c) EXPECT_EQ(x.status, OpStatus::kOk);
  EXPECT_EQ(back->bytes()[0], std::byte{0}) << "the card saw zero pages where the memory shrank";
  EXPECT_EQ(back->bytes()[kLen - 1], std::byte{0});
  // The daemon lives on: this client and another card's client still work.
  auto other = npo::System::open(d.uri() + "?card=1");
  ASSERT_TRUE(other.has_value()) << other.error().to_string();
  auto& odev = (*other)->device(0);
  auto omem = npo::allocate_host_memory(odev, 4096).value();
  auto oq = odev.open_queue({.engine = 0, .depth = 16}).value();
  ASSERT_TRUE(oq->enqueue_fill(DmaAddress::host(omem->iova()), 0x0101010101010101ULL, 4096));
  c = npo_test::run(*oq, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, OpStatus::kOk);
  EXPECT_EQ(omem->bytes()[4095], std::byte{1});
  region->reset();  // DMA_UNMAP: the daemon reports the shrink
  npo::backend::unregister_host_memory_fd(p);
  ::munmap(p, kLen);
  ::close(mfd);
  for (int i = 0; i < 100 && d.output().find("shrank under its DMA mapping") == std::string::npos; ++i) d.pump(50);
  EXPECT_NE(d.output().find("shrank under its DMA mapping"), std::string::npos) << d.output();
  q.reset();  // everything of both clients goes before their Systems, then the daemon stops
  oq.reset();
  back.reset();
  omem.reset();
  sys->reset();
  other->reset();
  EXPECT_EQ(d.stop(), 0) << d.output();
}

TEST(Emud, DeadDaemonMakesEveryCallFailWithUnavailableWithinOneSecond) {
  EmudProcess d;
  ASSERT_TRUE(d.start(emud_path(), "emu:2", {"--no-bring-up"})) << d.output();
  auto be = npo::backend::builtin_registry().open(d.uri());
  ASSERT_TRUE(be.has_value());
  auto fns = (*be)->enumerate();
  ASSERT_TRUE(fns.has_value() && !fns->empty());
  auto dev = (*be)->open(fns->front().address);
  ASSERT_TRUE(dev.has_value()) << dev.error().to_string();
  auto bar0 = (*dev)->mmio(0);
  ASSERT_TRUE(bar0.has_value());
  auto sys = npo::System::open(d.uri() + "?card=1");
  ASSERT_TRUE(sys.has_value()) << sys.error().to_string();
  d.kill();
  const auto t0 = std::chrono::steady_clock::now();
  std::array<std::byte, 4> b{};
  auto r = (*dev)->config_read(0, b);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), Code::kUnavailable) << r.error().to_string();
  EXPECT_EQ((*dev)->reset().error().code(), Code::kUnavailable);
  EXPECT_EQ((*dev)->region_info(0).error().code(), Code::kUnavailable);
  EXPECT_EQ((*dev)->config_write(4, b).error().code(), Code::kUnavailable);
  EXPECT_EQ((*bar0)->read32(0), 0xffffffffu) << "registers read all-ones";
  EXPECT_EQ((*dev)->mmio(4).error().code(), Code::kUnavailable);
  // Through the public API: a card-level call fails, nothing hangs.
  auto& card = (*sys)->device(0);
  auto q = card.open_queue({.engine = 0, .depth = 16});
  EXPECT_FALSE(q.has_value());
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(took, std::chrono::seconds(1)) << std::chrono::duration<double>(took).count() << " s";
  auto reopen = npo::System::open(d.uri());
  ASSERT_FALSE(reopen.has_value());
  EXPECT_EQ(reopen.error().code(), Code::kUnavailable);
  std::filesystem::remove_all(d.dir());
}

TEST(Emud, ClientKilledMidDmaLosesItsStateOthersContinue) {
  EmudProcess d;
  ASSERT_TRUE(d.start(emud_path(), "emu:mesh8")) << d.output();
  const std::string uri = d.uri();
  constexpr std::size_t kLen = 1u << 20;
  // The victim: card 1, a window exported, host->HBM copies in a loop until it is killed.
  auto victim = fork_child([&](int, int out) {
    auto sys = npo::System::open(uri + "?card=1");
    if (!sys) return 2;
    auto& dev = (*sys)->device(0);
    auto w = npo::export_window(dev, 0, kLen);
    if (!w) return 3;
    auto q = dev.open_queue({.engine = 0, .depth = 64});
    auto mem = npo::allocate_host_memory(dev, kLen);
    if (!q || !mem) return 4;
    const auto h = (*w)->handle().serialize();
    if (!write_full(out, h)) return 5;
    for (;;) {
      (void)(*q)->enqueue_copy(DmaAddress::host((*mem)->iova()), DmaAddress::hbm(kLen), kLen);
      (void)(*q)->submit();
      std::array<npo::OpCompletion, 64> c;
      (void)(*q)->poll(c);
    }
  });
  std::array<std::byte, npo::WindowHandle::kSerializedSize> hb{};
  ASSERT_TRUE(read_full(victim->from_child, hb));
  // Another client works on card 2 meanwhile.
  auto sys2 = npo::System::open(uri + "?card=2");
  ASSERT_TRUE(sys2.has_value()) << sys2.error().to_string();
  auto& dev2 = (*sys2)->device(0);
  auto q2 = dev2.open_queue({.engine = 0, .depth = 64}).value();
  auto a = npo::allocate_host_memory(dev2, kLen).value();
  auto b = npo::allocate_host_memory(dev2, kLen).value();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const pid_t vpid = victim->pid;
  ::kill(vpid, SIGKILL);
  EXPECT_EQ(victim->wait(5000), -1);  // killed by a signal
  for (int round = 0; round < 4; ++round) {
    std::mt19937 rng(static_cast<unsigned>(round));
    for (auto& x : a->bytes()) x = static_cast<std::byte>(rng());
    std::memset(b->bytes().data(), 0, kLen);
    ASSERT_TRUE(q2->enqueue_copy(DmaAddress::host(a->iova()), DmaAddress::hbm(0), kLen));
    ASSERT_TRUE(q2->enqueue_copy(DmaAddress::hbm(0), DmaAddress::host(b->iova()), kLen));
    const auto c = npo_test::run(*q2, 2);
    if (c.size() != 2u || c[1].status != OpStatus::kOk) {
      d.stop();
      FAIL() << "round " << round << ": " << c.size() << " completions; daemon output:\n" << d.output();
    }
    EXPECT_EQ(std::memcmp(a->bytes().data(), b->bytes().data(), kLen), 0) << "round " << round;
  }
  // The victim's card opens again at once; its window was revoked.
  auto sys1 = npo::System::open(uri + "?card=1");
  ASSERT_TRUE(sys1.has_value()) << sys1.error().to_string();
  auto h = npo::import_window(**sys2, hb);
  ASSERT_TRUE(h.has_value());
  auto back = npo::allocate_host_memory(dev2, 4096).value();
  ASSERT_TRUE(q2->enqueue_remote_read(*h, 0, DmaAddress::host(back->iova()), 4096));
  const auto c = npo_test::run(*q2, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_NE(c[0].status, OpStatus::kOk) << "the dead client's window is gone";
  q2.reset();
  a.reset();
  b.reset();
  back.reset();
  sys1->reset();
  sys2->reset();
  EXPECT_EQ(d.stop(), 0);
  const std::string line = "disconnect card=1 pid=" + std::to_string(vpid) + " mode=owner dma_maps_dropped=";
  const auto at = d.output().find(line);
  ASSERT_NE(at, std::string::npos) << d.output();
  EXPECT_GE(std::stoi(d.output().substr(at + line.size())), 2) << "its queue rings and buffer were mapped";
  // The session on card 2 completed exactly 8 copies of kLen bytes (the remote read of the
  // revoked window failed and does not count): the daemon's per-session DMA traffic.
  const std::string line2 = "disconnect card=2 pid=" + std::to_string(::getpid()) + " mode=owner dma_maps_dropped=";
  const auto at2 = d.output().find(line2);
  ASSERT_NE(at2, std::string::npos) << d.output();
  const std::string rest = d.output().substr(at2, d.output().find('\n', at2) - at2);
  EXPECT_NE(rest.find(" dma_ops=8 dma_bytes=" + std::to_string(8 * kLen)), std::string::npos) << rest;
}

}  // namespace

namespace {

TEST(Emud, FaultInjectedIntoTheRunningDaemonShowsInTheTools) {
  EmudProcess d;
  ASSERT_TRUE(d.start(emud_path(), "emu:mesh8")) << d.output();
  const std::string emu = NPO_EMU, link = NPO_LINK;
  const std::string backend = "'" + d.uri() + "?card=2'";
  auto before = npo_test::run_command(link + " show --backend " + backend + " 2>&1");
  ASSERT_EQ(before.status, 0) << before.out;
  EXPECT_EQ(before.out.find("lane 3 dropped"), std::string::npos) << before.out;
  auto inj = npo_test::run_command(emu + " fault --socket-dir " + d.dir() +
                                   " --kind lane_loss --card 2 --port 0 --lane 3 2>&1");
  ASSERT_EQ(inj.status, 0) << inj.out;
  EXPECT_NE(inj.out.find("injected lane_loss into card 2"), std::string::npos) << inj.out;
  // The tools show it at their next look: the lane drops at once, the card's retries fail
  // CDR lock on it and the port is FAILED with the card's own training result (reading never
  // retrains, issue 18). A host retrain of both ends (`npo-link train` on every card of the
  // daemon) then brings the link up on the 7 lanes that carry light.
  std::string seen;
  for (int i = 0; i < 250 && seen.find("TIMEOUT_CDR_LOCK") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    seen = npo_test::run_command(link + " show --backend " + backend + " --port 0 2>&1").out;
  }
  EXPECT_NE(seen.find("FAILED"), std::string::npos) << seen;
  EXPECT_NE(seen.find("TIMEOUT_CDR_LOCK"), std::string::npos) << seen;
  auto train = npo_test::run_command(link + " train --backend '" + d.uri() + "' 2>&1");
  EXPECT_EQ(train.status, 0) << train.out;
  seen = npo_test::run_command(link + " show --backend " + backend + " --port 0 2>&1").out;
  EXPECT_NE(seen.find("7/8"), std::string::npos) << seen;
  // The end that retrained names the lane it dropped; the other end names it as the far
  // end's choice, and that it has no light on it either (a lost lane is dark at both ends).
  EXPECT_TRUE(seen.find("lane 3 dropped") != std::string::npos ||
              seen.find("lane 3 not in use (the far end dropped it; no signal here either)") != std::string::npos)
      << seen;
  // The daemon checks the fault as a scenario file would, and the target card must be the
  // socket's; no daemon: unavailable.
  auto nolane =
      npo_test::run_command(emu + " fault --socket-dir " + d.dir() + " --kind lane_loss --card 2 --port 0 2>&1");
  EXPECT_EQ(nolane.status, 2) << nolane.out;  // a bad command line (tools/README "npo-emu fault")
  EXPECT_NE(nolane.out.find("needs a lane"), std::string::npos) << nolane.out;
  auto badkind = npo_test::run_command(emu + " fault --socket-dir " + d.dir() + " --kind melt --card 2 2>&1");
  EXPECT_EQ(badkind.status, 2) << badkind.out;
  // A card or port the daemon does not have is a bad command line too (as npo-link's --card
  // 8), checked by a read-only look before anything is sent (used to be 1).
  auto port8 = npo_test::run_command(emu + " fault --socket-dir " + d.dir() +
                                     " --kind lane_loss --card 2 --port 8 --lane 0 2>&1");
  EXPECT_EQ(port8.status, 2) << port8.out;
  EXPECT_NE(port8.out.find("port 8 not present (card 2 has 8 ports)"), std::string::npos) << port8.out;
  auto card8 = npo_test::run_command(emu + " fault --socket-dir " + d.dir() + " --kind iommu_fault --card 8 2>&1");
  EXPECT_EQ(card8.status, 2) << card8.out;
  EXPECT_NE(card8.out.find("serves no card 8"), std::string::npos) << card8.out;
  // mesh8's port 7 has no module (nothing cabled): a link fault there is refused, like a
  // module removal (used to be accepted and change nothing).
  auto port7 = npo_test::run_command(emu + " fault --socket-dir " + d.dir() +
                                     " --kind lane_loss --card 2 --port 7 --lane 0 2>&1");
  EXPECT_EQ(port7.status, 1) << port7.out;
  EXPECT_NE(port7.out.find("card 2 port 7 has no module: a lane_loss there has nothing to act on"), std::string::npos)
      << port7.out;
  EXPECT_EQ(d.stop(), 0);
  EXPECT_NE(d.output().find("fault lane_loss card=2 port=0 lane=3 injected by pid="), std::string::npos) << d.output();
  auto gone = npo_test::run_command(emu + " fault --socket-dir " + d.dir() + " --kind iommu_fault --card 0 2>&1");
  EXPECT_NE(gone.status, 0);
  EXPECT_NE(gone.out.find("unavailable"), std::string::npos) << gone.out;
  std::filesystem::remove_all(d.dir());
}

TEST(Emud, OneShotHealthAndShowReportALaneDegradedNow) {
  // Trial finding 3: on a daemon that has run a while, a one-shot `npo-link health` judged one
  // interval after the counters since link-up and printed HEALTHY (hysteresis needs 2), show
  // the BER averaged since link-up. Both now sample 2 intervals first (LinkMonitor::sample).
  EmudProcess d;
  ASSERT_TRUE(d.start(emud_path(), "emu:mesh8")) << d.output();
  const std::string emu = NPO_EMU, link = NPO_LINK;
  const std::string backend = " --backend '" + d.uri() + "' --card 5 --port 2";
  auto inj = npo_test::run_command(emu + " fault --socket-dir " + d.dir() +
                                   " --kind ber_ramp --card 5 --port 2 --value 1e-4 --duration-ms 300 2>&1");
  ASSERT_EQ(inj.status, 0) << inj.out;
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  auto health = npo_test::run_command(link + " health --interval 0.3" + backend + " 2>&1");
  EXPECT_EQ(health.status, 3) << health.out;
  // The ramp reaches every lane: one detail for the 8 lanes alike (trial finding 16).
  EXPECT_EQ(health.out.rfind("card 5 port 2: DEGRADED (up 8/8 lanes: lanes 0-7 DEGRADED: pre-FEC BER ", 0), 0u)
      << health.out;
  EXPECT_EQ(health.out.find("verdict stays GOOD"), std::string::npos) << health.out;
  auto show = npo_test::run_command(link + " show" + backend);
  EXPECT_EQ(show.status, 3) << show.out;
  const std::string row = "   5    2  DEGRADED     800   8/8  2:4        ";
  const auto at = show.out.find(row);
  ASSERT_NE(at, std::string::npos) << show.out;
  const double worst = std::stod(show.out.substr(at + row.size(), 9));
  EXPECT_GT(worst, 5e-5) << show.out;  // the last interval's, not the average since link-up
  EXPECT_EQ(d.stop(), 0);
  std::filesystem::remove_all(d.dir());
}

// Issue 13 point 7: the tools watch cards another process owns and drives. The owner runs
// host->HBM->host copies with data checked on cards 0 and 1, and talks to its firmware
// (HEARTBEAT, transceiver reads) between copies; meanwhile npo-smi, npo-smi topo and npo-link
// show|health|ddm|fec attach read-only (the default for emu-remote) to all 8 cards, and a
// watch shows a lane_loss injected into the running daemon within one refresh.
TEST(Emud, ToolsWatchCardsAnotherProcessOwnsWhileItRunsDma) {
  EmudProcess d;
  ASSERT_TRUE(d.start(emud_path(), "emu:mesh8")) << d.output();
  const std::string uri = d.uri();
  const std::string emu = NPO_EMU, link = NPO_LINK, smi = NPO_SMI;
  constexpr std::size_t kLen = 256u << 10;
  auto owner = fork_child([&](int in, int out) {
    auto sys = npo::System::open(uri + "?card=0,1");
    if (!sys || (*sys)->device_count() != 2) return 2;
    struct Lane {
      std::unique_ptr<npo::DmaQueue> q;
      std::unique_ptr<npo::MemoryRegion> a, b;
    };
    std::vector<Lane> lanes;
    for (std::size_t i = 0; i < 2; ++i) {
      auto& dev = (*sys)->device(i);
      auto q = dev.open_queue({.engine = 0, .depth = 64});
      auto a = npo::allocate_host_memory(dev, kLen);
      auto b = npo::allocate_host_memory(dev, kLen);
      if (!q || !a || !b) return 3;
      lanes.push_back({std::move(*q), std::move(*a), std::move(*b)});
    }
    send_byte(out, 'r');
    std::uint64_t rounds = 0, data_errors = 0, dma_errors = 0, mailbox_errors = 0;
    std::mt19937 rng(7);
    for (;;) {
      pollfd p{in, POLLIN, 0};
      if (::poll(&p, 1, 0) > 0) break;
      for (std::size_t i = 0; i < lanes.size(); ++i) {
        auto& l = lanes[i];
        for (auto& x : l.a->bytes()) x = static_cast<std::byte>(rng());
        std::memset(l.b->bytes().data(), 0, kLen);
        if (!l.q->enqueue_copy(DmaAddress::host(l.a->iova()), DmaAddress::hbm(0), kLen) ||
            !l.q->enqueue_copy(DmaAddress::hbm(0), DmaAddress::host(l.b->iova()), kLen)) {
          ++dma_errors;
          continue;
        }
        const auto c = npo_test::run(*l.q, 2);
        if (c.size() != 2 || c[0].status != OpStatus::kOk || c[1].status != OpStatus::kOk) ++dma_errors;
        if (std::memcmp(l.a->bytes().data(), l.b->bytes().data(), kLen) != 0) ++data_errors;
        // The owner's own mailbox exchanges run between the observers' queries.
        auto& dev = (*sys)->device(i);
        std::array<std::byte, 16> id{};
        if (!dev.heartbeat() || !npo::read_transceiver(dev, 0, 0, 0, 128, id)) ++mailbox_errors;
      }
      ++rounds;
    }
    const std::string res = std::to_string(rounds) + " " + std::to_string(data_errors) + " " +
                            std::to_string(dma_errors) + " " + std::to_string(mailbox_errors) + "\n";
    return write_full(out, std::as_bytes(std::span(res.data(), res.size()))) ? 0 : 5;
  });
  ASSERT_EQ(recv_byte(owner->from_child), 'r');

  const std::string be = " --backend '" + uri + "'";
  auto smi_out = npo_test::run_command(smi + be + " 2>&1");
  EXPECT_EQ(smi_out.status, 0) << smi_out.out;
  EXPECT_NE(smi_out.out.find("8 cards"), std::string::npos) << smi_out.out;
  EXPECT_NE(smi_out.out.find("mode=ro"), std::string::npos) << "read-only tools attach read-only: " << smi_out.out;
  EXPECT_NE(smi_out.out.find("NPO-REF-1"), std::string::npos) << "IDENTIFY through the observer side channel";
  auto topo = npo_test::run_command(smi + " topo --json" + be + " 2>&1");
  EXPECT_EQ(topo.status, 0) << topo.out;
  EXPECT_NE(topo.out.find("\"diameter\": 1"), std::string::npos) << topo.out;
  auto show = npo_test::run_command(link + " show --full" + be + " 2>&1");
  EXPECT_EQ(show.status, 0) << show.out;
  EXPECT_NE(show.out.find("56 HEALTHY"), std::string::npos) << show.out;
  EXPECT_EQ(show.out.find("[warning]"), std::string::npos) << "an observer writes nothing: " << show.out;
  auto health = npo_test::run_command(link + " health --interval 0.2 --card 0,1" + be + " 2>&1");
  EXPECT_EQ(health.status, 0) << health.out;
  EXPECT_NE(health.out.find("card 1 port 6: HEALTHY"), std::string::npos) << health.out;
  auto ddm = npo_test::run_command(link + " ddm --card 0" + be + " 2>&1");
  EXPECT_EQ(ddm.status, 0) << ddm.out;
  EXPECT_NE(ddm.out.find("ModuleReady"), std::string::npos) << "CMIS over the side channel: " << ddm.out;
  auto fec = npo_test::run_command(link + " fec --card 1" + be + " 2>&1");
  EXPECT_EQ(fec.status, 0) << fec.out;
  EXPECT_NE(fec.out.find("CODEWORDS"), std::string::npos) << fec.out;

  // An observer is refused what changes the card, with the reason.
  auto ro = npo::System::open(uri + "?card=0&mode=ro");
  ASSERT_TRUE(ro.has_value()) << ro.error().to_string();
  auto& rdev = (*ro)->device(0);
  EXPECT_TRUE(rdev.info().read_only);
  auto q = rdev.open_queue({.engine = 0, .depth = 64});
  ASSERT_FALSE(q.has_value());
  EXPECT_EQ(q.error().code(), Code::kPermissionDenied);
  EXPECT_NE(q.error().message().find("attached read-only"), std::string::npos) << q.error().to_string();
  EXPECT_EQ(npo::export_window(rdev, 0, 1u << 20).error().code(), Code::kPermissionDenied);
  EXPECT_EQ(rdev.reset().error().code(), Code::kPermissionDenied);
  EXPECT_EQ(npo::allocate_host_memory(rdev, 4096).error().code(), Code::kPermissionDenied);
  ro->reset();

  // Watch card 2 port 0 every 0.2 s; inject a lane loss while it runs.
  std::string watch_out;
  const std::string frames = d.dir() + "/watch.out";  // each frame as printed (npo-link flushes it)
  std::thread watcher([&] {
    watch_out = npo_test::run_command(link + " show --port 0 --watch 0.2 --count 12 --backend '" + uri +
                                      "?card=2' 2>&1 | tee " + frames)
                    .out;
  });
  // The first frame samples 2 intervals of 0.2 s (trial finding 3) before it prints, later under
  // a sanitizer: inject once it is out (a fixed 1.5 s once came before it under TSan), plus a
  // little, so that at least one frame precedes the injection.
  for (int i = 0; i < 600; ++i) {
    std::ifstream f(frames);
    const std::string seen((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (seen.find("--- npo-link show frame") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto inj = npo_test::run_command(emu + " fault --socket-dir " + d.dir() +
                                   " --kind lane_loss --card 2 --port 0 --lane 3 2>&1");
  const auto injected = std::chrono::system_clock::now();
  watcher.join();
  ASSERT_EQ(inj.status, 0) << inj.out;
  // Frames: "--- npo-link show frame N  YYYY-MM-DDTHH:MM:SS.mmmZ ...", then the port's row.
  const auto inj_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(injected.time_since_epoch()).count() % (24LL * 3600 * 1000);
  int before = 0, after = 0, after_failed = 0;
  long long first_failed_delay = -1;
  for (std::size_t at = watch_out.find("--- npo-link show frame"); at != std::string::npos;) {
    const std::size_t next = watch_out.find("--- npo-link show frame", at + 1);
    const std::string frame = watch_out.substr(at, next == std::string::npos ? std::string::npos : next - at);
    const auto t = frame.find('T', frame.find("frame"));
    const long long ms = std::stoll(frame.substr(t + 1, 2)) * 3600000 + std::stoll(frame.substr(t + 4, 2)) * 60000 +
                         std::stoll(frame.substr(t + 7, 2)) * 1000 + std::stoll(frame.substr(t + 10, 3));
    const bool failed = frame.find("FAILED      ") != std::string::npos;
    if (ms + 5 < inj_ms - 150) {  // before the injection was even sent
      ++before;
      EXPECT_FALSE(failed) << frame;
    } else if (ms > inj_ms + 50) {  // past the 10 ms link-loss debounce
      ++after;
      after_failed += failed ? 1 : 0;
      // Once a frame shows the fault, every later frame does (the watch never loses it).
      EXPECT_TRUE(failed || first_failed_delay < 0) << "a frame after the fault showed HEALTHY again:\n" << frame;
      if (failed && first_failed_delay < 0) first_failed_delay = ms - inj_ms;
    }
    at = next;
  }
  EXPECT_GE(before, 1) << watch_out;
  EXPECT_GE(after, 3) << watch_out;
  // Within one refresh: at most the first frame after the injection may still be HEALTHY (a
  // slow machine or a sanitizer can stretch the debounce and the owner's poll past 50 ms).
  EXPECT_GE(after_failed + 1, after) << "the fault shows within one refresh:\n" << watch_out;
  EXPECT_GE(first_failed_delay, 0) << "the first frame after the injection shows it (within one refresh)";

  // The owner was never disturbed.
  send_byte(owner->to_child, 'q');
  std::string line;
  for (char ch = recv_byte(owner->from_child); ch != '\0' && ch != '\n'; ch = recv_byte(owner->from_child)) line += ch;
  EXPECT_EQ(owner->wait(10000), 0);
  unsigned long long rounds = 0, data_errors = 1, dma_errors = 1, mailbox_errors = 1;
  ASSERT_EQ(std::sscanf(line.c_str(), "%llu %llu %llu %llu", &rounds, &data_errors, &dma_errors, &mailbox_errors), 4)
      << line;
  EXPECT_GE(rounds, 5u);
  EXPECT_EQ(data_errors, 0u);
  EXPECT_EQ(dma_errors, 0u);
  EXPECT_EQ(mailbox_errors, 0u) << "the observers never touched the owner's mailbox";
  std::printf(
      "owner: %llu rounds of 2 x 256 KiB host->HBM->host on 2 cards while the tools ran; first FAILED frame "
      "%lld ms after the injection\n",
      rounds, first_failed_delay);
  EXPECT_EQ(d.stop(), 0);
  EXPECT_NE(d.output().find("mode=read-only"), std::string::npos);
}

// MAILBOX_OBSERVE (spec §5.10): an observer's firmware requests are answered beside the BAR0
// mailbox; commands that change the card are refused; malformed bodies are invalid_argument.
TEST(Emud, MailboxObserveServesReadsOnlyAndLeavesTheBar0MailboxAlone) {
  namespace mb = npo::fw::mbox;
  EmudProcess d;
  ASSERT_TRUE(d.start(emud_path(), "emu:2", {"--no-bring-up"})) << d.output();
  Raw r(sock(d, 0));
  ASSERT_EQ(r.call(version_msg(true)), 0);
  auto request = [](mb::Command cmd, std::span<const std::byte> payload, std::uint32_t seq) {
    std::vector<std::byte> m(mb::hdr::kSize + payload.size());
    npo::fw::store_le<std::uint8_t>(m.data(), mb::hdr::kVersion, mb::kProtocolVersion);
    npo::fw::store_le<std::uint16_t>(m.data(), mb::hdr::kOpcode, static_cast<std::uint16_t>(cmd));
    npo::fw::store_le<std::uint32_t>(m.data(), mb::hdr::kSequence, seq);
    npo::fw::store_le<std::uint16_t>(m.data(), mb::hdr::kPayloadLen, static_cast<std::uint16_t>(payload.size()));
    if (!payload.empty()) std::memcpy(m.data() + mb::hdr::kSize, payload.data(), payload.size());
    npo::fw::store_le<std::uint32_t>(m.data(), mb::hdr::kCrc, mb::message_crc(m));
    return m;
  };
  // The BAR0 mailbox STATUS before: an observer's requests must not change it.
  ASSERT_TRUE(
      r.send(access_msg(emud::Command::kRegionRead, 0, npo::fw::regs::mbox_reg(npo::fw::regs::mbox::kStatus), 4)));
  const auto st0 = r.recv();
  ASSERT_EQ(st0.first, 0);
  ASSERT_TRUE(r.send(message(emud::Command::kMailboxObserve, request(mb::Command::kIdentify, {}, 41))));
  const auto id = r.recv();
  ASSERT_EQ(id.first, 0);
  ASSERT_EQ(id.second.size(), mb::hdr::kSize + mb::identify::kSize);
  EXPECT_EQ(npo::fw::load_le<std::uint32_t>(id.second.data(), mb::hdr::kSequence), 41u);
  EXPECT_EQ(npo::fw::load_le<std::uint16_t>(id.second.data(), mb::hdr::kStatus), 0u);
  EXPECT_EQ(npo::fw::load_le<std::uint32_t>(id.second.data(), mb::hdr::kSize + mb::identify::kFabricId), 1u);
  // A corrupted CRC is answered in the reply's status, as the firmware does.
  auto bad = request(mb::Command::kGetVersions, {}, 42);
  bad[mb::hdr::kCrc] ^= std::byte{1};
  ASSERT_TRUE(r.send(message(emud::Command::kMailboxObserve, bad)));
  const auto crc = r.recv();
  ASSERT_EQ(crc.first, 0);
  EXPECT_EQ(npo::fw::load_le<std::uint16_t>(crc.second.data(), mb::hdr::kStatus),
            static_cast<std::uint16_t>(mb::Status::kBadCrc));
  // Commands that change the card are refused; so is a body outside 16..1024 bytes.
  EXPECT_EQ(r.call(message(emud::Command::kMailboxObserve, request(mb::Command::kReset, {}, 43))),
            static_cast<int>(Code::kPermissionDenied));
  std::array<std::byte, 8> hb{};
  EXPECT_EQ(r.call(message(emud::Command::kMailboxObserve, request(mb::Command::kHeartbeat, hb, 44))),
            static_cast<int>(Code::kPermissionDenied));
  EXPECT_EQ(r.call(message(emud::Command::kMailboxObserve, std::span<const std::byte>(bad).first(15))),
            static_cast<int>(Code::kInvalidArgument));
  std::vector<std::byte> big(1025);
  EXPECT_EQ(r.call(message(emud::Command::kMailboxObserve, big)), static_cast<int>(Code::kInvalidArgument));
  ASSERT_TRUE(
      r.send(access_msg(emud::Command::kRegionRead, 0, npo::fw::regs::mbox_reg(npo::fw::regs::mbox::kStatus), 4)));
  const auto st1 = r.recv();
  ASSERT_EQ(st1.first, 0);
  EXPECT_EQ(st1.second, st0.second) << "the BAR0 mailbox is untouched";
  EXPECT_EQ(d.stop(), 0);
}

TEST(Emud, CraftedFaultForAnotherCardIsRefused) {
  EmudProcess d;
  ASSERT_TRUE(d.start(emud_path(), "emu:2", {"--no-bring-up"})) << d.output();
  Raw r(sock(d, 0));
  ASSERT_EQ(r.call(version_msg(true)), 0);
  std::array<std::byte, emud::fault::kBytes> b{};
  emud::store<std::uint32_t>(b, emud::fault::kKind, 0);  // iommu_fault
  emud::store<std::uint32_t>(b, emud::fault::kCard, 1);
  for (auto off : {emud::fault::kEngine, emud::fault::kQueue, emud::fault::kPort, emud::fault::kLane})
    emud::store<std::uint32_t>(b, off, emud::fault::kNone);
  emud::store<std::uint32_t>(b, emud::fault::kCount, 1);
  EXPECT_EQ(r.call(message(emud::Command::kInjectFault, b)), static_cast<int>(Code::kInvalidArgument))
      << "card 1's fault through card 0's socket";
  emud::store<std::uint32_t>(b, emud::fault::kCard, 0);
  EXPECT_EQ(r.call(message(emud::Command::kInjectFault, b)), 0);
  emud::store<std::uint32_t>(b, emud::fault::kKind, 11);
  EXPECT_EQ(r.call(message(emud::Command::kInjectFault, b)), static_cast<int>(Code::kInvalidArgument));
  EXPECT_EQ(d.stop(), 0);
}

// npo-link prbs needs the owner's attach and both ends: on a read-only attach it used to print
// all lanes "no 0 0 -" with exit 0 (its writes dropped), and owning one end only it showed the
// near end alone, exit 0. npo-smi topo as an observer used to say it "trained" the links.
TEST(Emud, PrbsRefusesAReadOnlyAttachAndSaysWhenTheFarEndWasNotChecked) {
  EmudProcess d;
  ASSERT_TRUE(d.start(emud_path(), "emu:mesh8")) << d.output();
  const std::string link = NPO_LINK, smi = NPO_SMI, uri = d.uri();
  auto ro = npo_test::run_command(link + " prbs --seconds 0.1 --backend '" + uri + "?mode=ro' 2>&1");
  EXPECT_EQ(ro.status, 1) << ro.out;
  EXPECT_NE(ro.out.find("prbs: permission_denied: card 0 is attached read-only"), std::string::npos) << ro.out;
  EXPECT_EQ(ro.out.find("LOCK"), std::string::npos) << "no table of a test that did not run: " << ro.out;
  // Card 0 alone: its port 1 goes to card 2, which this process does not hold.
  auto one = npo_test::run_command(link + " prbs --seconds 0.1 --card 0 --port 1 --backend '" + uri + "?card=0' 2>&1");
  EXPECT_EQ(one.status, 1) << one.out;
  EXPECT_NE(one.out.find("far end not checked: the far end (fabric ID 3) is not a card of this backend"),
            std::string::npos)
      << one.out;  // card 2's fabric ID
  // Both ends held: checked, every lane locked, exit 0.
  auto both = npo_test::run_command(link + " prbs --seconds 0.1 --card 0 --port 1 --json --backend '" + uri +
                                    "?card=0,2' 2>&1");
  EXPECT_EQ(both.status, 0) << both.out;
  EXPECT_NE(both.out.find("\"far_end_checked\": true"), std::string::npos) << both.out;
  auto topo = npo_test::run_command(smi + " topo --backend '" + uri + "' 2>&1");
  EXPECT_EQ(topo.status, 0) << topo.out;
  EXPECT_NE(topo.out.find("56 of 56 ports with a module Up (read-only observer: trained nothing)"), std::string::npos)
      << topo.out;
  EXPECT_EQ(topo.out.find("trained Up in"), std::string::npos) << topo.out;
  // A module removal on a port without a module was accepted (exit 0) and changed nothing.
  const std::string emu = NPO_EMU;
  auto empty =
      npo_test::run_command(emu + " fault --socket-dir " + d.dir() + " --kind module_removal --card 0 --port 7 2>&1");
  EXPECT_EQ(empty.status, 1) << empty.out;
  EXPECT_NE(empty.out.find("card 0 port 7 has no module: nothing to remove"), std::string::npos) << empty.out;
  EXPECT_EQ(d.stop(), 0);
}

// An observer's topo takes the links as they are: after a lane is lost on card 2 port 3 (the
// daemon leaves the narrower retrain to the card's owner) it used to run the training
// supervisor, which tried to drop the lane, warned that its register write was dropped and
// said 2 ports "did not train Up". Now nothing is written and the message says why.
TEST(Emud, AnObserversTopoTrainsNothingAfterALaneIsLost) {
  EmudProcess d;
  ASSERT_TRUE(d.start(emud_path(), "emu:mesh8")) << d.output();
  const std::string emu = NPO_EMU, smi = NPO_SMI;
  auto fault = npo_test::run_command(emu + " fault --socket-dir " + d.dir() +
                                     " --kind lane_loss --card 2 --port 3 --lane 5 2>&1");
  ASSERT_EQ(fault.status, 0) << fault.out;
  std::string out;
  for (int i = 0; i < 50; ++i) {  // the link goes down 10 ms after the lane (link-loss debounce)
    auto topo = npo_test::run_command(smi + " topo --backend '" + d.uri() + "?mode=ro' 2>&1");
    EXPECT_EQ(topo.status, 0) << topo.out;
    out = topo.out;
    if (out.find("54 of 56 ports with a module Up") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_NE(out.find("npo-smi: 2 of 56 ports with a module are not Up (read-only observer: nothing was trained)"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("54 of 56 ports with a module Up (read-only observer: trained nothing)"), std::string::npos)
      << out;
  EXPECT_EQ(out.find("dropped"), std::string::npos) << "an observer wrote a register: " << out;
  EXPECT_EQ(out.find("did not train"), std::string::npos) << out;
  EXPECT_EQ(d.stop(), 0);
}

// Newcomer trial D: while a job holds card 0, `npo-link train --card 2 --port 0` used to fail
// "card 0 is open by pid P" (the owner tools attached every card). On emu-remote they now own
// the card asked for (URI option owner=K: the others read-only) and its link's far end when
// free; a held far end is named with its holder, and the link is retrained from this end.
TEST(Emud, OwnerToolsTakeOnlyTheCardAskedFor) {
  EmudProcess d;
  ASSERT_TRUE(d.start(emud_path(), "emu:mesh8")) << d.output();
  const std::string uri = d.uri();
  // owner=: card 2 owned, the others watched.
  {
    auto sys = npo::System::open(uri + "?owner=2");
    ASSERT_TRUE(sys.has_value()) << sys.error().to_string();
    ASSERT_EQ((*sys)->device_count(), 8u);
    for (std::size_t k = 0; k < 8; ++k) EXPECT_EQ((*sys)->device(k).info().read_only, k != 2) << k;
    auto bad = npo::System::open(uri + "?owner=9");
    ASSERT_FALSE(bad.has_value());
    EXPECT_NE(bad.error().message().find("serves no card 9"), std::string::npos) << bad.error().to_string();
    auto both = npo::System::open(uri + "?owner=2&mode=ro");
    ASSERT_FALSE(both.has_value());
    EXPECT_EQ(both.error().code(), Code::kInvalidArgument);
  }
  auto held = npo::System::open(uri + "?card=0");  // the job
  ASSERT_TRUE(held.has_value()) << held.error().to_string();
  const std::string pid = std::to_string(::getpid());
  const std::string link = NPO_LINK;
  auto train = npo_test::run_command(link + " train --backend " + uri + " --card 2 --port 0 2>&1");
  EXPECT_EQ(train.status, 0) << train.out;
  EXPECT_NE(train.out.find("card 2 port 0: OK"), std::string::npos) << train.out;
  EXPECT_NE(train.out.find("far end card 0 of card 2 port 0 is not available as owner (unavailable: card 0 is open by "
                           "pid " +
                           pid),
            std::string::npos)
      << train.out;
  EXPECT_EQ(train.out.find("card 0 port 2: OK"), std::string::npos) << train.out;
  // A free far end is retrained too (card 3 port 2 <-> card 2 port 2 on mesh8).
  auto free_far = npo_test::run_command(link + " train --backend " + uri + " --card 3 --port 2 2>&1");
  EXPECT_EQ(free_far.status, 0) << free_far.out;
  EXPECT_NE(free_far.out.find("card 3 port 2: OK"), std::string::npos) << free_far.out;
  EXPECT_NE(free_far.out.find("card 2 port 2: OK"), std::string::npos) << free_far.out;
  // The card asked for is held: the refusal names it.
  auto own = npo_test::run_command(link + " train --backend " + uri + " --card 0 --port 1 2>&1");
  EXPECT_EQ(own.status, 1) << own.out;
  EXPECT_NE(own.out.find("card 0 is open by pid " + pid), std::string::npos) << own.out;
  // prbs on a link whose far end is free checks both ends while card 0 is held.
  auto prbs = npo_test::run_command(link + " prbs --backend " + uri + " --card 2 --port 1 --seconds 0.2 --json 2>&1");
  EXPECT_EQ(prbs.status, 0) << prbs.out;
  EXPECT_NE(prbs.out.find("\"far_end_checked\": true"), std::string::npos) << prbs.out;
  held->reset();
  EXPECT_EQ(d.stop(), 0);
}

// Newcomer trial (2026-12-02): after a lane loss both ends of the link give up (Fault after 3
// attempts) and PORT.NEIGHBOR is cleared when training starts, so `npo-link train --card 2
// --port 0` found no far end, owned card 2 alone and failed TIMEOUT_CDR_LOCK on all lanes. The
// only other port in Fault is the far end: the tool owns it and retrains both ends; with two
// such ports it cannot tell and says how to name the far end.
TEST(Emud, TrainTakesTheFarEndOfALinkThatFailedAtBothEnds) {
  EmudProcess d;
  ASSERT_TRUE(d.start(emud_path(), "emu:mesh8")) << d.output();
  const std::string emu = NPO_EMU, link = NPO_LINK;
  auto watch = npo::System::open(d.uri() + "?mode=ro");
  ASSERT_TRUE(watch.has_value()) << watch.error().to_string();
  auto in_fault = [&](unsigned card, unsigned port) {
    for (int i = 0; i < 500; ++i) {  // the card's 3 attempts take ~4.5 s
      auto ps = npo::read_port((*watch)->device(card), port);
      if (ps && ps->state == npo::LinkState::kFault) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  };
  auto lose_lane = [&](unsigned card, unsigned port) {
    auto inj = npo_test::run_command(emu + " fault --socket-dir " + d.dir() + " --kind lane_loss --card " +
                                     std::to_string(card) + " --port " + std::to_string(port) + " --lane 3 2>&1");
    ASSERT_EQ(inj.status, 0) << inj.out;
  };
  // mesh8: card 2 port 0 <-> card 0 port 1, card 5 port 0 <-> card 0 port 4.
  ASSERT_NO_FATAL_FAILURE(lose_lane(2, 0));
  ASSERT_TRUE(in_fault(2, 0) && in_fault(0, 1)) << "both ends give up";
  auto train = npo_test::run_command(link + " train --backend " + d.uri() + " --card 2 --port 0 2>&1");
  EXPECT_EQ(train.status, 0) << train.out;
  EXPECT_NE(train.out.find("its far end is taken to be card 0 port 1, the only other port in Fault"), std::string::npos)
      << train.out;
  EXPECT_NE(train.out.find("card 2 port 0: OK"), std::string::npos) << train.out;
  EXPECT_NE(train.out.find("card 0 port 1: OK"), std::string::npos) << train.out;
  // Two links down: the far end is not guessed.
  ASSERT_NO_FATAL_FAILURE(lose_lane(2, 1));
  ASSERT_NO_FATAL_FAILURE(lose_lane(5, 0));
  ASSERT_TRUE(in_fault(2, 1) && in_fault(5, 0) && in_fault(0, 4)) << "both links give up at both ends";
  train = npo_test::run_command(link + " train --backend " + d.uri() + " --card 2 --port 1 2>&1");
  EXPECT_NE(train.status, 0) << train.out;
  EXPECT_NE(train.out.find("the far end of card 2 port 1 is not known"), std::string::npos) << train.out;
  EXPECT_NE(train.out.find("?owner=2,F"), std::string::npos) << train.out;
  watch->reset();
  EXPECT_EQ(d.stop(), 0);
}

// --manage-links routes around a link that stays down (a subnet manager's sweep): on mesh8
// card 2 reaches card 0 over their direct link; with card 2 port 0's module pulled, a remote
// write from card 2 into a window of card 0 still lands, over another card (2 hops).
TEST(Emud, ManagedLinksAreRoutedAroundALinkThatStaysDown) {
  EmudProcess d;
  ASSERT_TRUE(d.start(emud_path(), "emu:mesh8", {"--manage-links"})) << d.output();
  auto sys = npo::System::open(d.uri() + "?owner=0,2");
  ASSERT_TRUE(sys.has_value()) << sys.error().to_string();
  auto& target = (*sys)->device(0);
  auto& source = (*sys)->device(2);
  constexpr std::size_t kLen = 64u << 10;
  auto w = npo::export_window(target, 0, kLen);
  ASSERT_TRUE(w.has_value()) << w.error().to_string();
  auto q = source.open_queue({.engine = 0, .depth = 64});
  ASSERT_TRUE(q.has_value()) << q.error().to_string();
  auto src = npo::allocate_host_memory(source, kLen).value();
  auto write_once = [&](std::uint8_t fill) {
    std::memset(src->bytes().data(), fill, kLen);
    EXPECT_TRUE((*q)->enqueue_remote_write(DmaAddress::host(src->iova()), (*w)->handle(), 0, kLen));
    const auto c = npo_test::run(**q, 1);
    return c.size() == 1 ? c[0].status : OpStatus::kTimeout;
  };
  ASSERT_EQ(write_once(0x11), OpStatus::kOk) << "over the direct link";
  auto inj = npo_test::run_command(std::string(NPO_EMU) + " fault --socket-dir " + d.dir() +
                                   " --kind module_removal --card 2 --port 0 2>&1");
  ASSERT_EQ(inj.status, 0) << inj.out;
  for (int i = 0; i < 200 && d.output().find("routes recomputed over 54 ports up") == std::string::npos; ++i)
    (void)d.pump(100);
  const auto at = d.output().find("routes recomputed over 54 ports up: diameter 2 hops, 0 unreachable pairs (poll ");
  ASSERT_NE(at, std::string::npos) << d.output();
  // Within one poll (issue 32 point 5): the poll that first saw the link down rerouted, before
  // any retrain; it names both ends of the link lost.
  const std::string line = d.output().substr(at, d.output().find('\n', at) - at);
  unsigned poll = 0, since = 0;
  ASSERT_EQ(std::sscanf(line.c_str() + line.find("(poll "), "(poll %u; down since poll %u", &poll, &since), 2) << line;
  EXPECT_EQ(since + 1, poll) << line;
  EXPECT_NE(line.find("card 2 port 0"), std::string::npos) << line;
  EXPECT_NE(line.find("; up: none)"), std::string::npos) << line;
  auto ps = npo::read_port(source, 0);
  ASSERT_TRUE(ps.has_value());
  EXPECT_NE(ps->state, npo::LinkState::kUp) << "the direct link is down";
  EXPECT_EQ(write_once(0x22), OpStatus::kOk) << "routed over another card";
  auto map = npo::map_window(target, **w);
  ASSERT_TRUE(map.has_value());
  std::vector<std::byte> seen(kLen);
  ASSERT_TRUE((*map)->read(0, seen));
  EXPECT_EQ(seen[0], std::byte{0x22});
  EXPECT_EQ(seen[kLen - 1], std::byte{0x22});
  map->reset();  // everything of the cards before the System
  src.reset();
  q->reset();
  w->reset();
  sys->reset();
  EXPECT_EQ(d.stop(), 0);
}

std::vector<std::byte> process_map_msg(std::uint64_t iova, std::uint64_t size, const void* vaddr) {
  std::array<std::byte, emud::dma_map::kBytes> b{};
  emud::store<std::uint64_t>(b, emud::dma_map::kIova, iova);
  emud::store<std::uint64_t>(b, emud::dma_map::kSize, size);
  emud::store<std::uint64_t>(b, emud::dma_map::kFdOffset, reinterpret_cast<std::uintptr_t>(vaddr));
  emud::store<std::uint32_t>(b, emud::dma_map::kAccess, 1);
  emud::store<std::uint32_t>(b, emud::dma_map::kFlags, emud::dma_map::kFlagProcessMemory);
  return message(emud::Command::kDmaMap, b);
}

TEST(Emud, ProcessMemoryIsMappedOnlyByTheProcessThatOpenedTheConnection) {
  // emud-protocol.md §5.2 "Process memory": the daemon would reach the process that opened
  // the connection (SO_PEERCRED), so a forked child -- or any process handed the socket --
  // may not map memory on it; the kernel names each message's sender (SCM_CREDENTIALS).
  EmudProcess d;
  ASSERT_TRUE(d.start(emud_path(), "emu:2", {"--no-bring-up"})) << d.output();
  alignas(4096) static std::byte page[4096];
  Raw r(sock(d, 0));
  ASSERT_GE(r.fd, 0);
  ASSERT_EQ(r.call(version_msg(false)), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    const int code = r.call(process_map_msg(0x100000, 4096, page));
    _exit(code == static_cast<int>(Code::kFailedPrecondition) ? 0 : 10 + code);
  }
  int st = 0;
  ASSERT_EQ(::waitpid(child, &st, 0), child);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0) << "the child's map was not refused with failed_precondition";
  EXPECT_EQ(r.call(process_map_msg(0x100000, 4096, page)), 0) << "the opener maps its own memory";
  EXPECT_EQ(r.call(process_map_msg(0x200000, 4096, reinterpret_cast<const void*>(std::uintptr_t{1} << 47))),
            static_cast<int>(Code::kInvalidArgument))
      << "a range past user space";

  // Through the HAL: the emu-remote backend refuses it in the child before sending anything.
  auto sys = npo::System::open(d.uri() + "?card=1");
  ASSERT_TRUE(sys) << sys.error().to_string();
  const pid_t child2 = ::fork();
  if (child2 == 0) {
    auto m = npo::map_process_memory((*sys)->device(0), false);
    _exit(!m && m.error().code() == Code::kFailedPrecondition ? 0 : 1);
  }
  ASSERT_EQ(::waitpid(child2, &st, 0), child2);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  EXPECT_TRUE(npo::map_process_memory((*sys)->device(0), false)) << "the parent maps";
}

TEST(Emud, AProcessMapNeverReachesTheNextProcessWithTheSamePid) {
  // The opener maps its memory, hands the connection to a child ("holder") and exits; a new
  // process gets the opener's pid (ns_last_pid) and keeps a secret at the same address. The
  // holder's copy through the old mapping must fault, not read the newcomer (the daemon holds
  // a pidfd of the opener: emud-protocol.md §5.2).
  // Forcing a pid's reuse needs CAP_SYS_ADMIN (ns_last_pid); CI runs as root and runs it.
  if (::access("/proc/sys/kernel/ns_last_pid", W_OK) != 0) GTEST_SKIP() << "needs a writable ns_last_pid (root)";
  EmudProcess d;
  ASSERT_TRUE(d.start(emud_path(), "emu:2", {"--no-bring-up"})) << d.output();
  alignas(4096) static unsigned char buf[4096];
  const int shared_fd = ::memfd_create("result", 0);
  ASSERT_EQ(::ftruncate(shared_fd, 4096), 0);
  auto* shared = static_cast<unsigned char*>(::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, shared_fd, 0));
  ASSERT_NE(shared, MAP_FAILED);
  int go[2], report[2];
  ASSERT_EQ(::pipe(go), 0);
  ASSERT_EQ(::pipe(report), 0);
  const pid_t opener = ::fork();
  if (opener == 0) {
    std::memset(buf, 'O', sizeof buf);
    auto sys = npo::System::open(d.uri() + "?card=0");
    if (!sys) _exit(10);
    auto& dev = (*sys)->device(0);
    auto q = dev.open_queue({.engine = 0, .depth = 16});
    auto check = npo::allocate_host_memory(dev, 4096);
    auto map = npo::map_process_memory(dev, false);
    if (!q || !check || !map) _exit(11);
    const pid_t holder = ::fork();
    if (holder == 0) {
      char x;
      if (::read(go[0], &x, 1) != 1) _exit(20);
      (void)(*q)->enqueue_copy(DmaAddress::host((*map)->iova_of(buf)), DmaAddress::host((*check)->iova()), 4096);
      (void)(*q)->submit();
      std::array<npo::OpCompletion, 4> cs;
      for (int i = 0; i < 5000; ++i) {
        if ((*q)->poll(cs) == 1) {
          shared[0] = static_cast<unsigned char>((*check)->bytes()[0]);
          shared[1] = static_cast<unsigned char>(cs[0].status);
          shared[2] = 1;
          _exit(0);
        }
        ::usleep(1000);
      }
      _exit(21);
    }
    (void)!::write(report[1], &holder, sizeof holder);
    _exit(0);
  }
  pid_t holder = 0;
  ASSERT_EQ(::read(report[0], &holder, sizeof holder), static_cast<ssize_t>(sizeof holder));
  int st = 0;
  ASSERT_EQ(::waitpid(opener, &st, 0), opener);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  // Another process of the host may take the pid first: try a few times.
  pid_t newcomer = -1;
  for (int attempt = 0; attempt < 20 && newcomer != opener; ++attempt) {
    if (newcomer > 0) {
      ::kill(newcomer, SIGKILL);
      ::waitpid(newcomer, nullptr, 0);
    }
    {
      std::ofstream f("/proc/sys/kernel/ns_last_pid");
      f << (opener - 1);
    }
    int ready[2];
    ASSERT_EQ(::pipe(ready), 0);
    newcomer = ::fork();
    if (newcomer == 0) {
      std::memset(buf, 'V', sizeof buf);
      (void)!::write(ready[1], "x", 1);
      ::pause();
      _exit(0);
    }
    char x;
    ASSERT_EQ(::read(ready[0], &x, 1), 1);
    ::close(ready[0]);
    ::close(ready[1]);
  }
  if (newcomer != opener) {
    ::kill(newcomer, SIGKILL);
    ::waitpid(newcomer, nullptr, 0);
    ::kill(holder, SIGKILL);
    // Only when 20 tries in a row lost the pid to other processes of a busy host.
    GTEST_SKIP() << "the next process did not get pid " << opener << " in 20 tries";
  }
  ASSERT_EQ(::write(go[1], "g", 1), 1);
  for (int i = 0; i < 10000 && shared[2] == 0; ++i) ::usleep(1000);
  ::kill(newcomer, SIGKILL);
  ::waitpid(newcomer, nullptr, 0);
  ASSERT_EQ(shared[2], 1) << "the holder reported nothing";
  EXPECT_EQ(shared[1], static_cast<unsigned char>(OpStatus::kIommuFault));
  EXPECT_NE(shared[0], 'V') << "the card read the memory of the process that got the dead opener's pid";
}

}  // namespace

namespace {
/// Threads of process `pid` whose Cpus_allowed_list is exactly `cpus`.
int threads_allowed_exactly(pid_t pid, const std::string& cpus) {
  int n = 0;
  std::error_code ec;
  for (const auto& t : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    std::ifstream f(t.path() / "status");
    std::string line;
    while (std::getline(f, line))
      if (line.rfind("Cpus_allowed_list:", 0) == 0 && line.substr(line.find_first_not_of(" \t", 18)) == cpus) ++n;
  }
  return n;
}
}  // namespace

TEST(Emud, ASessionThreadRunsWhereItsBoundClientRuns) {
  // ServerOptions::follow_client_cpus: a client bound to a subset of the CPUs (mpirun binds
  // each rank to a core) gets a session thread bound to the same CPUs, so its doorbells wake a
  // thread on its own CPU; an unbound client's session thread stays unbound, and
  // --session-cpus any turns the binding off.
  cpu_set_t mine;
  CPU_ZERO(&mine);
  ASSERT_EQ(::sched_getaffinity(0, sizeof mine, &mine), 0);
  // With one CPU no client can be bound to a strict subset of the daemon's CPUs, so the
  // feature has nothing to do there (it binds only then). CI's machine has 2 and runs it.
  if (CPU_COUNT(&mine) < 2) GTEST_SKIP() << "needs 2 CPUs to bind a client to a strict subset";
  int cpu = 0;
  while (!CPU_ISSET(cpu, &mine)) ++cpu;
  for (const bool follow : {true, false}) {
    SCOPED_TRACE(follow ? "--session-cpus client" : "--session-cpus any");
    EmudProcess d;
    ASSERT_TRUE(d.start(emud_path(), "emu:2", {"--no-bring-up", "--session-cpus", follow ? "client" : "any"}))
        << d.output();
    auto bound = fork_child([&](int in, int out) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpu, &one);
      if (::sched_setaffinity(0, sizeof one, &one) != 0) return 2;
      Raw r(sock(d, 0));
      if (r.call(version_msg(false)) != 0) return 3;  // the reply: the session thread exists
      send_byte(out, 'o');
      (void)recv_byte(in, 30000);
      return 0;
    });
    ASSERT_EQ(recv_byte(bound->from_child), 'o');
    const pid_t bound_pid = bound->pid;
    Raw unbound(sock(d, 1));
    ASSERT_EQ(unbound.call(version_msg(false)), 0);
    EXPECT_EQ(threads_allowed_exactly(d.pid(), std::to_string(cpu)), follow ? 1 : 0)
        << "daemon threads bound to CPU " << cpu << " alone";
    send_byte(bound->to_child, 'q');
    EXPECT_EQ(bound->wait(10000), 0);
    EXPECT_EQ(d.stop(), 0);
    const std::string line =
        "card=0 pid=" + std::to_string(bound_pid) + ": session thread follows the client's 1 CPU(s)";
    EXPECT_EQ(d.output().find(line) != std::string::npos, follow) << d.output();
    EXPECT_EQ(d.output().find("card=1 pid=" + std::to_string(::getpid()) + ": session thread follows"),
              std::string::npos)
        << "an unbound client's session thread is left where the kernel puts it";
  }
}
