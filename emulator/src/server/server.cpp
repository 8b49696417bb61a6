// SPDX-License-Identifier: Apache-2.0
// npo-emud's server (docs/spec/emud-protocol.md): one listening socket per card, one thread
// per connection, each message parsed by parse_command and executed on the card's
// backend::Device (the emulator's own backend) or, for read-only attaches, on the card model.
// This file holds the listening sockets and their accept loop, and Server's start and stop.
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
#include "server/session.hpp"
#include "server/sigbus_guard.hpp"
#include "system.hpp"

namespace npo::emu {

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
