// SPDX-License-Identifier: Apache-2.0
// npo-emud's server (docs/spec/emud-protocol.md): one listening socket per card, one thread
// per connection, each message parsed by parse_command and executed on the card's
// backend::Device (the emulator's own backend) or, for read-only attaches, on the card model.
#include "npo/emu/server.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <iterator>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "card.hpp"
#include "npo/fw/emud.hpp"
#include "npo/fw/pci.hpp"
#include "server/protocol.hpp"
#include "server/sigbus_guard.hpp"
#include "system.hpp"

namespace npo::emu {

namespace emud = fw::emud;
namespace pci = fw::pci;
using server::ParsedCommand;

static_assert(static_cast<unsigned>(FaultKind::kTrainingTimeout) == emud::fault::kMaxKind,
              "INJECT_FAULT's kind range follows FaultKind");

namespace {

struct CardSlot {
  std::mutex mu;
  std::condition_variable released;
  pid_t owner = 0;
};

/// How long a new owner waits for the previous one's disconnect to be processed (a client
/// that closes and reopens at once must not see its own old connection as the holder).
constexpr auto kReleaseGrace = std::chrono::milliseconds(250);

struct Mapping {
  void* addr = nullptr;
  std::uint64_t size = 0;
  int guard_slot = -1;  ///< server::guard_mapping slot of unsealed memory, -1: sealed
};

void close_all(std::vector<int>& fds) {
  for (int fd : fds)
    if (fd >= 0) ::close(fd);
  fds.clear();
}

}  // namespace

struct Server::Impl {
  std::shared_ptr<Emulator> emu;
  std::unique_ptr<backend::Backend> backend;
  ServerOptions opts;
  int lock_fd = -1;
  int wake_fd = -1;
  std::vector<int> listen_fds;
  std::vector<std::filesystem::path> socket_paths;
  std::vector<std::unique_ptr<CardSlot>> slots;
  std::thread acceptor;
  std::mutex sessions_mu;
  struct SessionThread {
    std::thread thread;
    std::atomic<bool> done{false};
  };
  std::list<SessionThread> session_threads;
  std::atomic<bool> stopping{false};
  std::mutex log_mu;
  bool stopped = false;

  void log(const std::string& line) {
    if (!opts.log) return;
    std::lock_guard lock(log_mu);
    opts.log(line);
  }
  void accept_loop();
  void serve(int conn, std::uint32_t card);
};

namespace {

/// One connection to one card.
class Session {
 public:
  Session(Server::Impl& srv, int conn, std::uint32_t card) : srv_(srv), conn_(conn), card_(card) {
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) pid_ = cred.pid;
    if (srv_.opts.follow_client_cpus && pid_ > 0) follow_client_cpus();
    // Every message then carries its sender's pid, checked by the kernel (SCM_CREDENTIALS):
    // a process that inherited or received this connection is not the one that opened it.
    const int one = 1;
    (void)::setsockopt(conn, SOL_SOCKET, SO_PASSCRED, &one, sizeof one);
    msix_fds_.fill(-1);
    // One epoll set for the thread's whole life instead of a poll(2) of the same fds per wake,
    // which registers and unregisters a wait on each fd in every call, on the doorbell's path.
    ep_ = ::epoll_create1(EPOLL_CLOEXEC);
    if (ep_ >= 0 && (!watch(conn_, kEvConn) || !watch(srv_.wake_fd, kEvWake))) {
      ::close(ep_);
      ep_ = -1;
    }
  }
  ~Session() { release(); }

  static constexpr int kEvConn = 1, kEvWake = 2, kEvBell = 4;
  /// Adds `fd` to the epoll set, readable, reported as `tag` (kEv*). False if epoll_ctl failed.
  bool watch(int fd, int tag) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u32 = static_cast<std::uint32_t>(tag);
    return ::epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev) == 0;
  }
  /// Waits until the connection, the server's wake fd or the doorbell eventfd is readable and
  /// returns the tags (kEv*) of those that are; 0 on EINTR, -1 on another error (errno set).
  /// poll(2) when the epoll set could not be made.
  int wait_ready() {
    if (ep_ >= 0) {
      std::array<epoll_event, 3> ev{};
      const int n = ::epoll_wait(ep_, ev.data(), static_cast<int>(ev.size()), -1);
      if (n < 0) return errno == EINTR ? 0 : -1;
      int tags = 0;
      for (int i = 0; i < n; ++i) tags |= static_cast<int>(ev[static_cast<std::size_t>(i)].data.u32);
      return tags;
    }
    pollfd p[3] = {{conn_, POLLIN, 0}, {srv_.wake_fd, POLLIN, 0}, {bell_fd_, POLLIN, 0}};
    if (::poll(p, bell_fd_ >= 0 ? 3 : 2, -1) < 0) return errno == EINTR ? 0 : -1;
    return (p[0].revents != 0 ? kEvConn : 0) | (p[1].revents != 0 ? kEvWake : 0) |
           (bell_fd_ >= 0 && p[2].revents != 0 ? kEvBell : 0);
  }

  // ServerOptions::follow_client_cpus: this thread runs where the client may run, if the
  // client is bound to a strict subset of the CPUs this thread may use.
  void follow_client_cpus() {
    // Sized for every CPU the kernel may have (a fixed cpu_set_t holds 1024: sched_getaffinity
    // fails with EINVAL beyond). The client's mask is its main thread's (sched_getaffinity of
    // the pid), as mpirun binds a whole process.
    const long ncpu = std::max(::sysconf(_SC_NPROCESSORS_CONF), 1L);
    const std::size_t size = CPU_ALLOC_SIZE(ncpu);
    cpu_set_t* client = CPU_ALLOC(ncpu);
    cpu_set_t* own = CPU_ALLOC(ncpu);
    cpu_set_t* both = CPU_ALLOC(ncpu);
    if (client && own && both) {
      CPU_ZERO_S(size, client);
      CPU_ZERO_S(size, own);
      if (::sched_getaffinity(pid_, size, client) != 0 || ::pthread_getaffinity_np(::pthread_self(), size, own) != 0) {
        srv_.log(fmt::format("card={} pid={}: session thread left unbound: reading CPU affinity failed: {}", card_,
                             pid_, std::strerror(errno)));
      } else {
        CPU_AND_S(size, both, client, own);
        const int n = CPU_COUNT_S(size, both);
        if (n != 0 && n < CPU_COUNT_S(size, own)) {
          if (::pthread_setaffinity_np(::pthread_self(), size, both) == 0) {
            srv_.log(fmt::format("card={} pid={}: session thread follows the client's {} CPU(s)", card_, pid_, n));
          }
        }
      }
    }
    if (client) CPU_FREE(client);
    if (own) CPU_FREE(own);
    if (both) CPU_FREE(both);
  }

  void run() {
    std::vector<std::byte> buf(emud::kMaxMessage + 1);
    alignas(cmsghdr) std::array<char, CMSG_SPACE(sizeof(int) * emud::kMaxFds) + CMSG_SPACE(sizeof(ucred))> ctrl{};
    while (!srv_.stopping.load()) {
      const int ready = wait_ready();
      if (ready < 0) {
        srv_.log(fmt::format("card={} pid={}: waiting for the client failed: {}", card_, pid_, std::strerror(errno)));
        break;
      }
      if (ready == 0) continue;
      if ((ready & kEvWake) != 0 || srv_.stopping.load()) break;
      if (bell_fd_ >= 0 && (ready & kEvBell) != 0) {
        // Shadow doorbells (spec §5.11): the values first, so that the card runs them before
        // the read(2) that takes the ring (the eventfd's count; ~1 us on the doorbell's path on
        // a 2-vCPU VM), then the values once more: a doorbell whose ring that read took was
        // stored before it, so the second scan sees it.
        apply_shadow();
        std::uint64_t rings = 0;
        (void)!::read(bell_fd_, &rings, sizeof rings);
        apply_shadow();
        if ((ready & kEvConn) == 0) continue;
      }
      iovec iov{buf.data(), buf.size()};
      msghdr mh{};
      mh.msg_iov = &iov;
      mh.msg_iovlen = 1;
      mh.msg_control = ctrl.data();
      mh.msg_controllen = ctrl.size();
      const ssize_t n = ::recvmsg(conn_, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      std::vector<int> fds;
      // Only a message that arrived has descriptors: after a failed recvmsg the control buffer
      // still holds the previous message's (long closed) fds, which must not be closed again.
      msg_pid_ = 0;
      for (cmsghdr* c = n > 0 ? CMSG_FIRSTHDR(&mh) : nullptr; c != nullptr; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS && c->cmsg_len >= CMSG_LEN(sizeof(ucred))) {
          ucred uc{};
          std::memcpy(&uc, CMSG_DATA(c), sizeof uc);
          msg_pid_ = uc.pid;
          continue;
        }
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        const std::size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (std::size_t i = 0; i < k; ++i) {
          int fd = -1;
          std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
          fds.push_back(fd);
        }
      }
      if (n <= 0) {
        if (n < 0) srv_.log(fmt::format("card={} pid={}: recvmsg failed: {}", card_, pid_, std::strerror(errno)));
        close_all(fds);
        break;
      }
      if ((mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) {
        close_all(fds);
        reply_error(0, 0, Code::kInvalidArgument, "message or its file descriptors exceed the protocol's limits");
        continue;
      }
      // Every doorbell the client put in the shadow page before it sent this message reaches the
      // card first (§5.11: the page and the socket keep one order).
      apply_shadow();
      const auto msg = std::span<const std::byte>(buf.data(), static_cast<std::size_t>(n));
      handle(msg, fds);
      close_all(fds);  // whatever handle() did not take
      // A posted write is counted once handled, so the client rings through the page only when
      // the card has seen all it posted (§5.11).
      if (shadow_ != nullptr && msg.size() >= emud::hdr::kBytes &&
          (emud::load<std::uint32_t>(msg, emud::hdr::kFlags) & emud::kFlagNoReply) != 0) {
        shadow_word(emud::shadow::kHandled).store(++posted_handled_, std::memory_order_release);
      }
    }
  }

 private:
  Card& card() { return srv_.emu->card(card_); }

  void send(std::span<const std::byte> msg, int fd = -1) {
    iovec iov{const_cast<std::byte*>(msg.data()), msg.size()};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    alignas(cmsghdr) std::array<char, CMSG_SPACE(sizeof(int))> ctrl{};
    if (fd >= 0) {
      mh.msg_control = ctrl.data();
      mh.msg_controllen = ctrl.size();
      cmsghdr* c = CMSG_FIRSTHDR(&mh);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
    }
    (void)::sendmsg(conn_, &mh, MSG_NOSIGNAL);
  }
  void reply_ok(const ParsedCommand& c, std::span<const std::byte> body = {}, int fd = -1) {
    if (c.no_reply) return;
    server::build_reply(out_, c.msg_id, static_cast<std::uint16_t>(c.command), Code::kOk, body);
    send(out_, fd);
  }
  void reply_error(std::uint16_t id, std::uint16_t cmd, Code code, std::string_view text) {
    server::build_reply(out_, id, cmd, code, {}, text);
    send(out_);
  }
  void reply_error(const ParsedCommand& c, const Error& e) {
    // A posted write that fails is reported anyway: the client reads it before its next reply.
    reply_error(c.msg_id, static_cast<std::uint16_t>(c.command), e.code(), e.message());
  }

  void handle(std::span<const std::byte> msg, std::vector<int>& fds) {
    bool header_ok = false;
    std::uint16_t id = 0, cmd = 0;
    auto pc = server::parse_command(msg, fds.size(), &header_ok, &id, &cmd);
    if (!pc) {
      reply_error(id, cmd, pc.error().code(), pc.error().message());
      return;
    }
    const ParsedCommand& c = *pc;
    if (c.command == emud::Command::kVersion) return version(c);
    if (!attached_) {
      return reply_error(c, Error(Code::kFailedPrecondition, "send VERSION first (docs/spec/emud-protocol.md §2)"));
    }
    if (c.command == emud::Command::kInjectFault) return inject_fault(c);
    if (c.command == emud::Command::kMailboxObserve) return mailbox_observe(c);
    if (read_only_) return read_only(c);
    switch (c.command) {
      case emud::Command::kVersion: return;
      case emud::Command::kDeviceGetInfo: return device_info(c);
      case emud::Command::kRegionInfo: return region_info(c);
      case emud::Command::kRegionRead: return region_read(c);
      case emud::Command::kRegionWrite: return region_write(c);
      case emud::Command::kDmaMap: return dma_map(c, fds);
      case emud::Command::kDmaUnmap: return dma_unmap(c);
      case emud::Command::kSetIrqs: return set_irqs(c, fds);
      case emud::Command::kInjectFault:
      case emud::Command::kMailboxObserve: return;
      case emud::Command::kDeviceReset: {
        auto r = dev_->reset();
        // A reset card starts every queue from index 0 (registers.md §5.2): so do its shadows.
        for (std::uint32_t q = 0; q < shadow_queues_; ++q) zero_shadow(q);
        if (!r) return reply_error(c, r.error());
        return reply_ok(c);
      }
      case emud::Command::kDoorbellShadow: return doorbell_shadow(c, fds);
      case emud::Command::kEngineShare: return engine_share(c);
      case emud::Command::kHbmFd: return hbm_fd(c);
      case emud::Command::kEngineEvent: return engine_event(c);
    }
  }

  // ---- The owner runs its card's engines (spec §5.12) ----

  void engine_share(const ParsedCommand& c) {
    if (engine_tag_ != 0) {
      return reply_error(c, Error(Code::kAlreadyExists, "ENGINE_SHARE: this connection shares the engine state"));
    }
    if (shadow_ == nullptr) {
      return reply_error(c, Error(Code::kFailedPrecondition,
                                  "ENGINE_SHARE needs the connection's shadow page (DOORBELL_SHADOW first): its "
                                  "handled count orders the owner's doorbells after its posted writes"));
    }
    FabricState& fs = *srv_.emu->impl().fabric_state;
    if (fs.fd() < 0) {
      return reply_error(c, Error(Code::kUnimplemented, "ENGINE_SHARE: this emulator's engine state is not shareable"));
    }
    // A tag no process of the daemon's uses (the daemon's engines lock with its pid), unique per
    // connection, so that a disconnect frees exactly this owner's locks.
    static std::atomic<std::uint32_t> next_tag{0};
    engine_tag_ = 0x80000000u | (next_tag.fetch_add(1) & 0x7fffffffu);
    std::array<std::byte, emud::engine::kShareReplyBytes> b{};
    emud::store<std::uint32_t>(b, emud::engine::kReplyCards, fs.cards());
    emud::store<std::uint32_t>(b, emud::engine::kReplyCard, card_);
    emud::store<std::uint32_t>(b, emud::engine::kReplyLayout, FabricState::kLayout);
    emud::store<std::uint32_t>(b, emud::engine::kReplyLockTag, engine_tag_);
    emud::store<std::uint64_t>(b, emud::engine::kReplyStateBytes, fs.bytes());
    reply_ok(c, b, fs.fd());
    srv_.log(fmt::format("card={} pid={}: the owner runs the card's DMA engines", card_, pid_));
  }

  void hbm_fd(const ParsedCommand& c) {
    if (engine_tag_ == 0) {
      return reply_error(c, Error(Code::kFailedPrecondition, "HBM_FD: send ENGINE_SHARE first"));
    }
    auto& impl = srv_.emu->impl();
    if (c.target_card >= impl.cards.size()) {
      return reply_error(c, Error(Code::kOutOfRange, fmt::format("HBM_FD: card {} past the supernode's {} cards",
                                                                 c.target_card, impl.cards.size())));
    }
    const auto [fd, off] = impl.hbm_fd(c.target_card);
    std::array<std::byte, emud::engine::kHbmReplyBytes> b{};
    emud::store<std::uint64_t>(b, emud::engine::kHbmReplySize, impl.cards[c.target_card]->hbm().size());
    emud::store<std::uint64_t>(b, emud::engine::kHbmReplyFdOffset, off);
    reply_ok(c, b, fd);
  }

  void engine_event(const ParsedCommand& c) {
    if (engine_tag_ == 0) {
      return reply_error(c, Error(Code::kFailedPrecondition, "ENGINE_EVENT: send ENGINE_SHARE first"));
    }
    namespace e = emud::engine;
    switch (c.event_kind) {
      case e::kEventIommuFault:
        card().record_iommu_fault(c.event_value, c.event_queue, (c.event_flags & e::kEventWrite) != 0,
                                  (c.event_flags & e::kEventPerm) != 0);
        break;
      case e::kEventError: card().set_error(static_cast<std::uint32_t>(c.event_value)); break;
      case e::kEventMsix:
        if (c.event_value >= pci::kMsixVectors) {
          return reply_error(c, Error(Code::kOutOfRange, fmt::format("ENGINE_EVENT: MSI-X vector {}", c.event_value)));
        }
        card().raise_msix(static_cast<unsigned>(c.event_value));
        break;
      case e::kEventHalted: card().queue_halted(c.event_queue, c.event_value); break;
      default: break;
    }
    reply_ok(c);
  }

  // ---- Shadow doorbells (spec §5.11) ----

  std::atomic_ref<std::uint32_t> shadow_word(std::size_t offset) {
    return std::atomic_ref<std::uint32_t>(*reinterpret_cast<std::uint32_t*>(shadow_ + offset));
  }
  /// Queue q restarts from index 0 (enabled, reset): its shadows and what was applied follow.
  void zero_shadow(std::uint32_t q) {
    shadow_word(q * emud::shadow::kStride + emud::shadow::kSqTail).store(0, std::memory_order_relaxed);
    shadow_word(q * emud::shadow::kStride + emud::shadow::kCqHead).store(0, std::memory_order_relaxed);
    applied_sq_[q] = applied_cq_[q] = 0;
  }
  /// Writes to the card every shadowed doorbell that changed since it was last applied: all
  /// CQ_HEADs first (room in a completion queue before its submissions run), then the SQ_TAILs.
  /// The card checks each value as it checks a REGION_WRITE (registers.md §5.3, §5.4).
  void apply_shadow() {
    if (shadow_ == nullptr || bar0_ == nullptr) return;
    auto apply = [&](std::size_t slot, std::uint32_t reg, auto& applied) {
      for (std::uint32_t q = 0; q < shadow_queues_; ++q) {
        const std::uint32_t v = shadow_word(q * emud::shadow::kStride + slot).load(std::memory_order_acquire);
        if (v == applied[q]) continue;
        applied[q] = v;
        bar0_->write32(fw::regs::queue_reg(q, reg), v);
      }
    };
    apply(emud::shadow::kCqHead, fw::regs::queue::kCqHead, applied_cq_);
    apply(emud::shadow::kSqTail, fw::regs::queue::kSqTail, applied_sq_);
  }
  void doorbell_shadow(const ParsedCommand& c, std::vector<int>& fds) {
    if (shadow_ != nullptr) {
      return reply_error(c, Error(Code::kAlreadyExists, "DOORBELL_SHADOW: this connection has its shadow page"));
    }
    // Only a counting eventfd: anything else (another fd, or an EFD_SEMAPHORE eventfd, which a
    // read decrements by one) could poll readable for ever and spin this thread.
    const int efd = fds.at(0);
    std::ifstream info(fmt::format("/proc/self/fdinfo/{}", efd));
    const std::string fdinfo((std::istreambuf_iterator<char>(info)), std::istreambuf_iterator<char>());
    if (fdinfo.find("\neventfd-count:") == std::string::npos) {
      return reply_error(c, Error(Code::kInvalidArgument, "DOORBELL_SHADOW: the attached fd is not an eventfd"));
    }
    if (fdinfo.find("\neventfd-semaphore: 1") != std::string::npos) {
      return reply_error(c, Error(Code::kInvalidArgument,
                                  "DOORBELL_SHADOW: the eventfd is in semaphore mode (EFD_SEMAPHORE); ring with a "
                                  "counting one"));
    }
    auto m = dev_->mmio(pci::kBarRegs);
    if (!m) return reply_error(c, m.error());
    // Watched before anything changes; taken out again on the error below (closing our fd would
    // not do it: the client's copy keeps the open file, and so its registration, alive).
    if (ep_ >= 0 && !watch(efd, kEvBell)) {
      const int err = errno;
      return reply_error(
          c, Error(errno_code(err), fmt::format("DOORBELL_SHADOW: epoll_ctl of the eventfd: {}", std::strerror(err))));
    }
    const auto queues = std::min<std::uint32_t>(fw::regs::kNumQueues, emud::shadow::kMaxQueues);
    const int mfd = ::memfd_create("npo-emud doorbell shadow", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    void* p = MAP_FAILED;
    if (mfd >= 0 && ::ftruncate(mfd, emud::shadow::kPageBytes) == 0) {
      p = ::mmap(nullptr, emud::shadow::kPageBytes, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    }
    // Sealed: the client can neither shrink the page under this mapping nor resize it.
    if (p == MAP_FAILED || ::fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
      const int err = errno;
      if (p != MAP_FAILED) ::munmap(p, emud::shadow::kPageBytes);
      if (mfd >= 0) ::close(mfd);
      if (ep_ >= 0) (void)::epoll_ctl(ep_, EPOLL_CTL_DEL, efd, nullptr);
      return reply_error(c,
                         Error(errno_code(err), fmt::format("DOORBELL_SHADOW: shadow page: {}", std::strerror(err))));
    }
    shadow_ = static_cast<std::byte*>(p);
    bar0_ = *m;
    shadow_queues_ = queues;
    // The page starts as the card's registers are, so that nothing is applied at once.
    for (std::uint32_t q = 0; q < queues; ++q) {
      applied_sq_[q] = bar0_->read32(fw::regs::queue_reg(q, fw::regs::queue::kSqTail));
      applied_cq_[q] = bar0_->read32(fw::regs::queue_reg(q, fw::regs::queue::kCqHead));
      shadow_word(q * emud::shadow::kStride + emud::shadow::kSqTail).store(applied_sq_[q]);
      shadow_word(q * emud::shadow::kStride + emud::shadow::kCqHead).store(applied_cq_[q]);
    }
    posted_handled_ = 0;
    shadow_word(emud::shadow::kHandled).store(0, std::memory_order_release);
    (void)::fcntl(efd, F_SETFL, ::fcntl(efd, F_GETFL) | O_NONBLOCK);
    bell_fd_ = efd;
    fds.clear();  // the eventfd is ours now
    std::array<std::byte, emud::shadow::kBytes> body{};
    emud::store<std::uint32_t>(body, emud::shadow::kReplyQueues, queues);
    emud::store<std::uint32_t>(body, emud::shadow::kReplyStride, static_cast<std::uint32_t>(emud::shadow::kStride));
    reply_ok(c, body, mfd);
    ::close(mfd);  // the mapping and the client's copy keep the page
    srv_.log(fmt::format("card={} pid={}: shadow doorbells for {} queues", card_, pid_, queues));
  }

  void version(const ParsedCommand& c) {
    if (attached_) return reply_error(c, Error(Code::kFailedPrecondition, "VERSION sent twice"));
    if (c.major != emud::kVersionMajor) {
      return reply_error(c, Error(Code::kFailedPrecondition,
                                  fmt::format("protocol version {}.{} not supported: the daemon speaks {}.{}", c.major,
                                              c.minor, emud::kVersionMajor, emud::kVersionMinor)));
    }
    read_only_ = (c.attach_flags & emud::version::kAttachReadOnly) != 0;
    if (!read_only_) {
      CardSlot& slot = *srv_.slots[card_];
      std::unique_lock lock(slot.mu);
      slot.released.wait_for(lock, kReleaseGrace, [&] { return slot.owner == 0; });
      if (slot.owner != 0 && slot.owner == pid_) {
        return reply_error(c, Error(Code::kAlreadyExists,
                                    fmt::format("card {} is already open by this process (pid {})", card_, pid_)));
      }
      if (slot.owner != 0) {
        return reply_error(
            c, Error(Code::kUnavailable, fmt::format("card {} is open by pid {} (one client per card; tools attach "
                                                     "read-only with ?mode=ro)",
                                                     card_, slot.owner)));
      }
      const auto addr = card().function_info().address;
      auto d = srv_.backend->open(addr);
      if (!d) return reply_error(c, d.error());
      dev_ = std::move(*d);
      slot.owner = pid_ > 0 ? pid_ : 1;
      owner_ = true;
      dma_at_attach_ = card().dma_totals();
    }
    attached_ = true;
    srv_.log(fmt::format("connect card={} pid={} mode={}", card_, pid_, read_only_ ? "read-only" : "owner"));
    std::array<std::byte, emud::version::kBytes> b{};
    emud::store<std::uint16_t>(b, emud::version::kMajor, emud::kVersionMajor);
    emud::store<std::uint16_t>(b, emud::version::kMinor, emud::kVersionMinor);
    emud::store<std::uint32_t>(b, emud::version::kPid, static_cast<std::uint32_t>(::getpid()));
    emud::store<std::uint32_t>(b, emud::version::kCard, card_);
    reply_ok(c, b);
  }

  /// Faults are the emulator's test harness: any attach (owner or read-only) may inject them,
  /// into the card its socket serves.
  void inject_fault(const ParsedCommand& c) {
    if (c.fault_card != card_) {
      return reply_error(c, Error(Code::kInvalidArgument,
                                  fmt::format("fault for card {} sent to card {}'s socket", c.fault_card, card_)));
    }
    auto opt = [](std::uint32_t v) -> std::optional<unsigned> {
      return v == emud::fault::kNone ? std::nullopt : std::optional<unsigned>(v);
    };
    Fault f;
    f.at_ns = srv_.emu->now_ns() + c.delay_ns;
    f.kind = static_cast<FaultKind>(c.fault_kind);
    f.card = card_;
    f.engine = opt(c.fault_engine);
    f.queue = opt(c.fault_queue);
    f.port = opt(c.fault_port);
    f.lane = opt(c.fault_lane);
    f.count = c.count;
    f.value = c.fault_value;
    f.duration_ns = c.duration_ns;
    if (auto r = srv_.emu->inject(f); !r) return reply_error(c, r.error());
    // Where it lands, as given: an operator reading the log needs the port and lane of a link
    // fault, the queue of a DMA fault.
    std::string where;
    const auto field = [&where](const char* name, std::optional<unsigned> v) {
      if (v) where += fmt::format(" {}={}", name, *v);
    };
    field("engine", f.engine);
    field("queue", f.queue);
    field("port", f.port);
    field("lane", f.lane);
    if (f.count != 1) where += fmt::format(" count={}", f.count);
    if (f.value != 0) where += fmt::format(" value={:g}", f.value);
    if (f.duration_ns != 0) where += fmt::format(" duration_ms={:g}", static_cast<double>(f.duration_ns) / 1e6);
    srv_.log(fmt::format("fault {} card={}{} injected by pid={}", fault_name(f.kind), card_, where, pid_));
    reply_ok(c);
  }

  /// A read-only firmware request answered beside the card's BAR0 mailbox (spec §5.10): the
  /// owner's mailbox exchange is never touched. Allowed on every attach.
  void mailbox_observe(const ParsedCommand& c) {
    std::string refused;
    auto rsp = card().firmware().observe(c.data, refused);
    if (!refused.empty()) {
      return reply_error(c, Error(Code::kPermissionDenied,
                                  fmt::format("card {}: mailbox command {} changes the card; only the owner's attach "
                                              "may send it (through BAR0)",
                                              card_, refused)));
    }
    reply_ok(c, rsp);
  }

  void device_info(const ParsedCommand& c) {
    const auto fi = card().function_info();
    std::array<std::byte, emud::info::kBytes> b{};
    emud::store<std::uint16_t>(b, emud::info::kDomain, fi.address.domain);
    emud::store<std::uint8_t>(b, emud::info::kBus, fi.address.bus);
    emud::store<std::uint8_t>(b, emud::info::kDevice, fi.address.device);
    emud::store<std::uint8_t>(b, emud::info::kFunction, fi.address.function);
    emud::store<std::uint16_t>(b, emud::info::kVendorId, fi.vendor_id);
    emud::store<std::uint16_t>(b, emud::info::kDeviceId, fi.device_id);
    emud::store<std::uint16_t>(b, emud::info::kSubVendorId, fi.subsystem_vendor_id);
    emud::store<std::uint16_t>(b, emud::info::kSubsystemId, fi.subsystem_id);
    emud::store<std::uint32_t>(b, emud::info::kClassCode, fi.class_code);
    emud::store<std::int32_t>(b, emud::info::kNumaNode, fi.numa_node);
    emud::store<std::uint32_t>(b, emud::info::kNumRegions, 8);
    emud::store<std::uint32_t>(b, emud::info::kMsixVectors, pci::kMsixVectors);
    emud::store<std::uint64_t>(b, emud::info::kIovaFirst, Iommu::kIovaFirst);
    emud::store<std::uint64_t>(b, emud::info::kIovaLast, Iommu::kIovaLast);
    emud::store<std::uint32_t>(b, emud::info::kCardIndex, card_);
    {
      CardSlot& slot = *srv_.slots[card_];
      std::lock_guard lock(slot.mu);
      emud::store<std::uint32_t>(b, emud::info::kOwnerPid, static_cast<std::uint32_t>(slot.owner));
    }
    reply_ok(c, b);
  }

  void region_info(const ParsedCommand& c) {
    if (c.region > 5) return reply_error(c, Error(Code::kInvalidArgument, fmt::format("BAR index {} > 5", c.region)));
    backend::RegionInfo ri;
    if (dev_) {
      auto r = dev_->region_info(c.region);
      if (!r) return reply_error(c, r.error());
      ri = *r;
    } else {
      ri.size = card().bar_size(c.region);
    }
    std::array<std::byte, emud::region_info::kBytes> b{};
    std::uint32_t flags = ri.size != 0 ? (emud::region_info::kRead | emud::region_info::kWrite) : 0u;
    if (ri.prefetchable) flags |= emud::region_info::kPrefetchable;
    if (ri.is_64bit) flags |= emud::region_info::k64Bit;
    int fd = -1;
    std::uint64_t off = 0, msize = 0;
    if (ri.mappable && dev_) {
      if (auto a = dev_->aperture_fd(c.region); a) {
        flags |= emud::region_info::kMmap;
        fd = a->fd;
        off = a->offset;
        msize = a->size;
      }
    }
    emud::store<std::uint32_t>(b, emud::region_info::kIndex, c.region);
    emud::store<std::uint32_t>(b, emud::region_info::kFlags, flags);
    emud::store<std::uint64_t>(b, emud::region_info::kSize, ri.size);
    emud::store<std::uint64_t>(b, emud::region_info::kMmapOffset, off);
    emud::store<std::uint64_t>(b, emud::region_info::kMmapSize, msize);
    reply_ok(c, b, fd);
  }

  void reply_read(const ParsedCommand& c, std::span<const std::byte> data) {
    std::vector<std::byte> body(emud::access::kBytes + data.size());
    emud::store<std::uint64_t>(body, emud::access::kOffset, c.offset);
    emud::store<std::uint32_t>(body, emud::access::kRegion, c.region);
    emud::store<std::uint32_t>(body, emud::access::kCount, static_cast<std::uint32_t>(data.size()));
    std::memcpy(body.data() + emud::access::kBytes, data.data(), data.size());
    reply_ok(c, body);
  }

  void region_read(const ParsedCommand& c) {
    std::array<std::byte, emud::kMaxAccess> data{};
    auto out = std::span(data).first(c.count);
    if (c.region == emud::kRegionConfig) {
      if (c.offset > pci::cfg::kConfigSize) {
        return reply_error(c, Error(Code::kOutOfRange, fmt::format("config read at 0x{:x} past 4 KiB", c.offset)));
      }
      auto r = dev_->config_read(static_cast<std::uint32_t>(c.offset), out);
      if (!r) return reply_error(c, r.error());
      return reply_read(c, out);
    }
    auto m = dev_->mmio(c.region);
    if (!m) return reply_error(c, m.error());
    const std::uint64_t v = c.count == 8 ? (*m)->read64(c.offset) : (*m)->read32(c.offset);
    std::memcpy(out.data(), &v, c.count);
    reply_read(c, out);
  }

  void region_write(const ParsedCommand& c) {
    if (c.region == emud::kRegionConfig) {
      if (c.offset > pci::cfg::kConfigSize) {
        return reply_error(c, Error(Code::kOutOfRange, fmt::format("config write at 0x{:x} past 4 KiB", c.offset)));
      }
      auto r = dev_->config_write(static_cast<std::uint32_t>(c.offset), c.data);
      if (!r) return reply_error(c, r.error());
      return reply_ok(c);
    }
    auto m = dev_->mmio(c.region);
    if (!m) return reply_error(c, m.error());
    if (shadow_ != nullptr && c.region == pci::kBarRegs) {
      // An 8-byte write reaches the 32-bit registers at offset and offset + 4 (registers.md §1).
      for (std::uint64_t off = c.offset; off < c.offset + c.count; off += 4) {
        if (emud::shadow::slot_of(off, shadow_queues_) != emud::shadow::kNoSlot) {
          return reply_error(c, Error(Code::kFailedPrecondition,
                                      fmt::format("BAR0+0x{:x} is a shadow doorbell on this connection: write it in "
                                                  "the shadow page (spec §5.11)",
                                                  off)));
        }
      }
      // Enabling a queue (every restart of its indexes ends with one) or resetting it starts its
      // indexes at 0 (registers.md §5.2): its slots follow, so an old value is never replayed.
      for (std::uint64_t off = c.offset; off < c.offset + c.count; off += 4) {
        if (off < fw::regs::kQueueBase) continue;
        const std::uint64_t r = (off - fw::regs::kQueueBase) % fw::regs::kQueueStride;
        const std::uint64_t q = (off - fw::regs::kQueueBase) / fw::regs::kQueueStride;
        if (q < shadow_queues_ && (r == fw::regs::queue::kCtrl || r == fw::regs::queue::kReset)) {
          zero_shadow(static_cast<std::uint32_t>(q));
        }
      }
    }
    if (c.count == 8) {
      (*m)->write64(c.offset, emud::load<std::uint64_t>(c.data, 0));
    } else {
      (*m)->write32(c.offset, emud::load<std::uint32_t>(c.data, 0));
    }
    reply_ok(c);
  }

  void read_only(const ParsedCommand& c) {
    switch (c.command) {
      case emud::Command::kDeviceGetInfo: return device_info(c);
      case emud::Command::kRegionInfo: return region_info(c);
      case emud::Command::kRegionRead: {
        std::array<std::byte, emud::kMaxAccess> data{};
        auto out = std::span(data).first(c.count);
        if (c.region == emud::kRegionConfig) {
          if (c.offset > pci::cfg::kConfigSize || c.count > pci::cfg::kConfigSize - c.offset) {
            return reply_error(c, Error(Code::kOutOfRange, "config read past 4 KiB"));
          }
          for (std::uint32_t i = 0; i < c.count; ++i) {
            out[i] = static_cast<std::byte>(card().cfg_read(static_cast<std::uint32_t>(c.offset) + i, 1));
          }
          return reply_read(c, out);
        }
        if (c.region != pci::kBarRegs) {
          return reply_error(c, Error(Code::kPermissionDenied, "a read-only attach reads config space and BAR0 only"));
        }
        const unsigned width = c.count * 8;
        std::uint64_t v = c.count == 8 ? ~0ULL : 0xffffffffULL;
        if (c.offset % c.count == 0 && c.offset + c.count <= card().bar_size(pci::kBarRegs)) {
          v = card().bar0_read(c.offset, width);
        }
        std::memcpy(out.data(), &v, c.count);
        return reply_read(c, out);
      }
      default:
        return reply_error(c, Error(Code::kPermissionDenied,
                                    fmt::format("card {} is attached read-only: command {} needs the owner's attach",
                                                card_, static_cast<unsigned>(c.command))));
    }
  }

  /// DMA_MAP with flag PROCESS_MEMORY (spec §5.2 "Process memory"): the client's own
  /// addresses, reached with process_vm_readv/writev on its pid; nothing is mapped here.
  void dma_map_process(const ParsedCommand& c) {
    if (pid_ <= 0) {
      return reply_error(c, Error(Code::kFailedPrecondition, "DMA_MAP PROCESS_MEMORY: the client's pid is unknown"));
    }
    if (c.size % 4096 != 0 || c.iova % 4096 != 0) {
      return reply_error(c, Error(Code::kInvalidArgument, "DMA_MAP: iova and size must be 4 KiB aligned"));
    }
    // Only the process that opened the connection maps its own memory: a forked child or a
    // process that was handed the socket would otherwise make the card reach the opener.
    if (msg_pid_ != pid_) {
      return reply_error(
          c, Error(Code::kFailedPrecondition,
                   fmt::format("DMA_MAP PROCESS_MEMORY sent by pid {} on the connection of pid {}: a process maps "
                               "its own memory on a connection it opened",
                               msg_pid_, pid_)));
    }
    // Bound to this process, not to its pid number: once it exits the engine copies nothing,
    // even if the kernel gives the pid to another process while this connection lives on.
    if (pidfd_ < 0) {
      pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
      if (pidfd_ < 0) {
        const int err = errno;
        return reply_error(c, Error(errno_code(err), fmt::format("DMA_MAP PROCESS_MEMORY: pidfd_open of pid {}: {}",
                                                                 pid_, std::strerror(err))));
      }
    }
    // The kernel checks ptrace access (PTRACE_MODE_ATTACH) before it looks at the address, so
    // a one-byte read tells "may not" (EPERM) from "not mapped there" (EFAULT, fine here).
    std::byte probe{};
    iovec l{&probe, 1};
    iovec r{reinterpret_cast<void*>(c.fd_offset), 1};
    if (::process_vm_readv(pid_, &l, 1, &r, 1, 0) < 0 && errno != EFAULT) {
      const int err = errno;
      return reply_error(
          c, Error(errno_code(err),
                   fmt::format("DMA_MAP PROCESS_MEMORY: npo-emud (pid {}) may not read the memory of pid {}: {} (run "
                               "both as the same user; with Yama ptrace_scope 1 the client must name the daemon "
                               "with prctl(PR_SET_PTRACER))",
                               ::getpid(), pid_, std::strerror(err))));
    }
    if (card().removed()) return reply_error(c, Error(Code::kUnavailable, "card removed"));
    auto r2 = card().iommu().map_process(pid_, pidfd_, c.fd_offset, c.iova, c.size,
                                         static_cast<backend::DmaAccess>(c.dma_access));
    if (!r2) return reply_error(c, r2.error());
    maps_[c.iova] = Mapping{nullptr, c.size, -1};
    reply_ok(c);
  }

  void dma_map(const ParsedCommand& c, std::vector<int>& fds) {
    if ((c.dma_flags & emud::dma_map::kFlagProcessMemory) != 0) return dma_map_process(c);
    const int fd = fds.at(0);
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      return reply_error(c, Error(Code::kInvalidArgument, "DMA_MAP: the attached fd is not a memfd"));
    }
    const int seals = ::fcntl(fd, F_GET_SEALS);
    if (seals < 0) {
      return reply_error(c, Error(Code::kInvalidArgument,
                                  "DMA_MAP: the attached fd is not a memfd (F_GET_SEALS failed): host memory crosses "
                                  "to the daemon as a memfd"));
    }
    // Sealed against shrinking, the memory cannot vanish under the daemon's mapping (no SIGBUS).
    // A client that cannot seal it (memfd made without MFD_ALLOW_SEALING) may ask for a mapping
    // guarded against SIGBUS instead (spec §5.2 "Unsealed memory").
    bool guarded = false;
    if ((seals & F_SEAL_SHRINK) == 0 && ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) != 0) {
      if ((c.dma_flags & emud::dma_map::kFlagUnsealed) == 0) {
        return reply_error(c, Error(Code::kInvalidArgument,
                                    "DMA_MAP: the memfd cannot be sealed against shrinking (create it with "
                                    "MFD_ALLOW_SEALING, or set the UNSEALED flag for a SIGBUS-guarded mapping)"));
      }
      if (!server::install_sigbus_guard()) {
        return reply_error(c, Error(Code::kInternal, "DMA_MAP: cannot install the SIGBUS guard for unsealed memory"));
      }
      guarded = true;
    }
    if (c.size == 0 || c.fd_offset + c.size > static_cast<std::uint64_t>(st.st_size)) {
      return reply_error(
          c, Error(Code::kOutOfRange, fmt::format("DMA_MAP: [{:#x}, +{:#x}) is outside the memfd of {} bytes",
                                                  c.fd_offset, c.size, st.st_size)));
    }
    if (c.size % 4096 != 0 || c.iova % 4096 != 0) {
      return reply_error(c, Error(Code::kInvalidArgument, "DMA_MAP: iova and size must be 4 KiB aligned"));
    }
    if (maps_.count(c.iova) != 0) {
      return reply_error(c, Error(Code::kAlreadyExists, fmt::format("DMA_MAP: IOVA {:#x} is mapped", c.iova)));
    }
    const int prot = PROT_READ | ((c.dma_access & 2) != 0 ? PROT_WRITE : 0);
    void* p = ::mmap(nullptr, c.size, prot, MAP_SHARED, fd, static_cast<off_t>(c.fd_offset));
    if (p == MAP_FAILED) {
      const int err = errno;
      return reply_error(c, Error(errno_code(err), fmt::format("DMA_MAP: mmap of the memfd: {}", std::strerror(err))));
    }
    int slot = -1;
    if (guarded && (slot = server::guard_mapping(p, c.size)) < 0) {
      ::munmap(p, c.size);
      return reply_error(
          c, Error(Code::kResourceExhausted,
                   fmt::format("DMA_MAP: all {} guarded mappings of unsealed memory are in use", server::kGuardSlots)));
    }
    auto r = dev_->dma_map(p, c.iova, c.size, static_cast<backend::DmaAccess>(c.dma_access));
    if (!r) {
      server::unguard_mapping(slot);
      ::munmap(p, c.size);
      return reply_error(c, r.error());
    }
    maps_[c.iova] = Mapping{p, c.size, slot};
    reply_ok(c);
  }

  /// Unmaps the daemon's view of one client mapping (the card no longer reaches it).
  void drop_mapping(std::uint64_t iova, const Mapping& m) {
    if (m.guard_slot >= 0 && server::unguard_mapping(m.guard_slot)) {
      srv_.log(
          fmt::format("card={} pid={}: unsealed memory at IOVA {:#x} (+{:#x}) shrank under its DMA mapping; "
                      "the card saw zero pages there since (SIGBUS guard)",
                      card_, pid_, iova, m.size));
    }
    if (m.addr != nullptr) ::munmap(m.addr, m.size);  // process memory: nothing mapped here
  }

  void dma_unmap(const ParsedCommand& c) {
    auto it = maps_.find(c.iova);
    if (it == maps_.end() || it->second.size != c.size) {
      return reply_error(
          c, Error(Code::kNotFound, fmt::format("DMA_UNMAP: no mapping of {} bytes at IOVA {:#x}", c.size, c.iova)));
    }
    if (auto r = dev_->dma_unmap(c.iova, c.size); !r) return reply_error(c, r.error());
    drop_mapping(it->first, it->second);
    maps_.erase(it);
    reply_ok(c);
  }

  void set_irqs(const ParsedCommand& c, std::vector<int>& fds) {
    if (c.irq_index == emud::irqs::kIrqMsi) {
      auto r = dev_->set_msi_eventfd(c.fd_mask != 0 ? fds[0] : -1);
      if (!r) return reply_error(c, r.error());
      return reply_ok(c);
    }
    std::vector<int> vec(c.count, -1);
    std::size_t k = 0;
    for (std::uint32_t i = 0; i < c.count; ++i) {
      if ((c.fd_mask >> i) & 1u) vec[i] = fds[k++];
    }
    auto r = dev_->set_msix_eventfds(c.irq_start, vec);
    if (!r) return reply_error(c, r.error());
    for (std::uint32_t i = 0; i < c.count; ++i) {
      int& slot = msix_fds_[c.irq_start + i];
      if (slot >= 0) ::close(slot);
      slot = vec[i];
    }
    for (int& fd : fds) fd = -1;  // now owned by msix_fds_
    reply_ok(c);
  }

  void release() {
    std::string session;
    if (owner_) {
      // An owner that ran the card's engines and died inside a batch holds that queue's lock:
      // it is gone, so the lock is freed (the reset below takes it).
      if (engine_tag_ != 0) {
        for (auto& q : card().shared().queues) {
          if (q.lock.break_if_held_by(engine_tag_)) {
            srv_.log(fmt::format("card={} pid={}: freed a queue lock the owner held when it went", card_, pid_));
          }
        }
      }
      // Order: stop the card's queues and windows, then the device (IOMMU cleared, waiting for
      // in-flight accesses; interrupts disconnected), then the daemon's view of client memory.
      card().release_client_state();
      // What this owner's session made the card's engines move (§6: the per-card traffic of a job).
      const auto t = card().dma_totals();
      session = fmt::format(" dma_ops={} dma_bytes={}", t.ops - dma_at_attach_.ops, t.bytes - dma_at_attach_.bytes);
      dev_.reset();
      for (auto& [iova, m] : maps_) drop_mapping(iova, m);
      CardSlot& slot = *srv_.slots[card_];
      {
        std::lock_guard lock(slot.mu);
        slot.owner = 0;
      }
      slot.released.notify_all();
    }
    if (shadow_ != nullptr) ::munmap(shadow_, emud::shadow::kPageBytes);
    shadow_ = nullptr;
    bar0_ = nullptr;
    shadow_queues_ = 0;
    if (bell_fd_ >= 0) ::close(bell_fd_);
    bell_fd_ = -1;
    const std::size_t nmaps = maps_.size();
    maps_.clear();
    if (pidfd_ >= 0) ::close(pidfd_);  // after dev_.reset(): no IOMMU entry refers to it any more
    pidfd_ = -1;
    for (int& fd : msix_fds_) {
      if (fd >= 0) ::close(fd);
      fd = -1;
    }
    if (attached_) {
      srv_.log(fmt::format("disconnect card={} pid={} mode={} dma_maps_dropped={}{}", card_, pid_,
                           read_only_ ? "read-only" : "owner", nmaps, session));
    }
    attached_ = owner_ = false;
    if (conn_ >= 0) ::close(conn_);
    conn_ = -1;
    if (ep_ >= 0) ::close(ep_);
    ep_ = -1;
  }

  Server::Impl& srv_;
  int conn_;
  std::uint32_t card_;
  pid_t pid_ = 0;
  bool attached_ = false;
  bool read_only_ = false;
  bool owner_ = false;
  Card::DmaTotals dma_at_attach_;  ///< the card's DMA totals when this owner attached
  std::unique_ptr<backend::Device> dev_;
  pid_t msg_pid_ = 0;  ///< sender of the message being handled (SCM_CREDENTIALS), 0: unknown
  int pidfd_ = -1;     ///< pidfd of pid_, opened at its first PROCESS_MEMORY map
  std::map<std::uint64_t, Mapping> maps_;
  std::array<int, pci::kMsixVectors> msix_fds_{};
  std::vector<std::byte> out_;
  // Shadow doorbells (spec §5.11): the page shared with the client, the eventfd it rings, what
  // was last written to the card from each slot, and the posted writes handled so far.
  std::byte* shadow_ = nullptr;
  backend::Mmio* bar0_ = nullptr;
  std::uint32_t shadow_queues_ = 0;
  int bell_fd_ = -1;
  int ep_ = -1;  ///< epoll set of conn_, the server's wake fd and bell_fd_; -1: poll(2) instead
  std::array<std::uint32_t, fw::emud::shadow::kMaxQueues> applied_sq_{};
  std::array<std::uint32_t, fw::emud::shadow::kMaxQueues> applied_cq_{};
  std::uint32_t posted_handled_ = 0;
  /// ENGINE_SHARE (spec §5.12): the lock tag of this owner's engines, 0: it runs none.
  std::uint32_t engine_tag_ = 0;
};

}  // namespace

void Server::Impl::serve(int conn, std::uint32_t card) {
  Session s(*this, conn, card);
  s.run();
}

void Server::Impl::accept_loop() {
  std::vector<pollfd> p;
  p.reserve(listen_fds.size() + 1);
  for (int fd : listen_fds) p.push_back({fd, POLLIN, 0});
  p.push_back({wake_fd, POLLIN, 0});
  while (!stopping.load()) {
    if (::poll(p.data(), p.size(), -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (p.back().revents != 0) break;
    for (std::size_t i = 0; i + 1 < p.size(); ++i) {
      if ((p[i].revents & POLLIN) == 0) continue;
      const int conn = ::accept4(p[i].fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (conn < 0) continue;
      std::lock_guard lock(sessions_mu);
      for (auto it = session_threads.begin(); it != session_threads.end();) {  // reap finished ones
        if (it->done.load()) {
          it->thread.join();
          it = session_threads.erase(it);
        } else {
          ++it;
        }
      }
      auto& st = session_threads.emplace_back();
      st.thread = std::thread([this, conn, i, &st] {
        serve(conn, static_cast<std::uint32_t>(i));
        st.done.store(true);
      });
    }
  }
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() { stop(); }

bool Server::wait_unowned(int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    bool any = false;
    for (auto& s : impl_->slots) {
      std::lock_guard lock(s->mu);
      any = any || s->owner != 0;
    }
    if (!any) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

std::size_t Server::card_count() const noexcept { return impl_->listen_fds.size(); }

void Server::stop() {
  Impl& s = *impl_;
  if (s.stopped) return;
  s.stopped = true;
  s.stopping.store(true);
  if (s.wake_fd >= 0) {
    const std::uint64_t one = 1;
    (void)::write(s.wake_fd, &one, sizeof one);
  }
  if (s.acceptor.joinable()) s.acceptor.join();
  for (int fd : s.listen_fds) ::close(fd);
  for (const auto& p : s.socket_paths) {
    std::error_code ec;
    std::filesystem::remove(p, ec);
  }
  {
    std::lock_guard lock(s.sessions_mu);
    for (auto& t : s.session_threads)
      if (t.thread.joinable()) t.thread.join();
    s.session_threads.clear();
  }
  if (s.wake_fd >= 0) ::close(s.wake_fd);
  s.wake_fd = -1;
  if (s.lock_fd >= 0) {
    std::error_code ec;
    std::filesystem::remove(s.opts.socket_dir / emud::kLockFile, ec);
    ::close(s.lock_fd);
    s.lock_fd = -1;
  }
}

Result<std::unique_ptr<Server>> Server::start(std::shared_ptr<Emulator> emu, ServerOptions options) {
  std::unique_ptr<Server> srv(new Server(std::make_unique<Impl>()));  // stop() cleans up a failed start
  Impl* impl = srv->impl_.get();
  impl->emu = std::move(emu);
  impl->opts = std::move(options);
  const auto& dir = impl->opts.socket_dir;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return fail_errno(ec.value(), fmt::format("npo-emud: cannot create socket directory {}", dir.string()));
  // One file descriptor per card socket and per connection: lift the soft limit.
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &rl);
  }
  const auto lock_path = dir / emud::kLockFile;
  impl->lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (impl->lock_fd < 0) return fail_errno(errno, fmt::format("npo-emud: open {}", lock_path.string()));
  if (::flock(impl->lock_fd, LOCK_EX | LOCK_NB) != 0) {
    std::array<char, 32> pid{};
    const ssize_t n = ::pread(impl->lock_fd, pid.data(), pid.size() - 1, 0);
    ::close(impl->lock_fd);
    impl->lock_fd = -1;
    return fail(Code::kAlreadyExists, fmt::format("npo-emud: {} is served by another npo-emud (pid {}); stop it or "
                                                  "pick another --socket-dir",
                                                  dir.string(), n > 0 ? std::string(pid.data()) : "?"));
  }
  const std::string pid_text = std::to_string(::getpid());
  if (::ftruncate(impl->lock_fd, 0) != 0 ||
      ::pwrite(impl->lock_fd, pid_text.data(), pid_text.size(), 0) != static_cast<ssize_t>(pid_text.size())) {
    return fail_errno(errno, "npo-emud: writing the lock file");
  }
  // The lock is ours: any socket left in the directory belongs to a dead daemon.
  std::size_t stale = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const auto name = e.path().filename().string();
    if (name.starts_with(emud::kSocketPrefix) && name.ends_with(emud::kSocketSuffix)) {
      std::filesystem::remove(e.path(), ec);
      ++stale;
    }
  }
  if (stale > 0)
    impl->log(
        fmt::format("reused stale socket directory {}: removed {} sockets of a dead daemon", dir.string(), stale));
  impl->wake_fd = ::eventfd(0, EFD_CLOEXEC);
  if (impl->wake_fd < 0) return fail_errno(errno, "npo-emud: eventfd");
  impl->backend = impl->emu->make_backend("emud:" + dir.string());
  const std::size_t n = impl->emu->card_count();
  for (std::size_t i = 0; i < n; ++i) {
    impl->slots.push_back(std::make_unique<CardSlot>());
    const auto path = dir / fmt::format("{}{}{}", emud::kSocketPrefix, i, emud::kSocketSuffix);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    if (path.string().size() >= sizeof sa.sun_path) {
      return fail(Code::kInvalidArgument, fmt::format("npo-emud: socket path {} is longer than {} bytes", path.string(),
                                                      sizeof sa.sun_path - 1));
    }
    std::memcpy(sa.sun_path, path.c_str(), path.string().size());
    const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return fail_errno(errno, "npo-emud: socket");
    impl->listen_fds.push_back(fd);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
      return fail_errno(errno, fmt::format("npo-emud: bind {}", path.string()));
    }
    impl->socket_paths.push_back(path);
    if (::listen(fd, 64) != 0) return fail_errno(errno, fmt::format("npo-emud: listen {}", path.string()));
  }
  impl->acceptor = std::thread([impl] { impl->accept_loop(); });
  return srv;
}

}  // namespace npo::emu
