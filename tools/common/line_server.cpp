// SPDX-License-Identifier: Apache-2.0
#include "common/line_server.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <thread>

#include <fmt/format.h>

namespace npo::tools {

namespace {
constexpr std::size_t kMaxLine = 1u << 20;

Result<sockaddr_un> address_of(const std::filesystem::path& path) {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (path.string().size() >= sizeof sa.sun_path) {
    return fail(Code::kInvalidArgument,
                fmt::format("socket path {} longer than {} bytes", path.string(), sizeof sa.sun_path - 1));
  }
  std::memcpy(sa.sun_path, path.c_str(), path.string().size());
  return sa;
}

bool write_all(int fd, std::string_view s) {
  while (!s.empty()) {
    const ssize_t n = ::send(fd, s.data(), s.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    s.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}
}  // namespace

struct LineServer::Impl {
  std::filesystem::path path;
  Handler handler;
  std::function<void(const std::string&)> say;
  int listen_fd = -1;
  int stop_fd = -1;
  std::thread thread;

  void run() {
    std::map<int, std::string> conns;  // fd -> bytes not yet a line
    while (true) {
      std::vector<pollfd> fds{{stop_fd, POLLIN, 0}, {listen_fd, POLLIN, 0}};
      for (const auto& [fd, buf] : conns) fds.push_back({fd, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), -1) < 0) {
        if (errno == EINTR) continue;
        break;
      }
      if (fds[0].revents != 0) break;
      if ((fds[1].revents & POLLIN) != 0) accept_one(conns);
      for (std::size_t i = 2; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        const int fd = fds[i].fd;
        if (!serve(fd, conns[fd])) {
          ::close(fd);
          conns.erase(fd);
        }
      }
    }
    for (const auto& [fd, buf] : conns) ::close(fd);
  }

  void accept_one(std::map<int, std::string>& conns) {
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) return;
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || (cred.uid != ::geteuid() && cred.uid != 0)) {
      say(fmt::format("{}: refused a connection from uid {} pid {} (only uid {} or root)", path.string(), cred.uid,
                      cred.pid, ::geteuid()));
      ::close(fd);
      return;
    }
    conns[fd];
  }

  /// Reads what `fd` has and answers every complete line. False: close the connection.
  bool serve(int fd, std::string& buf) {
    char chunk[8192];
    const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
    if (n <= 0) return false;
    buf.append(chunk, static_cast<std::size_t>(n));
    std::size_t nl;
    while ((nl = buf.find('\n')) != std::string::npos) {
      std::string line = buf.substr(0, nl);
      buf.erase(0, nl + 1);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (!write_all(fd, handler(line) + "\n")) return false;
    }
    if (buf.size() > kMaxLine) {
      (void)write_all(fd, R"({"error":{"code":"invalid_argument","message":"request line longer than 1 MiB"}})"
                          "\n");
      return false;
    }
    return true;
  }
};

Result<std::unique_ptr<LineServer>> LineServer::start(std::filesystem::path path, Handler handler,
                                                      std::function<void(const std::string&)> say) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->handler = std::move(handler);
  impl->say = std::move(say);
  const std::filesystem::path tmp = path.string() + ".new";
  auto sa = address_of(tmp);
  if (!sa) return std::unexpected(std::move(sa.error()));
  impl->listen_fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (impl->listen_fd < 0) return fail_errno(errno, "socket");
  auto cleanup = [&](int err, std::string what) {
    ::close(impl->listen_fd);
    ::unlink(tmp.c_str());
    return fail_errno(err, fmt::format("{} {}", what, path.string()));
  };
  ::unlink(tmp.c_str());
  if (::bind(impl->listen_fd, reinterpret_cast<const sockaddr*>(&*sa), sizeof *sa) != 0) return cleanup(errno, "bind");
  if (::chmod(tmp.c_str(), 0600) != 0) return cleanup(errno, "chmod");
  if (::listen(impl->listen_fd, 16) != 0) return cleanup(errno, "listen");
  if (::rename(tmp.c_str(), path.c_str()) != 0) return cleanup(errno, "rename to");
  impl->stop_fd = ::eventfd(0, EFD_CLOEXEC);
  if (impl->stop_fd < 0) return cleanup(errno, "eventfd");
  impl->thread = std::thread([p = impl.get()] { p->run(); });
  return std::unique_ptr<LineServer>(new LineServer(std::move(impl)));
}

LineServer::LineServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

LineServer::~LineServer() {
  const std::uint64_t one = 1;
  (void)!::write(impl_->stop_fd, &one, sizeof one);
  if (impl_->thread.joinable()) impl_->thread.join();
  ::close(impl_->stop_fd);
  ::close(impl_->listen_fd);
  ::unlink(impl_->path.c_str());
}

Result<std::string> line_request(const std::filesystem::path& path, std::string_view line, int timeout_ms) {
  auto sa = address_of(path);
  if (!sa) return std::unexpected(std::move(sa.error()));
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return fail_errno(errno, "socket");
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&*sa), sizeof *sa) != 0) {
    return fail(errno == EACCES ? Code::kPermissionDenied : Code::kUnavailable,
                fmt::format("connect {}: {} (is the daemon running?)", path.string(), std::strerror(errno)));
  }
  if (!write_all(fd, std::string(line) + "\n")) return fail_errno(errno, fmt::format("send to {}", path.string()));
  std::string buf;
  while (buf.find('\n') == std::string::npos) {
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, timeout_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) return fail(Code::kDeadlineExceeded, fmt::format("{}: no reply in {} ms", path.string(), timeout_ms));
    char chunk[8192];
    const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return fail(Code::kUnavailable, fmt::format("{}: closed without a reply (refused?)", path.string()));
    buf.append(chunk, static_cast<std::size_t>(n));
  }
  return buf.substr(0, buf.find('\n'));
}

}  // namespace npo::tools
