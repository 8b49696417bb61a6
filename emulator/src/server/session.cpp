// SPDX-License-Identifier: Apache-2.0
// npo-emud sessions: one per client connection, its thread's receive loop (epoll, fds and
// credentials by SCM_RIGHTS/SCM_CREDENTIALS), replies, and the release of the card on close.
#include "server/session.hpp"

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
#include "wire/fd_passing.hpp"

namespace npo::emu {

namespace emud = fw::emud;
namespace pci = fw::pci;
using server::ParsedCommand;

namespace {

void close_all(std::vector<int>& fds) {
  for (int fd : fds)
    if (fd >= 0) ::close(fd);
  fds.clear();
}

}  // namespace

Session::Session(Server::Impl& srv, int conn, std::uint32_t card) : srv_(srv), conn_(conn), card_(card) {
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

bool Session::watch(int fd, int tag) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u32 = static_cast<std::uint32_t>(tag);
  return ::epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev) == 0;
}

int Session::wait_ready() {
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

void Session::follow_client_cpus() {
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
      srv_.log(fmt::format("card={} pid={}: session thread left unbound: reading CPU affinity failed: {}", card_, pid_,
                           std::strerror(errno)));
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

void Session::run() {
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
    // Only a message that arrived has descriptors: after a failed recvmsg the control buffer
    // still holds the previous message's (long closed) fds, which must not be closed again.
    wire::Received got;
    const ssize_t n = wire::recv_with_fds(conn_, buf, ctrl, MSG_CMSG_CLOEXEC | MSG_DONTWAIT, got);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    std::vector<int> fds = std::move(got.fds);
    msg_pid_ = got.pid;
    if (n <= 0) {
      if (n < 0) srv_.log(fmt::format("card={} pid={}: recvmsg failed: {}", card_, pid_, std::strerror(errno)));
      close_all(fds);
      break;
    }
    if ((got.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) {
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

void Session::send(std::span<const std::byte> msg, int fd) {
  (void)wire::send_with_fds(conn_, msg, fd >= 0 ? std::span<const int>(&fd, 1) : std::span<const int>());
}

void Session::reply_ok(const ParsedCommand& c, std::span<const std::byte> body, int fd) {
  if (c.no_reply) return;
  server::build_reply(out_, c.msg_id, static_cast<std::uint16_t>(c.command), Code::kOk, body);
  send(out_, fd);
}

void Session::reply_error(std::uint16_t id, std::uint16_t cmd, Code code, std::string_view text) {
  server::build_reply(out_, id, cmd, code, {}, text);
  send(out_);
}

void Session::reply_error(const ParsedCommand& c, const Error& e) {
  // A posted write that fails is reported anyway: the client reads it before its next reply.
  reply_error(c.msg_id, static_cast<std::uint16_t>(c.command), e.code(), e.message());
}

void Session::release() {
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

}  // namespace npo::emu
