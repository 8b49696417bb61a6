// SPDX-License-Identifier: Apache-2.0
// npo-emud regions and DMA: REGION_INFO/READ/WRITE, DMA_MAP (fd or process memory), DMA_UNMAP
// and SET_IRQS, executed on the card's backend::Device.
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

namespace emud = fw::emud;
namespace pci = fw::pci;
using server::ParsedCommand;

void Session::region_info(const ParsedCommand& c) {
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

void Session::reply_read(const ParsedCommand& c, std::span<const std::byte> data) {
  std::vector<std::byte> body(emud::access::kBytes + data.size());
  emud::store<std::uint64_t>(body, emud::access::kOffset, c.offset);
  emud::store<std::uint32_t>(body, emud::access::kRegion, c.region);
  emud::store<std::uint32_t>(body, emud::access::kCount, static_cast<std::uint32_t>(data.size()));
  std::memcpy(body.data() + emud::access::kBytes, data.data(), data.size());
  reply_ok(c, body);
}

void Session::region_read(const ParsedCommand& c) {
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

void Session::region_write(const ParsedCommand& c) {
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

void Session::dma_map_process(const ParsedCommand& c) {
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
      return reply_error(c, Error(errno_code(err), fmt::format("DMA_MAP PROCESS_MEMORY: pidfd_open of pid {}: {}", pid_,
                                                               std::strerror(err))));
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

void Session::dma_map(const ParsedCommand& c, std::vector<int>& fds) {
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
    return reply_error(c,
                       Error(Code::kOutOfRange, fmt::format("DMA_MAP: [{:#x}, +{:#x}) is outside the memfd of {} bytes",
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

void Session::drop_mapping(std::uint64_t iova, const Mapping& m) {
  if (m.guard_slot >= 0 && server::unguard_mapping(m.guard_slot)) {
    srv_.log(
        fmt::format("card={} pid={}: unsealed memory at IOVA {:#x} (+{:#x}) shrank under its DMA mapping; "
                    "the card saw zero pages there since (SIGBUS guard)",
                    card_, pid_, iova, m.size));
  }
  if (m.addr != nullptr) ::munmap(m.addr, m.size);  // process memory: nothing mapped here
}

void Session::dma_unmap(const ParsedCommand& c) {
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

void Session::set_irqs(const ParsedCommand& c, std::vector<int>& fds) {
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

}  // namespace npo::emu
