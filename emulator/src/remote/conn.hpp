// SPDX-License-Identifier: Apache-2.0
// The emu-remote transport: one SOCK_SEQPACKET connection to one npo-emud card socket (connect,
// request/reply with fds attached, posted writes, the shadow doorbell page), and the daemon it
// reaches (docs/spec/emud-protocol.md).
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "npo/emu/register.hpp"
#include "npo/fw/emud.hpp"
#include "npo/fw/mailbox.hpp"
#include "npo/fw/pci.hpp"
#include "npo/fw/regs.hpp"
#include "npo/hal/backend/host_memory.hpp"
#include "npo/hal/log.hpp"
#include "wire/fd_passing.hpp"

namespace npo::emu::remote {

namespace emud = fw::emud;

constexpr int kReplyTimeoutMs = 10'000;

struct Reply {
  std::vector<std::byte> body;
  int fd = -1;  ///< attached fd, owned by the caller
};

/// The daemon one backend talks to, shared by all its connections: once any connection finds
/// npo-emud gone, every call on every card of it fails at once with kUnavailable naming the
/// daemon (no further syscalls, one warning).
struct Daemon {
  explicit Daemon(std::string d) : dir(std::move(d)) {}
  std::string dir;
  std::atomic<bool> gone{false};
  std::mutex mu;
  std::string why;  ///< how it was found gone (guarded by mu)

  /// Marks the daemon gone; logs once.
  void mark_gone(const std::string& how) {
    {
      std::lock_guard lock(mu);
      if (!why.empty()) return;
      why = how;
    }
    gone.store(true, std::memory_order_release);
    npo::log::get(npo::log::Subsystem::kBackend)
        .warn("emu-remote: npo-emud at {} is gone ({}): every call on its cards fails with unavailable", dir, how);
  }
  std::unexpected<Error> error() {
    std::string how;
    {
      std::lock_guard lock(mu);
      how = why;
    }
    return fail(Code::kUnavailable, fmt::format("emu-remote: npo-emud at {} is gone ({}); restart the daemon and "
                                                "reopen",
                                                dir, how));
  }
};

/// One connection to one card socket. Thread-safety: call() serialises on a mutex.
class Conn {
 public:
  Conn(int fd, std::string what, std::shared_ptr<Daemon> daemon)
      : fd_(fd), what_(std::move(what)), daemon_(std::move(daemon)) {}
  ~Conn() {
    if (shadow_ != nullptr) ::munmap(shadow_, emud::shadow::kPageBytes);
    if (bell_fd_ >= 0) ::close(bell_fd_);
    if (fd_ >= 0) ::close(fd_);
  }
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  static Result<std::unique_ptr<Conn>> connect(const std::filesystem::path& path, std::string what,
                                               std::shared_ptr<Daemon> daemon) {
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    const std::string p = path.string();
    if (p.size() >= sizeof sa.sun_path) return fail(Code::kInvalidArgument, fmt::format("{}: socket path too long", p));
    std::memcpy(sa.sun_path, p.data(), p.size());
    const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0) return fail_errno(errno, "emu-remote: socket");
    if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
      const int err = errno;
      ::close(fd);
      if (err == EACCES || err == EPERM) {
        // The daemon runs, but its sockets are not ours to open: a permissions problem.
        return fail(
            Code::kPermissionDenied,
            fmt::format("emu-remote: cannot connect to {} ({}): npo-emud's sockets do not let this user in; "
                        "start npo-emud with --socket-group GROUP (and --socket-mode 0660) and join that group, "
                        "or run as the daemon's user",
                        p, std::strerror(err)));
      }
      return fail(Code::kUnavailable,
                  fmt::format("emu-remote: cannot connect to {} ({}): is npo-emud running? Start it with "
                              "`npo-emud --topology emu:mesh8 --socket-dir {}`",
                              p, std::strerror(err), path.parent_path().string()));
    }
    return std::make_unique<Conn>(fd, std::move(what), std::move(daemon));
  }

  [[nodiscard]] bool dead() const noexcept { return daemon_->gone.load(std::memory_order_acquire); }
  /// The process that opened this connection.
  [[nodiscard]] pid_t opener() const noexcept { return opener_; }
  /// The daemon's pid (SO_PEERCRED of this socket), 0 when the kernel does not say.
  [[nodiscard]] pid_t peer_pid() const noexcept {
    ucred cred{};
    socklen_t len = sizeof cred;
    return ::getsockopt(fd_, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 ? cred.pid : 0;
  }
  /// kUnavailable naming the daemon once it is gone, else success.
  Result<void> check() const {
    if (dead()) return daemon_->error();
    return {};
  }

  /// Sends one command with `fds` attached and, unless `no_reply`, waits for its reply.
  Result<Reply> call(emud::Command cmd, std::span<const std::byte> body, std::span<const int> fds = {},
                     bool no_reply = false) {
    if (dead()) return daemon_->error();
    std::lock_guard lock(mu_);
    if (dead()) return daemon_->error();
    const std::uint16_t id = ++next_id_;
    std::array<std::byte, emud::kMaxMessage> msg{};
    const std::size_t size = emud::hdr::kBytes + body.size();
    if (size > msg.size()) return fail(Code::kInternal, "emu-remote: message too large");
    std::span<std::byte> m(msg.data(), size);
    emud::store<std::uint16_t>(m, emud::hdr::kMsgId, id);
    emud::store<std::uint16_t>(m, emud::hdr::kCommand, static_cast<std::uint16_t>(cmd));
    emud::store<std::uint32_t>(m, emud::hdr::kSize, static_cast<std::uint32_t>(size));
    emud::store<std::uint32_t>(m, emud::hdr::kFlags, emud::kTypeCommand | (no_reply ? emud::kFlagNoReply : 0u));
    if (!body.empty()) std::memcpy(m.data() + emud::hdr::kBytes, body.data(), body.size());
    while (wire::send_with_fds(fd_, m, fds) < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      if (err == EBADF && !fds.empty())
        return fail(Code::kInvalidArgument, "emu-remote: a file descriptor is not open");
      mark_dead(err);
      return daemon_->error();
    }
    if (no_reply) {
      posted_.fetch_add(1, std::memory_order_release);
      return Reply{};
    }
    for (;;) {
      pollfd p{fd_, POLLIN, 0};
      const int pr = ::poll(&p, 1, kReplyTimeoutMs);
      if (pr < 0 && errno == EINTR) continue;
      if (pr == 0) {
        daemon_->mark_gone(fmt::format("{} got no answer in {} ms", what_, kReplyTimeoutMs));
        return daemon_->error();
      }
      std::array<std::byte, emud::kMaxMessage> in{};
      alignas(cmsghdr) std::array<char, CMSG_SPACE(sizeof(int))> rctrl{};
      wire::Received got;
      const ssize_t n = wire::recv_with_fds(fd_, in, rctrl, MSG_CMSG_CLOEXEC, got);
      if (n < 0 && errno == EINTR) continue;
      const int rfd = got.fds.empty() ? -1 : got.fds.front();
      if (n <= 0) {
        const int err = n < 0 ? errno : 0;
        if (rfd >= 0) ::close(rfd);
        mark_dead(err);
        return daemon_->error();
      }
      std::span<const std::byte> r(in.data(), static_cast<std::size_t>(n));
      if (r.size() < emud::hdr::kBytes || emud::load<std::uint32_t>(r, emud::hdr::kSize) != r.size() ||
          (emud::load<std::uint32_t>(r, emud::hdr::kFlags) & emud::kFlagTypeMask) != emud::kTypeReply) {
        if (rfd >= 0) ::close(rfd);
        npo::log::get(npo::log::Subsystem::kBackend)
            .warn("emu-remote: {}: malformed reply of {} bytes from npo-emud", what_, r.size());
        daemon_->mark_gone(fmt::format("malformed reply on {}", what_));
        return fail(Code::kInternal, fmt::format("emu-remote: {}: malformed reply from npo-emud", what_));
      }
      const auto rid = emud::load<std::uint16_t>(r, emud::hdr::kMsgId);
      const auto flags = emud::load<std::uint32_t>(r, emud::hdr::kFlags);
      const auto rbody = r.subspan(emud::hdr::kBytes);
      if (rid != id) {  // a late error of a posted write: log it, keep waiting for ours
        if (rfd >= 0) ::close(rfd);
        npo::log::get(npo::log::Subsystem::kBackend)
            .warn("emu-remote: {}: posted write failed: {}", what_,
                  std::string_view(reinterpret_cast<const char*>(rbody.data()), rbody.size()));
        continue;
      }
      if ((flags & emud::kFlagError) != 0) {
        if (rfd >= 0) ::close(rfd);
        const auto code = emud::load<std::uint32_t>(r, emud::hdr::kError);
        const Code c = code >= 1 && code <= 15 ? static_cast<Code>(code) : Code::kUnknown;
        return fail(c, std::string(reinterpret_cast<const char*>(rbody.data()), rbody.size()));
      }
      return Reply{std::vector<std::byte>(rbody.begin(), rbody.end()), rfd};
    }
  }

  /// Asks the daemon for shadow doorbells (spec §5.11): from then on ring_shadow() writes the
  /// queues' SQ_TAIL and CQ_HEAD into the shared page and rings an eventfd, one write(2) and no
  /// socket message per doorbell. Call once, before any other thread uses the connection.
  /// Errors: the daemon's refusal (an npo-emud older than protocol 1.4 answers invalid_argument),
  /// with `*armed` false: the connection keeps REGION_WRITE doorbells; or, with `*armed` true,
  /// kInternal when the daemon set the page up but this process cannot use it (no page fd in the
  /// reply, a short page, mmap failed): the connection can ring no queue then and must be closed.
  Result<void> enable_shadow(bool* armed) {
    *armed = false;
    const int efd = ::eventfd(0, EFD_CLOEXEC);
    if (efd < 0) return fail_errno(errno, "emu-remote: eventfd for shadow doorbells");
    std::array<std::byte, emud::shadow::kBytes> b{};
    const int attach[1] = {efd};
    auto r = call(emud::Command::kDoorbellShadow, b, attach);
    if (!r) {
      ::close(efd);
      return std::unexpected(r.error());
    }
    *armed = true;
    void* p = MAP_FAILED;
    struct stat st {};
    const bool ok = r->fd >= 0 && ::fstat(r->fd, &st) == 0 &&
                    static_cast<std::uint64_t>(st.st_size) >= emud::shadow::kPageBytes &&
                    r->body.size() == emud::shadow::kBytes &&
                    emud::load<std::uint32_t>(r->body, emud::shadow::kReplyStride) == emud::shadow::kStride &&
                    emud::load<std::uint32_t>(r->body, emud::shadow::kReplyQueues) <= emud::shadow::kMaxQueues;
    if (ok) p = ::mmap(nullptr, emud::shadow::kPageBytes, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, 0);
    if (r->fd >= 0) ::close(r->fd);
    if (p == MAP_FAILED) {
      ::close(efd);
      return fail(
          Code::kInternal,
          fmt::format(
              "emu-remote: {}: npo-emud set up shadow doorbells, but its page cannot be used here ({})", what_,
              r->fd < 0 ? "no page fd in the reply: is the fd limit reached?" : "a malformed reply or a failed mmap"));
    }
    shadow_ = static_cast<std::byte*>(p);
    shadow_queues_ = emud::load<std::uint32_t>(r->body, emud::shadow::kReplyQueues);
    bell_fd_ = efd;
    posted_.store(0);  // the daemon counts from here (every earlier posted write preceded this call)
    return {};
  }

  /// True when BAR0 offset `off` is a doorbell this connection rings through its shadow page.
  [[nodiscard]] bool shadowed(std::uint64_t off) const noexcept {
    return shadow_ != nullptr && slot_of(off) != emud::shadow::kNoSlot;
  }

  /// Rings doorbell register `off` of BAR0 with `v` through the shadow page, if it is one;
  /// false (nothing done) when the connection has no shadow page or `off` is another register.
  /// A doorbell never overtakes a posted write this thread sent before it: it waits until the
  /// daemon counts that write handled. Thread-safe; lock-free unless it has to wait.
  /// A connection inherited across fork() is one process's at a time, as its message ids are: a
  /// parent and a child posting and ringing at once could each count the other's posted writes.
  bool ring_shadow(std::uint64_t off, std::uint32_t v) {
    if (shadow_ == nullptr) return false;
    const std::size_t slot = slot_of(off);
    if (slot == emud::shadow::kNoSlot) return false;
    if (!sync_posted()) return true;  // dropped, as a posted write to a gone daemon is
    shadow_word(slot).store(v, std::memory_order_release);
    const std::uint64_t one = 1;
    while (::write(bell_fd_, &one, sizeof one) < 0 && errno == EINTR) {
    }
    return true;
  }

  /// Before a doorbell that does not cross the socket (the shadow page, or this process's own
  /// engines, spec §5.12): waits until the daemon has handled every posted write sent before
  /// (counted in the shadow page), so the doorbell never overtakes, say, the CTRL write that
  /// enables its queue. False when the daemon is gone (the doorbell is dropped, as a posted write
  /// to a gone daemon is). Looks at the socket for a hang-up once a millisecond: neither an
  /// eventfd nor shared memory tells that the daemon died. Needs the shadow page.
  bool sync_posted() {
    if (dead()) return false;
    const std::uint32_t want = posted_.load(std::memory_order_acquire);
    if (shadow_word(emud::shadow::kHandled).load(std::memory_order_acquire) != want && !wait_handled(want)) {
      return false;
    }
    const std::int64_t now =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count();
    if (now - alive_checked_ns_.load(std::memory_order_relaxed) >= 1'000'000) {
      alive_checked_ns_.store(now, std::memory_order_relaxed);
      return alive();
    }
    return true;
  }
  [[nodiscard]] bool has_shadow() const noexcept { return shadow_ != nullptr; }

 private:
  void mark_dead(int err) {
    daemon_->mark_gone(fmt::format("connection closed{}, seen on {}",
                                   err != 0 ? fmt::format(": {}", std::strerror(err)) : std::string(), what_));
  }

  std::atomic_ref<std::uint32_t> shadow_word(std::size_t offset) const {
    return std::atomic_ref<std::uint32_t>(*reinterpret_cast<std::uint32_t*>(shadow_ + offset));
  }
  /// The shadow slot of BAR0 offset `off`, or kNoSlot when it is not a shadowed doorbell.
  std::size_t slot_of(std::uint64_t off) const noexcept { return emud::shadow::slot_of(off, shadow_queues_); }
  /// Waits until the daemon has handled every posted write this thread sent before (count
  /// `want`), so that a doorbell through the page never overtakes them. False if it died.
  bool wait_handled(std::uint32_t want) {
    using Clock = std::chrono::steady_clock;
    const auto deadline = Clock::now() + std::chrono::milliseconds(kReplyTimeoutMs);
    for (unsigned spins = 0;; ++spins) {
      const auto done = shadow_word(emud::shadow::kHandled).load(std::memory_order_acquire);
      if (static_cast<std::int32_t>(done - want) >= 0) return true;
      if (dead()) return false;
      if (spins < 64) continue;
      std::this_thread::yield();  // the daemon's session thread may need this CPU
      if ((spins & 1023) != 0) continue;
      if (!alive()) return false;
      if (Clock::now() > deadline) {
        daemon_->mark_gone(fmt::format("{} handled no posted write in {} ms", what_, kReplyTimeoutMs));
        return false;
      }
    }
  }
  /// Polls the connection for a hang-up without waiting; marks the daemon gone on one.
  bool alive() {
    pollfd p{fd_, POLLRDHUP, 0};
    if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR)) != 0) {
      mark_dead(0);
      return false;
    }
    return true;
  }

  int fd_;
  std::string what_;
  std::shared_ptr<Daemon> daemon_;
  pid_t opener_ = ::getpid();
  std::mutex mu_;
  std::uint16_t next_id_ = 0;
  std::atomic<std::uint32_t> posted_{0};  ///< posted writes sent (mod 2^32), compared with kHandled
  // Shadow doorbells (spec §5.11), set once by enable_shadow() before the device is handed out.
  std::byte* shadow_ = nullptr;
  std::uint32_t shadow_queues_ = 0;
  int bell_fd_ = -1;
  std::atomic<std::int64_t> alive_checked_ns_{0};  ///< steady clock of the last hang-up poll
};

}  // namespace npo::emu::remote
