// SPDX-License-Identifier: Apache-2.0
// libnpo-fi.so: service names (names.hpp, docs/libfabric.md "Addresses and service names").
#include "names.hpp"

#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <cstring>

#include "provider.hpp"

namespace npo::fi {

bool is_svc_addr(const void* addr) {
  if (!addr) return false;
  std::uint32_t magic = 0;
  std::memcpy(&magic, addr, sizeof magic);
  return magic == kSvcMagic;
}

std::optional<std::uint32_t> parse_service(const char* service) {
  if (!service) return 0u;
  const std::string_view s(service);
  std::uint32_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc{} || end != s.data() + s.size() || v > 65535) return std::nullopt;
  return v;
}

bool node_is_local(const char* node) {
  if (!node || !*node) return true;
  const std::string_view n(node);
  if (n == "localhost" || n == "::1" || n.starts_with("127.")) return true;
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) == 0 && n == host) return true;
  // an address of one of this host's interfaces (numeric only: no name lookup in getinfo)
  addrinfo hints{};
  hints.ai_flags = AI_NUMERICHOST;
  addrinfo* res = nullptr;
  if (::getaddrinfo(node, nullptr, &hints, &res) != 0) return false;
  bool local = false;
  ifaddrs* ifs = nullptr;
  if (::getifaddrs(&ifs) == 0) {
    for (const ifaddrs* i = ifs; i && !local; i = i->ifa_next) {
      if (!i->ifa_addr) continue;
      for (const addrinfo* r = res; r && !local; r = r->ai_next) {
        if (i->ifa_addr->sa_family != r->ai_family) continue;
        if (r->ai_family == AF_INET)
          local = std::memcmp(&reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr,
                              &reinterpret_cast<const sockaddr_in*>(r->ai_addr)->sin_addr, sizeof(in_addr)) == 0;
        if (r->ai_family == AF_INET6)
          local = std::memcmp(&reinterpret_cast<const sockaddr_in6*>(i->ifa_addr)->sin6_addr,
                              &reinterpret_cast<const sockaddr_in6*>(r->ai_addr)->sin6_addr, sizeof(in6_addr)) == 0;
      }
    }
    ::freeifaddrs(ifs);
  }
  ::freeaddrinfo(res);
  return local;
}

void* make_svc_addr(std::uint32_t service, std::uint32_t card, const char* node) {
  SvcAddr a;
  a.service = service;
  a.card = card;
  if (node) std::snprintf(a.node, sizeof a.node, "%s", node);
  void* p = std::malloc(sizeof a);
  if (p) std::memcpy(p, &a, sizeof a);
  return p;
}

namespace {
// The backend a service belongs to: npo-emud's directory, or the in-process URI.
std::string backend_key(const BackendChoice& b) { return b.remote ? b.dir : b.uri; }

// /dev/shm/npo-fi-svc-<uid>-<FNV-1a of the backend>-<service>: one file per service, as a
// bound port, private to the user (two users' services do not meet).
std::string service_path(const BackendChoice& b, std::uint32_t service) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (const char c : backend_key(b)) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  char buf[128];
  std::snprintf(buf, sizeof buf, "/dev/shm/npo-fi-svc-%u-%016llx-%u", static_cast<unsigned>(::getuid()),
                static_cast<unsigned long long>(h), service);
  return buf;
}

// The file's content: the endpoint's address, then its publisher's pid.
struct Record {
  WireAddr addr;
  std::int64_t pid;
};

std::optional<Record> read_record(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  Record r{};
  const ssize_t got = ::read(fd, &r, sizeof r);
  ::close(fd);
  if (got != static_cast<ssize_t>(sizeof r) || r.addr.magic != kAddrMagic) return std::nullopt;
  return r;
}

bool alive(std::int64_t pid) { return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH); }
}  // namespace

int publish_service(const BackendChoice& b, std::uint32_t service, const WireAddr& w) {
  const std::string path = service_path(b, service);
  if (auto r = read_record(path); r && alive(r->pid) && std::memcmp(&r->addr, &w, sizeof w) != 0) {
    warn(FI_LOG_EP_CTRL, "service " + std::to_string(service) + " is published by pid " + std::to_string(r->pid));
    return -FI_EADDRINUSE;
  }
  // write a private file, then rename it over the name: a reader sees the old record or the
  // new one, never half of one
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return -errno;
  const Record r{w, static_cast<std::int64_t>(::getpid())};
  const bool ok = ::write(fd, &r, sizeof r) == static_cast<ssize_t>(sizeof r);
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno ? errno : EIO;
    ::unlink(tmp.c_str());
    return -err;
  }
  return 0;
}

void unpublish_service(const BackendChoice& b, std::uint32_t service, const WireAddr& w) {
  const std::string path = service_path(b, service);
  if (auto r = read_record(path); r && r->pid == ::getpid() && std::memcmp(&r->addr, &w, sizeof w) == 0)
    ::unlink(path.c_str());
}

Result<WireAddr> resolve_service(const BackendChoice& b, const SvcAddr& svc) {
  const std::string path = service_path(b, svc.service);
  auto r = read_record(path);
  if (!r) return fail(Code::kNotFound, "no endpoint publishes service " + std::to_string(svc.service));
  if (!alive(r->pid))
    return fail(Code::kNotFound, "the endpoint of service " + std::to_string(svc.service) + " (pid " +
                                     std::to_string(r->pid) + ") is gone");
  return r->addr;
}

}  // namespace npo::fi
