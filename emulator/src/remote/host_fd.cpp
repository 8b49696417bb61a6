// SPDX-License-Identifier: Apache-2.0
// Host memory by fd for emu-remote's DMA maps: a registered memfd, or anonymous memory
// re-backed in place by one, so npo-emud maps the very pages (spec §5.7).
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
#include "remote/remote_internal.hpp"

namespace npo::emu::remote {

namespace {

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

}  // namespace

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

}  // namespace npo::emu::remote
