// SPDX-License-Identifier: Apache-2.0
// RemoteFabric: npo-emud's fabric management socket, client side (npo/emu/remote_fabric.hpp).
#include "npo/emu/remote_fabric.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace npo::emu {

namespace {
using nlohmann::json;

Code code_of(std::string_view name) {
  for (int c = 0; c <= static_cast<int>(Code::kDataLoss); ++c) {
    if (code_name(static_cast<Code>(c)) == name) return static_cast<Code>(c);
  }
  return Code::kUnknown;
}

/// A parsed reply, or the error it carries.
Result<json> parsed(const std::string& line) {
  try {
    json j = json::parse(line);
    if (j.is_object() && j.contains("error") && j.at("error").is_object()) {
      const auto& e = j.at("error");
      return fail(code_of(e.value("code", "unknown")), "npo-emud: " + e.value("message", std::string("?")));
    }
    return j;
  } catch (const std::exception& e) {
    return fail(Code::kInternal, fmt::format("fabric socket: unreadable reply: {}", e.what()));
  }
}

/// Runs `f` (which reads fields of a reply), turning a JSON exception (a reply of another
/// shape) into kInternal: no exception leaves the library.
template <typename F>
auto guarded(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::exception& e) {
    return fail(Code::kInternal, fmt::format("fabric socket: unexpected reply: {}", e.what()));
  }
}
}  // namespace

class RemoteFabric::Switch final : public OpticalCircuitSwitch {
 public:
  Switch(RemoteFabric& f, std::string name, unsigned radix) : f_(f), name_(std::move(name)), radix_(radix) {}
  [[nodiscard]] std::string_view name() const noexcept override { return name_; }
  [[nodiscard]] unsigned radix() const noexcept override { return radix_; }
  Result<void> connect(unsigned a, unsigned b) override { return apply({{OcsChange::Kind::kConnect, a, b}}); }
  Result<void> disconnect(unsigned port) override {
    auto xc = cross_connects();
    if (!xc) return std::unexpected(std::move(xc.error()));
    for (const auto& [a, b] : *xc) {
      if (a == port || b == port) return apply({{OcsChange::Kind::kDisconnect, a, b}});
    }
    if (port >= radix_) return fail(Code::kOutOfRange, fmt::format("{}: port {} beyond radix {}", name_, port, radix_));
    return fail(Code::kFailedPrecondition, fmt::format("{}: port {} is idle", name_, port));
  }
  [[nodiscard]] Result<std::vector<CrossConnect>> cross_connects() const override {
    auto r = f_.call(json{{"op", "cross_connects"}, {"switch", name_}}.dump());
    if (!r) return std::unexpected(std::move(r.error()));
    auto j = parsed(*r);
    if (!j) return std::unexpected(std::move(j.error()));
    return guarded([&]() -> Result<std::vector<CrossConnect>> {
      std::vector<CrossConnect> out;
      for (const auto& p : j->at("cross_connects")) out.emplace_back(p.at(0).get<unsigned>(), p.at(1).get<unsigned>());
      return out;
    });
  }
  Result<void> apply(const std::vector<OcsChange>& changes) override {
    json cs = json::array();
    for (const auto& c : changes) {
      cs.push_back({{"kind", c.kind == OcsChange::Kind::kConnect ? "connect" : "disconnect"}, {"a", c.a}, {"b", c.b}});
    }
    auto r = f_.call(json{{"op", "apply"}, {"switch", name_}, {"changes", cs}}.dump());
    if (!r) return std::unexpected(std::move(r.error()));
    auto j = parsed(*r);
    if (!j) return std::unexpected(std::move(j.error()));
    return {};
  }

 private:
  RemoteFabric& f_;
  std::string name_;
  unsigned radix_;
};

RemoteFabric::RemoteFabric(int fd) : fd_(fd) {}
RemoteFabric::~RemoteFabric() { ::close(fd_); }

Result<std::shared_ptr<RemoteFabric>> RemoteFabric::open(const std::filesystem::path& dir) {
  std::error_code ec;
  const auto path = std::filesystem::is_directory(dir, ec) ? dir / "fabric.sock" : dir;
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (path.string().size() >= sizeof sa.sun_path)
    return fail(Code::kInvalidArgument, fmt::format("fabric socket path {} too long", path.string()));
  std::memcpy(sa.sun_path, path.c_str(), path.string().size());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return fail_errno(errno, "fabric socket: socket");
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0) {
    const int err = errno;
    ::close(fd);
    return fail(err == EACCES ? Code::kPermissionDenied : Code::kUnavailable,
                fmt::format("fabric socket {}: connect: {} (is npo-emud serving that directory?)", path.string(),
                            std::strerror(err)));
  }
  std::shared_ptr<RemoteFabric> f(new RemoteFabric(fd));
  auto r = f->call(R"({"op":"switches"})");
  if (!r) return std::unexpected(std::move(r.error()).prefixed(fmt::format("fabric socket {}", path.string())));
  auto j = parsed(*r);
  if (!j) return std::unexpected(std::move(j.error()));
  for (const auto& s : j->at("switches"))
    f->switches_.push_back(
        std::make_unique<Switch>(*f, s.at("name").get<std::string>(), s.at("radix").get<unsigned>()));
  return f;
}

std::vector<OpticalCircuitSwitch*> RemoteFabric::switches() const {
  std::vector<OpticalCircuitSwitch*> out;
  for (const auto& s : switches_) out.push_back(s.get());
  return out;
}

Result<std::string> RemoteFabric::request(std::string_view line) {
  std::lock_guard lock(mu_);
  std::string out(line);
  out += '\n';
  std::string_view rest = out;
  while (!rest.empty()) {
    const ssize_t n = ::send(fd_, rest.data(), rest.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return fail(Code::kUnavailable, fmt::format("fabric socket: send: {}", std::strerror(errno)));
    rest.remove_prefix(static_cast<std::size_t>(n));
  }
  while (buf_.find('\n') == std::string::npos) {
    pollfd p{fd_, POLLIN, 0};
    const int r = ::poll(&p, 1, 30'000);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) return fail(Code::kUnavailable, "fabric socket: no reply in 30 s");
    char chunk[8192];
    const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return fail(Code::kUnavailable, "fabric socket: npo-emud closed the connection");
    buf_.append(chunk, static_cast<std::size_t>(n));
  }
  const auto nl = buf_.find('\n');
  std::string reply = buf_.substr(0, nl);
  buf_.erase(0, nl + 1);
  return reply;
}

Result<std::string> RemoteFabric::call(const std::string& line) { return request(line); }

Result<void> RemoteFabric::set_partition(std::uint32_t card, std::uint32_t id) {
  auto r = call(json{{"op", "set_partition"}, {"card", card}, {"id", id}}.dump());
  if (!r) return std::unexpected(std::move(r.error()));
  auto j = parsed(*r);
  if (!j) return std::unexpected(std::move(j.error()));
  return {};
}

Result<std::uint32_t> RemoteFabric::partition(std::uint32_t card) {
  auto r = call(json{{"op", "partition"}, {"card", card}}.dump());
  if (!r) return std::unexpected(std::move(r.error()));
  auto j = parsed(*r);
  if (!j) return std::unexpected(std::move(j.error()));
  return guarded([&]() -> Result<std::uint32_t> { return j->at("partition").get<std::uint32_t>(); });
}

Result<std::vector<RemoteCard>> RemoteFabric::cards() {
  auto r = call(R"({"op":"cards"})");
  if (!r) return std::unexpected(std::move(r.error()));
  auto j = parsed(*r);
  if (!j) return std::unexpected(std::move(j.error()));
  return guarded([&]() -> Result<std::vector<RemoteCard>> {
    std::vector<RemoteCard> out;
    for (const auto& c : j->at("cards")) {
      out.push_back({c.at("index").get<std::uint32_t>(), c.at("fabric_id").get<std::uint32_t>(),
                     c.at("partition").get<std::uint32_t>(), c.at("removed").get<bool>()});
    }
    return out;
  });
}

}  // namespace npo::emu
