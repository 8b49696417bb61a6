// SPDX-License-Identifier: Apache-2.0
// The emu-remote backend: a client of npo-emud (docs/spec/emud-protocol.md). Each opened card
// is one SOCK_SEQPACKET connection. Config space and register reads are round trips; register
// writes are posted (one sendmsg, no reply), except the queues' doorbells (SQ_TAIL, CQ_HEAD),
// which go into a shadow page shared with the daemon with an eventfd to ring it (spec §5.11);
// the HBM aperture and host DMA memory are shared by fd, so data never crosses the socket.
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
#include "remote/client_engine.hpp"

namespace npo::emu {
namespace remote {

namespace {

namespace emud = fw::emud;
namespace pci = fw::pci;

constexpr std::string_view kForms =
    "emu-remote:DIR, emu-remote:DIR?card=K[,L...][&mode=ro|&owner=K[,L...]], and with or without those "
    "?doorbell=shadow|socket and ?engine=local|daemon (&doorbell=..., &engine=... after another option)";
constexpr int kReplyTimeoutMs = 10'000;
constexpr std::uint64_t kPage = 4096;

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
    iovec iov{m.data(), m.size()};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    alignas(cmsghdr) std::array<char, CMSG_SPACE(sizeof(int) * emud::kMaxFds)> ctrl{};
    if (!fds.empty()) {
      mh.msg_control = ctrl.data();
      mh.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
      cmsghdr* c = CMSG_FIRSTHDR(&mh);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
      std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
    }
    while (::sendmsg(fd_, &mh, MSG_NOSIGNAL) < 0) {
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
      iovec riov{in.data(), in.size()};
      msghdr rh{};
      rh.msg_iov = &riov;
      rh.msg_iovlen = 1;
      alignas(cmsghdr) std::array<char, CMSG_SPACE(sizeof(int))> rctrl{};
      rh.msg_control = rctrl.data();
      rh.msg_controllen = rctrl.size();
      const ssize_t n = ::recvmsg(fd_, &rh, MSG_CMSG_CLOEXEC);
      if (n < 0 && errno == EINTR) continue;
      int rfd = -1;
      for (cmsghdr* c = n > 0 ? CMSG_FIRSTHDR(&rh) : nullptr; c != nullptr; c = CMSG_NXTHDR(&rh, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS && c->cmsg_len >= CMSG_LEN(sizeof(int))) {
          std::memcpy(&rfd, CMSG_DATA(c), sizeof(int));
        }
      }
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

Result<void> hello(Conn& c, bool read_only) {
  std::array<std::byte, emud::version::kBytes> b{};
  emud::store<std::uint16_t>(b, emud::version::kMajor, emud::kVersionMajor);
  emud::store<std::uint16_t>(b, emud::version::kMinor, emud::kVersionMinor);
  emud::store<std::uint32_t>(b, emud::version::kFlags, read_only ? emud::version::kAttachReadOnly : 0u);
  emud::store<std::uint32_t>(b, emud::version::kPid, static_cast<std::uint32_t>(::getpid()));
  auto r = c.call(emud::Command::kVersion, b);
  if (!r) return std::unexpected(r.error());
  if (r->body.size() < emud::version::kBytes) return fail(Code::kInternal, "emu-remote: short VERSION reply");
  return {};
}

/// The connection as local engines use it (spec §5.12).
class ConnLink final : public EngineLink {
 public:
  explicit ConnLink(Conn& c) : c_(c) {}
  Result<Hbm> hbm_fd(std::uint32_t card) override {
    std::array<std::byte, emud::engine::kHbmBytes> b{};
    emud::store<std::uint32_t>(b, emud::engine::kHbmCard, card);
    auto r = c_.call(emud::Command::kHbmFd, b);
    if (!r) return std::unexpected(r.error());
    if (r->fd < 0 || r->body.size() != emud::engine::kHbmReplyBytes) {
      if (r->fd >= 0) ::close(r->fd);
      return fail(Code::kInternal, fmt::format("emu-remote: malformed HBM_FD reply for card {}", card));
    }
    return Hbm{r->fd, emud::load<std::uint64_t>(r->body, emud::engine::kHbmReplyFdOffset),
               emud::load<std::uint64_t>(r->body, emud::engine::kHbmReplySize)};
  }
  void post_event(std::uint32_t kind, std::uint32_t queue, std::uint64_t value, std::uint64_t flags) override {
    std::array<std::byte, emud::engine::kEventBytes> b{};
    emud::store<std::uint32_t>(b, emud::engine::kEventKind, kind);
    emud::store<std::uint32_t>(b, emud::engine::kEventQueue, queue);
    emud::store<std::uint64_t>(b, emud::engine::kEventValue, value);
    emud::store<std::uint64_t>(b, emud::engine::kEventFlags, flags);
    (void)c_.call(emud::Command::kEngineEvent, b, {}, true);
  }

 private:
  Conn& c_;
};

/// Asks npo-emud to let this owner run its card's engines (ENGINE_SHARE, spec §5.12) and builds
/// them. Errors: the daemon's refusal (one older than protocol 1.5 answers invalid_argument),
/// or a state or HBM this process cannot map; the connection stays usable either way (its
/// doorbells then go to the daemon).
Result<std::unique_ptr<ClientEngine>> share_engines(Conn& c, EngineLink& link) {
  std::array<std::byte, emud::engine::kShareBytes> b{};
  auto r = c.call(emud::Command::kEngineShare, b);
  if (!r) return std::unexpected(r.error());
  struct Closer {
    int fd;
    ~Closer() {
      if (fd >= 0) ::close(fd);
    }
  } closer{r->fd};
  if (r->fd < 0 || r->body.size() != emud::engine::kShareReplyBytes) {
    return fail(Code::kInternal, "emu-remote: malformed ENGINE_SHARE reply (no state fd, or a short body)");
  }
  if (emud::load<std::uint32_t>(r->body, emud::engine::kReplyLayout) != FabricState::kLayout) {
    return fail(Code::kFailedPrecondition,
                fmt::format("emu-remote: npo-emud's engine state has layout {}, this library {}",
                            emud::load<std::uint32_t>(r->body, emud::engine::kReplyLayout), FabricState::kLayout));
  }
  return ClientEngine::create(link, r->fd, emud::load<std::uint32_t>(r->body, emud::engine::kReplyCard),
                              emud::load<std::uint32_t>(r->body, emud::engine::kReplyLockTag));
}

struct CardInfo {
  backend::FunctionInfo fi;
  unsigned msix_vectors = 0;
  backend::IovaRange iova{};
  std::uint32_t card = 0;
};

Result<CardInfo> device_info(Conn& c) {
  auto r = c.call(emud::Command::kDeviceGetInfo, {});
  if (!r) return std::unexpected(r.error());
  const auto& b = r->body;
  if (b.size() < emud::info::kBytes) return fail(Code::kInternal, "emu-remote: short DEVICE_GET_INFO reply");
  CardInfo ci;
  ci.fi.address.domain = emud::load<std::uint16_t>(b, emud::info::kDomain);
  ci.fi.address.bus = emud::load<std::uint8_t>(b, emud::info::kBus);
  ci.fi.address.device = emud::load<std::uint8_t>(b, emud::info::kDevice);
  ci.fi.address.function = emud::load<std::uint8_t>(b, emud::info::kFunction);
  ci.fi.vendor_id = emud::load<std::uint16_t>(b, emud::info::kVendorId);
  ci.fi.device_id = emud::load<std::uint16_t>(b, emud::info::kDeviceId);
  ci.fi.subsystem_vendor_id = emud::load<std::uint16_t>(b, emud::info::kSubVendorId);
  ci.fi.subsystem_id = emud::load<std::uint16_t>(b, emud::info::kSubsystemId);
  ci.fi.class_code = emud::load<std::uint32_t>(b, emud::info::kClassCode);
  ci.fi.numa_node = emud::load<std::int32_t>(b, emud::info::kNumaNode);
  ci.fi.driver = "npo-emud";
  ci.msix_vectors = emud::load<std::uint32_t>(b, emud::info::kMsixVectors);
  ci.iova.first = emud::load<std::uint64_t>(b, emud::info::kIovaFirst);
  ci.iova.last = emud::load<std::uint64_t>(b, emud::info::kIovaLast);
  ci.card = emud::load<std::uint32_t>(b, emud::info::kCardIndex);
  return ci;
}

// ---- Host memory by fd ----------------------------------------------------------------------

/// One line of /proc/self/maps.
struct Vma {
  std::uintptr_t start = 0, end = 0;
  std::string perms;
  std::uint64_t offset = 0;
  std::uint64_t inode = 0;
  std::string name;
};

std::vector<Vma> vmas_covering(std::uintptr_t first, std::uintptr_t end) {
  std::vector<Vma> out;
  std::ifstream f("/proc/self/maps");
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream is(line);
    Vma v;
    std::string range, dev;
    is >> range >> v.perms >> std::hex >> v.offset >> dev >> std::dec >> v.inode;
    std::getline(is, v.name);
    v.name.erase(0, v.name.find_first_not_of(' '));
    const auto dash = range.find('-');
    if (dash == std::string::npos) continue;
    v.start = std::stoull(range.substr(0, dash), nullptr, 16);
    v.end = std::stoull(range.substr(dash + 1), nullptr, 16);
    if (v.end <= first || v.start >= end) continue;
    out.push_back(std::move(v));
  }
  return out;
}

/// Anonymous memory this backend re-backed with a memfd, by start address; `uses` counts the
/// DMA mappings (of any device of this process) that reach it. A region in use is never
/// re-backed again (the daemon maps that very memfd).
struct Reback {
  std::size_t len = 0;
  int fd = -1;
  unsigned uses = 0;
};
std::mutex g_reback_mu;
std::map<std::uintptr_t, Reback>& rebacks() {
  static std::map<std::uintptr_t, Reback> r;
  return r;
}
constexpr std::string_view kRebackName = "npo-host-reback";

struct HostFd {
  int fd = -1;
  std::uint64_t offset = 0;
  std::uintptr_t reback = 0;  ///< key in rebacks(), 0 if the memory is not a re-backed region
};

/// The fd and file offset of [addr, addr+len): a registered memfd whose mapping is really the
/// one at addr (checked against /proc/self/maps by inode), else anonymous private memory
/// re-backed in place by a memfd (contents copied; the documented slower path), else an error.
Result<HostFd> host_fd(const void* addr, std::size_t len) {
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  std::lock_guard lock(g_reback_mu);
  auto vmas = vmas_covering(a, a + len);
  std::uintptr_t covered = a;
  for (const auto& v : vmas) {
    if (v.start > covered) break;
    covered = std::max(covered, v.end);
  }
  if (vmas.empty() || covered < a + len) {
    return fail(Code::kInvalidArgument, fmt::format("emu-remote: host memory [{:#x}, +{:#x}) is not mapped", a, len));
  }
  if (auto rec = backend::find_host_memory_fd(addr, len)) {
    struct stat st {};
    if (vmas.size() == 1 && ::fstat(rec->fd, &st) == 0 && st.st_ino == vmas[0].inode && vmas[0].perms.size() == 4 &&
        vmas[0].perms[3] == 's' && vmas[0].offset + (a - vmas[0].start) == rec->offset) {
      std::uintptr_t key = 0;
      auto& rb = rebacks();
      if (auto it = rb.upper_bound(a); it != rb.begin() && std::prev(it)->second.fd == rec->fd)
        key = std::prev(it)->first;
      return HostFd{rec->fd, rec->offset, key};
    }
  }
  auto& rb = rebacks();
  auto ours = [&](const Vma& v) -> Reback* {
    if (v.name.find(kRebackName) == std::string::npos) return nullptr;
    for (auto& [start, r] : rb) {
      struct stat st {};
      if (::fstat(r.fd, &st) == 0 && st.st_ino == v.inode) return &r;
    }
    return nullptr;
  };
  for (const auto& v : vmas) {
    const bool anon =
        v.inode == 0 && v.perms.starts_with("rw") && v.perms[3] == 'p' && (v.name.empty() || v.name == "[heap]");
    Reback* r = anon ? nullptr : ours(v);
    if (!anon && r == nullptr) {
      return fail(Code::kFailedPrecondition,
                  fmt::format("emu-remote: host memory at {:#x} ({}) has no file descriptor npo-emud can map: "
                              "allocate DMA memory with npo::allocate_host_memory (memfd-backed), or map a memfd "
                              "(MFD_ALLOW_SEALING) yourself and record it with npo::backend::register_host_memory_fd",
                              a, v.name.empty() ? std::string("anonymous ") + v.perms : v.name));
    }
    if (r != nullptr && r->uses > 0) {
      return fail(Code::kFailedPrecondition,
                  fmt::format("emu-remote: host memory [{:#x}, +{:#x}) overlaps memory DMA-mapped through another "
                              "range; map each buffer once, whole (or allocate it with npo::allocate_host_memory)",
                              a, len));
    }
  }
  // The slower path: copy the pages into a memfd and map it over them, same address.
  const int fd = ::memfd_create(std::string(kRebackName).c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return fail_errno(errno, "emu-remote: memfd_create");
  if (::ftruncate(fd, static_cast<off_t>(len)) != 0 || ::pwrite(fd, addr, len, 0) != static_cast<ssize_t>(len)) {
    const int err = errno;
    ::close(fd);
    return fail_errno(err, "emu-remote: copying host memory into a memfd");
  }
  void* p = ::mmap(const_cast<void*>(addr), len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    ::close(fd);
    return fail_errno(err, "emu-remote: mapping the memfd over host memory");
  }
  // Earlier re-backed regions wholly inside this one are gone from the address space.
  for (auto it = rb.begin(); it != rb.end();) {
    if (it->first >= a && it->first + it->second.len <= a + len) {
      backend::unregister_host_memory_fd(reinterpret_cast<const void*>(it->first));
      ::close(it->second.fd);
      it = rb.erase(it);
    } else {
      ++it;
    }
  }
  rb[a] = Reback{len, fd, 0};
  backend::register_host_memory_fd(addr, len, fd, 0);
  npo::log::get(npo::log::Subsystem::kBackend)
      .debug("emu-remote: re-backed {} bytes of anonymous memory at {:#x} with a memfd", len, a);
  return HostFd{fd, 0, a};
}

/// Counts a DMA mapping in (+1) or out (-1) of re-backed region `key`.
void reback_use(std::uintptr_t key, int delta) {
  if (key == 0) return;
  std::lock_guard lock(g_reback_mu);
  auto& rb = rebacks();
  if (auto it = rb.find(key); it != rb.end())
    it->second.uses = static_cast<unsigned>(static_cast<int>(it->second.uses) + delta);
}

// ---- Device ---------------------------------------------------------------------------------

class RemoteMmio final : public backend::Mmio {
 public:
  /// `observer`: the card is attached read-only (spec §2): register writes are dropped here,
  /// and the BAR0 mailbox block is a private one whose requests go to MAILBOX_OBSERVE (§5.10),
  /// so the owner's mailbox exchange is never touched.
  /// `engine`: this process runs the card's DMA engines (spec §5.12): BAR0 doorbells go to it.
  RemoteMmio(Conn& c, unsigned bar, std::uint64_t size, bool observer, std::uint32_t card, ClientEngine* engine)
      : c_(c), bar_(bar), size_(size), observer_(observer), card_(card), engine_(engine) {}
  std::uint32_t read32(std::uint64_t off) noexcept override {
    if (in_mailbox(off)) return static_cast<std::uint32_t>(mbox_read(off - fw::regs::kMailboxBase, 4));
    return static_cast<std::uint32_t>(read(off, 4));
  }
  std::uint64_t read64(std::uint64_t off) noexcept override {
    if (in_mailbox(off)) return mbox_read(off - fw::regs::kMailboxBase, 8);
    return read(off, 8);
  }
  void write32(std::uint64_t off, std::uint32_t v) noexcept override { write(off, 4, v); }
  void write64(std::uint64_t off, std::uint64_t v) noexcept override { write(off, 8, v); }
  std::uint64_t size() const noexcept override { return size_; }

 private:
  static constexpr std::uint64_t kMboxSpan = fw::regs::mbox::kRspBuf + fw::regs::mbox::kBufSize;
  bool in_mailbox(std::uint64_t off) const noexcept {
    return observer_ && bar_ == pci::kBarRegs && off >= fw::regs::kMailboxBase &&
           off < fw::regs::kMailboxBase + kMboxSpan;
  }
  std::uint64_t read(std::uint64_t off, std::uint32_t n) noexcept {
    const std::uint64_t ones = n == 8 ? ~0ULL : 0xffffffffULL;
    std::array<std::byte, emud::access::kBytes> b{};
    emud::store<std::uint64_t>(b, emud::access::kOffset, off);
    emud::store<std::uint32_t>(b, emud::access::kRegion, bar_);
    emud::store<std::uint32_t>(b, emud::access::kCount, n);
    auto r = c_.call(emud::Command::kRegionRead, b);
    if (!r || r->body.size() != emud::access::kBytes + n) return ones;
    std::uint64_t v = 0;
    std::memcpy(&v, r->body.data() + emud::access::kBytes, n);
    return v;
  }
  void write(std::uint64_t off, std::uint32_t n, std::uint64_t v) noexcept {
    if (observer_) {
      if (in_mailbox(off)) return mbox_write(off - fw::regs::kMailboxBase, n, v);
      if (!warned_.exchange(true)) {
        npo::log::get(npo::log::Subsystem::kBackend)
            .warn(
                "emu-remote: card {} is attached read-only (mode=ro): register write at BAR{}+0x{:x} dropped; "
                "only the card's owner changes it",
                card_, bar_, off);
      }
      return;
    }
    // A queue doorbell with local engines (spec §5.12): the queue runs on this thread, after
    // every posted write before it reached the card.
    if (engine_ != nullptr && bar_ == pci::kBarRegs && engine_->runs_here()) {
      if (n == 8 && (ClientEngine::is_doorbell(off) || ClientEngine::is_doorbell(off + 4))) {
        write(off, 4, v & 0xffffffffULL);
        write(off + 4, 4, v >> 32);
        return;
      }
      if (n == 4 && ClientEngine::is_doorbell(off)) {
        if (c_.sync_posted()) engine_->doorbell(off, static_cast<std::uint32_t>(v));
        return;
      }
    }
    // A queue doorbell: through the shadow page when the connection has one (spec §5.11). An
    // 8-byte write over one goes as the card takes it, two 32-bit writes, low half first.
    if (bar_ == pci::kBarRegs && n == 8 && (c_.shadowed(off) || c_.shadowed(off + 4))) {
      write(off, 4, v & 0xffffffffULL);
      write(off + 4, 4, v >> 32);
      return;
    }
    if (bar_ == pci::kBarRegs && n == 4 && c_.ring_shadow(off, static_cast<std::uint32_t>(v))) return;
    std::array<std::byte, emud::access::kBytes + 8> b{};
    emud::store<std::uint64_t>(b, emud::access::kOffset, off);
    emud::store<std::uint32_t>(b, emud::access::kRegion, bar_);
    emud::store<std::uint32_t>(b, emud::access::kCount, n);
    std::memcpy(b.data() + emud::access::kBytes, &v, n);
    // Posted, like a PCIe memory write: one sendmsg, no reply (ordered before later reads).
    (void)c_.call(emud::Command::kRegionWrite, std::span(b).first(emud::access::kBytes + n), {}, true);
  }

  // ---- The observer's private mailbox (registers.md §4 layout, served locally) ----
  std::uint64_t mbox_read(std::uint64_t off, std::uint32_t n) noexcept {
    namespace m = fw::regs::mbox;
    std::lock_guard lock(mb_mu_);
    const std::uint64_t ones = n == 8 ? ~0ULL : 0xffffffffULL;
    if (c_.dead()) return ones;  // the daemon is gone: reads all-ones, as a removed card
    std::uint64_t v = 0;
    if (off >= m::kRspBuf && off + n <= m::kRspBuf + m::kBufSize) {
      std::memcpy(&v, rsp_.data() + (off - m::kRspBuf), n);
    } else if (off >= m::kReqBuf && off + n <= m::kReqBuf + m::kBufSize) {
      std::memcpy(&v, req_.data() + (off - m::kReqBuf), n);
    } else if (off == m::kStatus) {
      v = status_;
    } else if (off == m::kReqLen) {
      v = req_len_;
    } else if (off == m::kRspLen) {
      v = rsp_len_;
    }
    return v;
  }
  void mbox_write(std::uint64_t off, std::uint32_t n, std::uint64_t v) noexcept {
    namespace m = fw::regs::mbox;
    namespace mb = fw::mbox;
    std::lock_guard lock(mb_mu_);
    if (off >= m::kReqBuf && off + n <= m::kReqBuf + m::kBufSize) {
      std::memcpy(req_.data() + (off - m::kReqBuf), &v, n);
      return;
    }
    if (off == m::kReqLen) {
      req_len_ = static_cast<std::uint32_t>(v);
      return;
    }
    if (off == m::kStatus) {
      status_ &= ~static_cast<std::uint32_t>(v & (m::kStatusDone.mask() | m::kStatusError.mask()));
      return;
    }
    if (off != m::kCtrl || m::kCtrlSend.get(static_cast<std::uint32_t>(v)) == 0) return;
    if (req_len_ < emud::observe::kMinBytes || req_len_ > emud::observe::kMaxBytes) {
      rsp_len_ = 0;
      status_ = m::kStatusDone.mask() | m::kStatusError.mask();
      return;
    }
    auto r = c_.call(emud::Command::kMailboxObserve, std::span<const std::byte>(req_.data(), req_len_));
    if (r && r->body.size() >= mb::hdr::kSize && r->body.size() <= m::kBufSize) {
      std::memcpy(rsp_.data(), r->body.data(), r->body.size());
      rsp_len_ = static_cast<std::uint32_t>(r->body.size());
      status_ = m::kStatusDone.mask();
      return;
    }
    if (!r && r.error().code() == Code::kPermissionDenied) {
      // The command would change the card: answer it as the firmware answers a write to a
      // read-only byte (READ_ONLY -> kPermissionDenied in the mailbox client).
      npo::log::get(npo::log::Subsystem::kBackend).warn("emu-remote: {}", r.error().message());
      std::array<std::byte, mb::hdr::kSize> h{};
      std::memcpy(h.data(), req_.data(), mb::hdr::kSize);
      fw::store_le<std::uint8_t>(h.data(), mb::hdr::kFlags, mb::hdr::kFlagResponse);
      fw::store_le<std::uint16_t>(h.data(), mb::hdr::kPayloadLen, 0);
      fw::store_le<std::uint16_t>(h.data(), mb::hdr::kStatus, static_cast<std::uint16_t>(mb::Status::kReadOnly));
      fw::store_le<std::uint32_t>(h.data(), mb::hdr::kCrc, 0);
      fw::store_le<std::uint32_t>(h.data(), mb::hdr::kCrc, mb::message_crc(std::span<const std::byte>(h)));
      std::memcpy(rsp_.data(), h.data(), h.size());
      rsp_len_ = mb::hdr::kSize;
      status_ = m::kStatusDone.mask();
      return;
    }
    // Daemon gone or a malformed exchange: the request could not be served.
    rsp_len_ = 0;
    status_ = m::kStatusDone.mask() | m::kStatusError.mask();
  }

  Conn& c_;
  unsigned bar_;
  std::uint64_t size_;
  bool observer_;
  std::uint32_t card_;
  ClientEngine* engine_;
  std::atomic<bool> warned_{false};
  std::mutex mb_mu_;
  std::array<std::byte, fw::regs::mbox::kBufSize> req_{};
  std::array<std::byte, fw::regs::mbox::kBufSize> rsp_{};
  std::uint32_t req_len_ = 0;
  std::uint32_t rsp_len_ = 0;
  std::uint32_t status_ = 0;
};

/// Which cards a backend has open; shared with its devices so a device closing after its
/// backend is safe.
struct OpenSet {
  std::mutex mu;
  std::set<backend::PciAddress> open;
};

class RemoteDevice final : public backend::Device {
 public:
  RemoteDevice(std::unique_ptr<Conn> c, CardInfo ci, std::shared_ptr<OpenSet> open, bool local_engines)
      : c_(std::move(c)), link_(*c_), ci_(std::move(ci)), open_(std::move(open)) {
    if (!local_engines) return;
    auto e = share_engines(*c_, link_);
    if (e) {
      engine_ = std::move(*e);
    } else {
      npo::log::get(npo::log::Subsystem::kBackend)
          .debug("emu-remote: card {}: npo-emud runs the card's engines: {}", ci_.card, e.error().message());
    }
  }
  ~RemoteDevice() override {
    {
      std::lock_guard lock(open_->mu);
      open_->open.erase(ci_.fi.address);
    }
    for (const auto& [iova, key] : reback_of_) reback_use(key, -1);  // the daemon drops our maps on close
    if (aperture_.data() != nullptr) ::munmap(aperture_.data(), aperture_.size());
    if (aperture_fd_ >= 0) ::close(aperture_fd_);
  }
  const backend::FunctionInfo& info() const noexcept override { return ci_.fi; }

  Result<void> config_read(std::uint32_t offset, std::span<std::byte> out) override {
    if (offset > pci::cfg::kConfigSize || out.size() > pci::cfg::kConfigSize - offset) {
      std::fill(out.begin(), out.end(), std::byte{0xff});
      return fail(Code::kOutOfRange, fmt::format("config read of {} bytes at 0x{:x} past 4 KiB", out.size(), offset));
    }
    if (out.empty()) return {};
    std::array<std::byte, emud::access::kBytes> b{};
    emud::store<std::uint64_t>(b, emud::access::kOffset, offset);
    emud::store<std::uint32_t>(b, emud::access::kRegion, emud::kRegionConfig);
    emud::store<std::uint32_t>(b, emud::access::kCount, static_cast<std::uint32_t>(out.size()));
    auto r = c_->call(emud::Command::kRegionRead, b);
    if (!r || r->body.size() != emud::access::kBytes + out.size()) {
      std::fill(out.begin(), out.end(), std::byte{0xff});
      if (!r) return std::unexpected(r.error().with({.card = ci_.card}));
      return fail(Code::kInternal, "emu-remote: short config read reply");
    }
    std::memcpy(out.data(), r->body.data() + emud::access::kBytes, out.size());
    return {};
  }
  Result<void> config_write(std::uint32_t offset, std::span<const std::byte> data) override {
    if (offset > pci::cfg::kConfigSize || data.size() > pci::cfg::kConfigSize - offset) {
      return fail(Code::kOutOfRange, fmt::format("config write of {} bytes at 0x{:x} past 4 KiB", data.size(), offset));
    }
    if (data.empty()) return {};
    if (ci_.fi.read_only) {
      return fail(Code::kPermissionDenied,
                  fmt::format("emu-remote: card {} is attached read-only (mode=ro): config writes need the owner's "
                              "attach",
                              ci_.card),
                  {.card = ci_.card});
    }
    std::vector<std::byte> b(emud::access::kBytes + data.size());
    emud::store<std::uint64_t>(b, emud::access::kOffset, offset);
    emud::store<std::uint32_t>(b, emud::access::kRegion, emud::kRegionConfig);
    emud::store<std::uint32_t>(b, emud::access::kCount, static_cast<std::uint32_t>(data.size()));
    std::memcpy(b.data() + emud::access::kBytes, data.data(), data.size());
    auto r = c_->call(emud::Command::kRegionWrite, b);
    if (!r) return std::unexpected(r.error().with({.card = ci_.card}));
    return {};
  }

  struct RegionCache {
    backend::RegionInfo info;
    std::uint64_t mmap_offset = 0;
    std::uint64_t mmap_size = 0;
  };
  Result<RegionCache> region(unsigned index) {
    std::array<std::byte, emud::region_info::kCommandBytes> b{};
    emud::store<std::uint32_t>(b, emud::region_info::kIndex, index);
    auto r = c_->call(emud::Command::kRegionInfo, b);
    if (!r) return std::unexpected(r.error().with({.card = ci_.card}));
    if (r->body.size() < emud::region_info::kBytes) {
      if (r->fd >= 0) ::close(r->fd);
      return fail(Code::kInternal, "emu-remote: short REGION_INFO reply");
    }
    RegionCache rc;
    const auto flags = emud::load<std::uint32_t>(r->body, emud::region_info::kFlags);
    rc.info.index = index;
    rc.info.size = emud::load<std::uint64_t>(r->body, emud::region_info::kSize);
    rc.info.mappable = (flags & emud::region_info::kMmap) != 0;
    rc.info.prefetchable = (flags & emud::region_info::kPrefetchable) != 0;
    rc.info.is_64bit = (flags & emud::region_info::k64Bit) != 0;
    rc.mmap_offset = emud::load<std::uint64_t>(r->body, emud::region_info::kMmapOffset);
    rc.mmap_size = emud::load<std::uint64_t>(r->body, emud::region_info::kMmapSize);
    if (r->fd >= 0) {
      std::lock_guard lock(mu_);
      if (aperture_fd_ < 0) {
        aperture_fd_ = r->fd;
      } else {
        ::close(r->fd);
      }
    }
    return rc;
  }

  Result<backend::RegionInfo> region_info(unsigned index) override {
    if (index > 5) return fail(Code::kInvalidArgument, fmt::format("BAR index {} > 5", index));
    auto r = region(index);
    if (!r) return std::unexpected(r.error());
    return r->info;
  }
  Result<backend::Mmio*> mmio(unsigned index) override {
    if (index > 5) return fail(Code::kNotFound, fmt::format("BAR{} does not exist", index), {.card = ci_.card});
    {
      std::lock_guard lock(mu_);
      if (mmio_[index]) return mmio_[index].get();
    }
    auto r = region(index);
    if (!r) return std::unexpected(r.error());
    if (r->info.size == 0) {
      return fail(Code::kNotFound, fmt::format("BAR{} is not implemented by the card", index), {.card = ci_.card});
    }
    if (r->info.mappable) {
      return fail(Code::kUnimplemented, fmt::format("BAR{} is the HBM aperture: use map_aperture()", index),
                  {.card = ci_.card});
    }
    std::lock_guard lock(mu_);
    if (!mmio_[index])
      mmio_[index] = std::make_unique<RemoteMmio>(*c_, index, r->info.size, ci_.fi.read_only, ci_.card, engine_.get());
    return mmio_[index].get();
  }
  Result<std::span<std::byte>> map_aperture(unsigned index) override {
    auto a = aperture_fd(index);
    if (!a) return std::unexpected(a.error());
    std::lock_guard lock(mu_);
    if (aperture_.data() == nullptr) {
      void* p = ::mmap(nullptr, a->size, PROT_READ | PROT_WRITE, MAP_SHARED, a->fd, static_cast<off_t>(a->offset));
      if (p == MAP_FAILED) return fail_errno(errno, "emu-remote: mmap of the HBM aperture", {.card = ci_.card});
      aperture_ = {static_cast<std::byte*>(p), a->size};
    }
    return aperture_;
  }
  Result<ApertureFd> aperture_fd(unsigned index) override {
    if (index > 5) return fail(Code::kUnimplemented, fmt::format("BAR{} cannot be mapped directly", index));
    auto r = region(index);
    if (!r) return std::unexpected(r.error());
    std::lock_guard lock(mu_);
    if (!r->info.mappable || aperture_fd_ < 0) {
      return fail(Code::kUnimplemented, fmt::format("BAR{} cannot be mapped directly", index), {.card = ci_.card});
    }
    return ApertureFd{aperture_fd_, r->mmap_offset, r->mmap_size};
  }
  std::vector<backend::IovaRange> iova_ranges() const override { return {ci_.iova}; }

  Result<void> dma_map(const void* vaddr, std::uint64_t iova, std::uint64_t length,
                       backend::DmaAccess access) override {
    const auto va = reinterpret_cast<std::uintptr_t>(vaddr);
    if (length == 0 || va % kPage != 0 || iova % kPage != 0 || length % kPage != 0) {
      return fail(Code::kInvalidArgument,
                  fmt::format("dma_map: vaddr {:#x}, iova {:#x} and length {:#x} must be 4 KiB aligned, length > 0", va,
                              iova, length),
                  {.card = ci_.card});
    }
    if (iova < ci_.iova.first || iova > ci_.iova.last || length - 1 > ci_.iova.last - iova) {
      return fail(Code::kOutOfRange,
                  fmt::format("dma_map: IOVA [{:#x}, +{:#x}) outside [{:#x}, {:#x}]", iova, length, ci_.iova.first,
                              ci_.iova.last),
                  {.card = ci_.card});
    }
    {
      // Refuse an IOVA overlap here, before host_fd may copy and re-back the memory: the
      // daemon would refuse the map anyway, and the range of a refused map need not even be
      // the caller's memory (a conformance case maps past its buffer to provoke the error).
      std::lock_guard lock(mu_);
      auto next = mapped_.lower_bound(iova);
      const bool hits_next = next != mapped_.end() && next->first < iova + length;
      const bool hits_prev = next != mapped_.begin() && std::prev(next)->first + std::prev(next)->second > iova;
      if (hits_next || hits_prev) {
        return fail(Code::kAlreadyExists, fmt::format("dma_map: IOVA [{:#x}, +{:#x}) overlaps a mapping", iova, length),
                    {.card = ci_.card});
      }
    }
    auto h = host_fd(vaddr, length);
    if (!h) return std::unexpected(h.error().with({.card = ci_.card}));
    std::array<std::byte, emud::dma_map::kBytes> b{};
    emud::store<std::uint64_t>(b, emud::dma_map::kIova, iova);
    emud::store<std::uint64_t>(b, emud::dma_map::kSize, length);
    emud::store<std::uint64_t>(b, emud::dma_map::kFdOffset, h->offset);
    emud::store<std::uint32_t>(b, emud::dma_map::kAccess, static_cast<std::uint32_t>(access));
    // A memfd made without MFD_ALLOW_SEALING (DPDK's --no-huge memory) cannot be sealed
    // against shrinking: ask for a SIGBUS-guarded mapping (spec §5.2 "Unsealed memory").
    bool unsealed = false;
    if (const int seals = ::fcntl(h->fd, F_GET_SEALS);
        seals >= 0 && (seals & F_SEAL_SHRINK) == 0 && (seals & F_SEAL_SEAL) != 0) {
      emud::store<std::uint32_t>(b, emud::dma_map::kFlags, emud::dma_map::kFlagUnsealed);
      unsealed = true;
    }
    const int fd = h->fd;
    auto r = c_->call(emud::Command::kDmaMap, b, std::span(&fd, 1));
    if (!r) return std::unexpected(r.error().with({.card = ci_.card}));
    // Memory its owner can shrink under a mapping is the daemon's to touch, behind its SIGBUS guard.
    if (engine_ && unsealed && engine_->runs_here()) {
      engine_->hand_to_daemon();
      npo::log::get(npo::log::Subsystem::kBackend)
          .info(
              "emu-remote: card {}: npo-emud runs the card's engines from now on: IOVA {:#x} maps a memfd that "
              "cannot be sealed (spec §5.2), which only the daemon touches safely",
              ci_.card, iova);
    }
    if (auto m = mirror([&] { return engine_->map(vaddr, iova, length, access); }, iova, length); !m) return m;
    {
      std::lock_guard lock(mu_);
      mapped_[iova] = length;
    }
    if (h->reback != 0) {
      reback_use(h->reback, +1);
      std::lock_guard lock(mu_);
      reback_of_[iova] = h->reback;
    }
    return {};
  }
  Result<void> dma_map_process(std::uint64_t vaddr, std::uint64_t iova, std::uint64_t length,
                               backend::DmaAccess access) override {
    if (length == 0 || vaddr % kPage != 0 || iova % kPage != 0 || length % kPage != 0) {
      return fail(Code::kInvalidArgument,
                  fmt::format("dma_map_process: vaddr {:#x}, iova {:#x} and length {:#x} must be 4 KiB aligned, "
                              "length > 0",
                              vaddr, iova, length),
                  {.card = ci_.card});
    }
    if (::getpid() != c_->opener()) {
      return fail(Code::kFailedPrecondition,
                  fmt::format("dma_map_process: this connection to npo-emud was opened by pid {}, not by this "
                              "process (pid {}): a forked child opens its own System",
                              c_->opener(), ::getpid()),
                  {.card = ci_.card});
    }
    std::array<std::byte, emud::dma_map::kBytes> b{};
    emud::store<std::uint64_t>(b, emud::dma_map::kIova, iova);
    emud::store<std::uint64_t>(b, emud::dma_map::kSize, length);
    emud::store<std::uint64_t>(b, emud::dma_map::kFdOffset, vaddr);
    emud::store<std::uint32_t>(b, emud::dma_map::kAccess, static_cast<std::uint32_t>(access));
    emud::store<std::uint32_t>(b, emud::dma_map::kFlags, emud::dma_map::kFlagProcessMemory);
    auto r = c_->call(emud::Command::kDmaMap, b);
    if (!r && r.error().code() == Code::kPermissionDenied) {
      // Yama ptrace_scope 1 lets only an ancestor, or the process named with PR_SET_PTRACER,
      // read us. Name the daemon only now: a runtime may have allowed any ptracer already
      // (Open MPI's vader does, for its single-copy path), and then the first try succeeds.
      if (const pid_t d = c_->peer_pid();
          d > 0 && ::prctl(PR_SET_PTRACER, static_cast<unsigned long>(d), 0, 0, 0) == 0) {
        r = c_->call(emud::Command::kDmaMap, b);
      }
    }
    if (!r) return std::unexpected(r.error().with({.card = ci_.card}));
    if (auto m = mirror([&] { return engine_->map_process(vaddr, iova, length, access); }, iova, length); !m) {
      return m;
    }
    std::lock_guard lock(mu_);
    mapped_[iova] = length;
    return {};
  }
  Result<void> dma_unmap(std::uint64_t iova, std::uint64_t length) override {
    // Local engines first: once the daemon unmaps, the memory may go (their batches using the
    // range end before this returns).
    bool known = false;
    {
      std::lock_guard lock(mu_);
      auto it = mapped_.find(iova);
      known = it != mapped_.end() && it->second == length;
    }
    if (engine_ && known) engine_->unmap(iova, length);
    auto r = undo_daemon_map(iova, length);
    if (!r) return std::unexpected(r.error().with({.card = ci_.card}));
    std::lock_guard lock(mu_);
    mapped_.erase(iova);
    if (auto it = reback_of_.find(iova); it != reback_of_.end()) {
      reback_use(it->second, -1);
      reback_of_.erase(it);
    }
    return {};
  }

  unsigned msix_vectors() const noexcept override { return ci_.msix_vectors; }
  Result<void> set_msix_eventfds(unsigned first, std::span<const int> fds) override {
    if (first > ci_.msix_vectors || fds.size() > ci_.msix_vectors - first) {
      return fail(Code::kOutOfRange,
                  fmt::format("MSI-X vectors {}..{} past {} vectors", first, first + fds.size(), ci_.msix_vectors));
    }
    for (int fd : fds) {
      if (fd < -1 || (fd >= 0 && ::fcntl(fd, F_GETFD) < 0)) {
        return fail(Code::kInvalidArgument, fmt::format("MSI-X: fd {} is not an open file descriptor", fd));
      }
    }
    if (fds.empty()) return {};
    return set_irqs(emud::irqs::kIrqMsix, first, fds);
  }
  Result<void> set_msi_eventfd(int fd) override {
    if (fd < -1 || (fd >= 0 && ::fcntl(fd, F_GETFD) < 0)) {
      return fail(Code::kInvalidArgument, fmt::format("MSI: fd {} is not an open file descriptor", fd));
    }
    return set_irqs(emud::irqs::kIrqMsi, 0, std::span(&fd, 1));
  }
  Result<void> reset() override {
    auto r = c_->call(emud::Command::kDeviceReset, {});
    if (!r) return std::unexpected(r.error().with({.card = ci_.card}));
    return {};
  }
  Result<void> check_connection() override { return c_->check(); }

 private:
  /// With local engines, `map()` mirrors a mapping the daemon just made into their view of the
  /// IOMMU; if that fails, the daemon's mapping is undone too (nothing is mapped on error).
  template <class Map>
  Result<void> mirror(Map map, std::uint64_t iova, std::uint64_t length) {
    if (!engine_) return {};
    if (auto m = map(); !m) {
      (void)undo_daemon_map(iova, length);
      return std::unexpected(m.error().with({.card = ci_.card}));
    }
    return {};
  }
  /// DMA_UNMAP of [iova, +length) at the daemon.
  Result<void> undo_daemon_map(std::uint64_t iova, std::uint64_t length) {
    std::array<std::byte, emud::dma_unmap::kBytes> b{};
    emud::store<std::uint64_t>(b, emud::dma_unmap::kIova, iova);
    emud::store<std::uint64_t>(b, emud::dma_unmap::kSize, length);
    auto r = c_->call(emud::Command::kDmaUnmap, b);
    if (!r) return std::unexpected(r.error());
    return {};
  }

  Result<void> set_irqs(std::uint32_t index, unsigned first, std::span<const int> fds) {
    std::array<std::byte, emud::irqs::kBytes> b{};
    std::vector<int> attached;
    std::uint64_t mask = 0;
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (fds[i] >= 0) {
        mask |= 1ULL << i;
        attached.push_back(fds[i]);
      }
    }
    emud::store<std::uint32_t>(b, emud::irqs::kIndex, index);
    emud::store<std::uint32_t>(b, emud::irqs::kStart, first);
    emud::store<std::uint32_t>(b, emud::irqs::kCount, static_cast<std::uint32_t>(fds.size()));
    emud::store<std::uint64_t>(b, emud::irqs::kFdMask, mask);
    auto r = c_->call(emud::Command::kSetIrqs, b, attached);
    if (!r) return std::unexpected(r.error().with({.card = ci_.card}));
    return {};
  }

  std::unique_ptr<Conn> c_;
  ConnLink link_;
  CardInfo ci_;
  /// This process runs the card's DMA engines (spec §5.12); null: npo-emud does. Declared after
  /// the connection it reports through, so it goes first.
  std::unique_ptr<ClientEngine> engine_;
  std::mutex mu_;
  std::array<std::unique_ptr<RemoteMmio>, 6> mmio_;
  int aperture_fd_ = -1;
  std::span<std::byte> aperture_;
  std::map<std::uint64_t, std::uintptr_t> reback_of_;  ///< IOVA -> re-backed region it maps
  std::map<std::uint64_t, std::uint64_t> mapped_;      ///< IOVA -> length of each DMA mapping (overlap check)
  std::shared_ptr<OpenSet> open_;
};

// ---- Backend --------------------------------------------------------------------------------

struct Options {
  std::filesystem::path dir;
  std::optional<std::set<std::uint32_t>> cards;
  bool read_only = false;
  /// owner=K[,L...]: attach only these cards as owner, every other one read-only (a tool
  /// that changes one card watches the rest without taking them from their jobs).
  std::optional<std::set<std::uint32_t>> owners;
  /// doorbell=shadow (the default): an owner rings its queues through the shadow page (spec
  /// §5.11); doorbell=socket: one posted REGION_WRITE per doorbell (protocol 1.3 and before).
  bool shadow_doorbells = true;
  /// engine=local (the default, unless doorbell=socket): an owner runs its card's DMA engines in
  /// this process (spec §5.12; its doorbells wait for posted writes through the shadow page, so
  /// it needs doorbell=shadow); engine=daemon: npo-emud's session thread runs them.
  bool local_engines = true;
};

Result<Options> parse(std::string_view rest) {
  Options o;
  const auto q = rest.find('?');
  o.dir = std::string(rest.substr(0, q));
  if (o.dir.empty()) return fail(Code::kInvalidArgument, fmt::format("emu-remote: no directory; forms: {}", kForms));
  if (q == std::string_view::npos) return o;
  bool engine_given = false;
  std::string_view opts = rest.substr(q + 1);
  while (!opts.empty()) {
    const auto amp = opts.find('&');
    const std::string_view kv = opts.substr(0, amp);
    opts = amp == std::string_view::npos ? std::string_view{} : opts.substr(amp + 1);
    const auto eq = kv.find('=');
    const std::string_view k = kv.substr(0, eq);
    const std::string_view v = eq == std::string_view::npos ? std::string_view{} : kv.substr(eq + 1);
    if (k == "card" || k == "owner") {
      auto& set = k == "card" ? o.cards : o.owners;
      set.emplace();
      std::string_view list = v;
      while (true) {
        const auto comma = list.find(',');
        const std::string_view item = list.substr(0, comma);
        std::uint32_t n = 0;
        const auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), n);
        if (item.empty() || ec != std::errc{} || p != item.data() + item.size()) {
          return fail(Code::kInvalidArgument,
                      fmt::format("emu-remote: {} list '{}' is not K[,L...]; forms: {}", k, v, kForms));
        }
        set->insert(n);
        if (comma == std::string_view::npos) break;
        list = list.substr(comma + 1);
      }
    } else if (k == "mode" && (v == "ro" || v == "rw")) {
      o.read_only = v == "ro";
    } else if (k == "doorbell") {
      if (v != "shadow" && v != "socket") {
        return fail(Code::kInvalidArgument,
                    fmt::format("emu-remote: doorbell={} is neither shadow nor socket; forms: {}", v, kForms));
      }
      o.shadow_doorbells = v == "shadow";
    } else if (k == "engine") {
      if (v != "local" && v != "daemon") {
        return fail(Code::kInvalidArgument,
                    fmt::format("emu-remote: engine={} is neither local nor daemon; forms: {}", v, kForms));
      }
      o.local_engines = v == "local";
      engine_given = true;
    } else {
      return fail(Code::kInvalidArgument, fmt::format("emu-remote: unknown option '{}'; forms: {}", kv, kForms));
    }
  }
  if (!o.shadow_doorbells) {
    if (engine_given && o.local_engines) {
      return fail(Code::kInvalidArgument,
                  fmt::format("emu-remote: engine=local needs doorbell=shadow (an owner's own engines order their "
                              "doorbells after its posted writes through the shadow page, spec §5.12); with "
                              "doorbell=socket the daemon runs the engines (engine=daemon); forms: {}",
                              kForms));
    }
    o.local_engines = false;  // doorbell=socket: the daemon's engines, rung by posted writes
  }
  if (o.owners && o.read_only) {
    return fail(Code::kInvalidArgument,
                fmt::format("emu-remote: owner= and mode=ro contradict each other; forms: {}", kForms));
  }
  return o;
}

std::filesystem::path socket_of(const std::filesystem::path& dir, std::uint32_t card) {
  return dir / fmt::format("{}{}{}", emud::kSocketPrefix, card, emud::kSocketSuffix);
}

class RemoteBackend final : public backend::Backend {
 public:
  RemoteBackend(Options o, std::string uri) : o_(std::move(o)), uri_(std::move(uri)) {}
  std::string_view name() const noexcept override { return "emu-remote"; }
  const std::string& uri() const noexcept override { return uri_; }

  Result<std::vector<backend::FunctionInfo>> enumerate() override {
    std::error_code ec;
    // A directory this user may not search is npo-emud's permissions, not a missing daemon.
    const auto denied = [&] {
      return fail(Code::kPermissionDenied,
                  fmt::format("emu-remote: cannot read {} ({}): npo-emud's socket directory does not let this user "
                              "in; start npo-emud with --socket-group GROUP (and --socket-mode 0660) and join that "
                              "group, or run as the daemon's user",
                              o_.dir.string(), ec.message()));
    };
    const bool is_dir = std::filesystem::is_directory(o_.dir, ec);
    if (ec == std::errc::permission_denied) return denied();
    if (!is_dir) {
      return fail(Code::kUnavailable,
                  fmt::format("emu-remote: {} is not a directory: start the daemon with `npo-emud --topology "
                              "emu:mesh8 --socket-dir {}`",
                              o_.dir.string(), o_.dir.string()));
    }
    std::set<std::uint32_t> cards;
    for (const auto& e : std::filesystem::directory_iterator(o_.dir, ec)) {
      const auto n = e.path().filename().string();
      if (!n.starts_with(emud::kSocketPrefix) || !n.ends_with(emud::kSocketSuffix)) continue;
      const auto digits =
          std::string_view(n).substr(std::strlen(emud::kSocketPrefix),
                                     n.size() - std::strlen(emud::kSocketPrefix) - std::strlen(emud::kSocketSuffix));
      std::uint32_t k = 0;
      const auto [p, err] = std::from_chars(digits.data(), digits.data() + digits.size(), k);
      if (err == std::errc{} && p == digits.data() + digits.size()) cards.insert(k);
    }
    if (ec == std::errc::permission_denied) return denied();
    if (cards.empty()) {
      // A cleanly stopped daemon removes its sockets and leaves the directory: that is no
      // supernode, not an empty one.
      return fail(Code::kUnavailable,
                  fmt::format("emu-remote: no npo-emud serving {} (no {}K{} socket in it): start it with `npo-emud "
                              "--topology emu:mesh8 --socket-dir {}`",
                              o_.dir.string(), emud::kSocketPrefix, emud::kSocketSuffix, o_.dir.string()));
    }
    if (o_.cards) {
      for (auto k : *o_.cards) {
        if (cards.count(k) == 0) {
          return fail(Code::kNotFound,
                      fmt::format("emu-remote: the daemon at {} serves no card {}", o_.dir.string(), k));
        }
      }
      cards = *o_.cards;
    }
    if (o_.owners) {
      for (auto k : *o_.owners) {
        if (cards.count(k) == 0) {
          return fail(Code::kNotFound, fmt::format("emu-remote: the daemon at {} serves no card {}{}", o_.dir.string(),
                                                   k, o_.cards ? " among the cards of card=" : ""));
        }
      }
    }
    std::vector<backend::FunctionInfo> out;
    std::lock_guard lock(mu_);
    by_address_.clear();
    for (auto k : cards) {
      auto c = Conn::connect(socket_of(o_.dir, k), fmt::format("card {}", k), daemon_);
      if (!c) return std::unexpected(c.error());
      if (auto h = hello(**c, true); !h) return std::unexpected(h.error());
      auto ci = device_info(**c);
      if (!ci) return std::unexpected(ci.error());
      by_address_[ci->fi.address] = k;
      out.push_back(ci->fi);
    }
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.address < b.address; });
    return out;
  }

  Result<std::unique_ptr<backend::Device>> open(const backend::PciAddress& address) override {
    std::optional<std::uint32_t> card;
    {
      std::lock_guard lock(mu_);
      if (auto it = by_address_.find(address); it != by_address_.end()) card = it->second;
    }
    if (!card) {
      if (auto e = enumerate(); !e) return std::unexpected(e.error());
      std::lock_guard lock(mu_);
      if (auto it = by_address_.find(address); it != by_address_.end()) card = it->second;
    }
    if (!card) return fail(Code::kNotFound, fmt::format("{}: no card at {}", uri_, address.to_string()));
    {
      std::lock_guard lock(open_->mu);
      if (!open_->open.insert(address).second) {
        return fail(Code::kAlreadyExists, fmt::format("{} is already open", address.to_string()), {.card = *card});
      }
    }
    auto undo = [&] {
      std::lock_guard lock(open_->mu);
      open_->open.erase(address);
    };
    auto c = Conn::connect(socket_of(o_.dir, *card), fmt::format("card {}", *card), daemon_);
    if (!c) {
      undo();
      return std::unexpected(c.error());
    }
    const bool read_only = o_.read_only || (o_.owners && o_.owners->count(*card) == 0);
    if (auto h = hello(**c, read_only); !h) {
      undo();
      return std::unexpected(Error(h.error()).with({.card = *card}));
    }
    auto ci = device_info(**c);
    if (!ci) {
      undo();
      return std::unexpected(ci.error());
    }
    ci->fi.read_only = read_only;
    if (!read_only && o_.shadow_doorbells) {
      bool armed = false;
      if (auto s = (*c)->enable_shadow(&armed); !s) {
        if (armed) {  // the daemon refuses REGION_WRITE doorbells now: this connection is unusable
          undo();
          return std::unexpected(Error(s.error()).with({.card = *card}));
        }
        npo::log::get(npo::log::Subsystem::kBackend)
            .debug("emu-remote: card {}: doorbells stay posted REGION_WRITEs: {}", *card, s.error().message());
      }
    }
    // Local engines need the shadow page's count of handled posted writes (spec §5.12).
    const bool local = !read_only && o_.local_engines && (*c)->has_shadow();
    return std::unique_ptr<backend::Device>(
        std::make_unique<RemoteDevice>(std::move(*c), std::move(*ci), open_, local));
  }

 private:
  Options o_;
  std::string uri_;
  std::mutex mu_;
  std::map<backend::PciAddress, std::uint32_t> by_address_;
  std::shared_ptr<OpenSet> open_ = std::make_shared<OpenSet>();
  std::shared_ptr<Daemon> daemon_ = std::make_shared<Daemon>(o_.dir.string());
};

}  // namespace
}  // namespace remote

Result<void> register_remote_backend(backend::Registry& registry) {
  using namespace remote;
  return registry.add(
      "emu-remote", {std::string(kForms)},
      [](std::string_view rest, std::string_view uri) -> Result<std::unique_ptr<backend::Backend>> {
        auto o = parse(rest);
        if (!o) return std::unexpected(o.error());
        return std::unique_ptr<backend::Backend>(std::make_unique<RemoteBackend>(std::move(*o), std::string(uri)));
      });
}

}  // namespace npo::emu
