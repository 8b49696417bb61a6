// SPDX-License-Identifier: Apache-2.0
#include "npo/hal/backend/host_memory.hpp"

#include <map>
#include <mutex>

namespace npo::backend {

namespace {
struct Record {
  std::size_t length;
  int fd;
  std::uint64_t offset;
};
std::mutex g_mu;
std::map<std::uintptr_t, Record>& records() {
  static std::map<std::uintptr_t, Record> r;
  return r;
}
}  // namespace

void register_host_memory_fd(const void* addr, std::size_t length, int fd, std::uint64_t offset) noexcept {
  std::lock_guard lock(g_mu);
  records()[reinterpret_cast<std::uintptr_t>(addr)] = Record{length, fd, offset};
}

void unregister_host_memory_fd(const void* addr) noexcept {
  std::lock_guard lock(g_mu);
  records().erase(reinterpret_cast<std::uintptr_t>(addr));
}

std::optional<HostMemoryFd> find_host_memory_fd(const void* addr, std::size_t length) noexcept {
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  std::lock_guard lock(g_mu);
  auto& r = records();
  auto it = r.upper_bound(a);
  if (it == r.begin()) return std::nullopt;
  --it;
  const std::uintptr_t start = it->first;
  if (a - start > it->second.length || length > it->second.length - (a - start)) return std::nullopt;
  return HostMemoryFd{it->second.fd, it->second.offset + (a - start)};
}

}  // namespace npo::backend
