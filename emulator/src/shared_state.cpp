// SPDX-License-Identifier: Apache-2.0
// The shared engine state (shared_state.hpp): the region, the queue lock, routing and the
// window in-flight count over it.
#include "shared_state.hpp"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <new>

#include <fmt/format.h>

#include "npo/hal/topology_plan.hpp"

namespace npo::emu {

namespace regs = fw::regs;

void QueueLock::lock(std::uint32_t holder) noexcept {
  for (unsigned tries = 0;; ++tries) {
    if (word_.load(std::memory_order_relaxed) == 0 && try_lock(holder)) return;
    if (tries < 64) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    } else if (tries < 1024) {
      ::sched_yield();
    } else {
      const timespec ts{0, 50'000};
      ::nanosleep(&ts, nullptr);
    }
  }
}

namespace {
std::uint64_t region_bytes(std::uint32_t cards) {
  return FabricState::kHeaderBytes + std::uint64_t{cards} * sizeof(CardState);
}
}  // namespace

FabricState::FabricState(int fd, void* base, std::uint64_t bytes, std::uint32_t cards)
    : fd_(fd),
      base_(base),
      bytes_(bytes),
      cards_(cards),
      cards_base_(reinterpret_cast<CardState*>(static_cast<std::byte*>(base) + kHeaderBytes)) {}

FabricState::~FabricState() {
  if (base_ != nullptr) ::munmap(base_, bytes_);
  if (fd_ >= 0) ::close(fd_);
  for (const int fd : engine_fds_) ::close(fd);
}

namespace {
/// A sealed memfd of `bytes` (it can neither shrink under a mapping nor grow).
Result<int> sized_memfd(const char* name, std::uint64_t bytes) {
  const int fd = ::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return fail_errno(errno, fmt::format("shared engine state: memfd_create of {}", name));
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0 || ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) {
    const int err = errno;
    ::close(fd);
    return fail_errno(err, fmt::format("shared engine state: ftruncate and seal of {}", name));
  }
  return fd;
}
}  // namespace

Result<std::unique_ptr<FabricState>> FabricState::create(std::uint32_t cards, bool shareable) {
  if (cards == 0 || cards > regs::kRouteEntries - 1) {
    return fail(Code::kInvalidArgument,
                fmt::format("shared engine state: {} cards (1..{})", cards, regs::kRouteEntries - 1));
  }
  const std::uint64_t bytes = region_bytes(cards);
  if (!shareable) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return fail_errno(errno, "shared engine state: mmap");
    std::unique_ptr<FabricState> fs(new FabricState(-1, p, bytes, cards));
    fs->construct();
    return fs;
  }
  auto fd = sized_memfd("npo-emu engine state", bytes);
  if (!fd) return std::unexpected(fd.error());
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    ::close(*fd);
    return fail_errno(err, "shared engine state: mmap");
  }
  std::unique_ptr<FabricState> fs(new FabricState(*fd, p, bytes, cards));
  // Every card's engine pages from a memfd of their own, over the region: the only part of
  // the state an owner maps read-write (its own card's, ENGINE_FD).
  fs->engine_fds_.reserve(cards);
  for (std::uint32_t i = 0; i < cards; ++i) {
    auto efd = sized_memfd("npo-emu card engine state", kEngineBytes);
    if (!efd) return std::unexpected(efd.error());
    fs->engine_fds_.push_back(*efd);
    auto* at = reinterpret_cast<std::byte*>(&fs->card(i)) + kEngineOffset;
    if (::mmap(at, kEngineBytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, *efd, 0) == MAP_FAILED) {
      return fail_errno(errno, fmt::format("shared engine state: mmap of card {}'s engine pages", i));
    }
  }
  // From here on, any new mapping of the region is read-only: the one a client maps.
  if (::fcntl(*fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE | F_SEAL_SEAL) != 0) {
    return fail_errno(errno, "shared engine state: F_SEAL_FUTURE_WRITE");
  }
  fs->construct();
  return fs;
}

void FabricState::construct() noexcept {
  new (base_) Header{kMagic, kLayout, cards_, sizeof(CardState), bytes_};
  for (std::uint32_t i = 0; i < cards_; ++i) new (&cards_base_[i]) CardState();
}

Result<std::unique_ptr<FabricState>> FabricState::attach(int fd_in, int engine_fd, std::uint32_t card) {
  struct stat st {};
  if (::fstat(fd_in, &st) != 0) return fail_errno(errno, "shared engine state: fstat");
  if (static_cast<std::uint64_t>(st.st_size) < kHeaderBytes) {
    return fail(Code::kInvalidArgument, fmt::format("shared engine state: {} bytes, less than its header", st.st_size));
  }
  struct stat est {};
  if (::fstat(engine_fd, &est) != 0) return fail_errno(errno, "shared engine state: fstat of the engine pages");
  if (static_cast<std::uint64_t>(est.st_size) != kEngineBytes) {
    return fail(Code::kInvalidArgument, fmt::format("shared engine state: the card's engine pages are {} bytes, not {}",
                                                    est.st_size, kEngineBytes));
  }
  const auto size = static_cast<std::uint64_t>(st.st_size);
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd_in, 0);
  if (p == MAP_FAILED) return fail_errno(errno, "shared engine state: mmap");
  Header h{};
  std::memcpy(&h, p, sizeof h);
  if (h.magic != kMagic || h.layout != kLayout || h.card_bytes != sizeof(CardState) || h.cards == 0 ||
      h.total_bytes != size || region_bytes(h.cards) != size) {
    ::munmap(p, size);
    return fail(Code::kInvalidArgument,
                fmt::format("shared engine state: not a layout-{} region of this build (magic {:#x}, layout {}, card "
                            "size {} against {}, {} cards, {} bytes)",
                            kLayout, h.magic, h.layout, h.card_bytes, sizeof(CardState), h.cards, size));
  }
  if (card >= h.cards) {
    ::munmap(p, size);
    return fail(Code::kOutOfRange, fmt::format("shared engine state: card {} past its {} cards", card, h.cards));
  }
  auto* at = static_cast<std::byte*>(p) + engine_offset(card);
  if (::mmap(at, kEngineBytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, engine_fd, 0) == MAP_FAILED) {
    const int err = errno;
    ::munmap(p, size);
    return fail_errno(err, fmt::format("shared engine state: mmap of card {}'s engine pages", card));
  }
  const int fd = ::fcntl(fd_in, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) {
    const int err = errno;
    ::munmap(p, size);
    return fail_errno(err, "shared engine state: dup");
  }
  return std::unique_ptr<FabricState>(new FabricState(fd, p, size, h.cards));
}

std::uint32_t FabricState::window_inflight(std::uint32_t card, unsigned w) noexcept {
  const std::uint64_t want = ((std::uint64_t{card} + 1) << 32) | w;
  std::uint32_t n = 0;
  for (std::uint32_t c = 0; c < cards_; ++c) {
    for (auto& q : cards_base_[c].queues) n += q.remote_window.load(std::memory_order_seq_cst) == want ? 1 : 0;
  }
  return n;
}

bool FabricState::route_reachable(std::uint32_t src, std::uint32_t dst_fid, unsigned queue) noexcept {
  // Flow hash: the same (source, destination, queue) always takes the same ECMP member, so
  // one queue's ops stay in order on one path; different queues spread over the set.
  const std::uint32_t src_fid = fabric_id_of(src);
  const std::uint32_t flow = (src_fid * 0x9e3779b1u) ^ (dst_fid * 0x85ebca77u) ^ (queue * 0xc2b2ae3du);
  std::uint32_t at = src;
  for (unsigned hop = 0; hop <= regs::kMaxHops; ++hop) {
    if (fabric_id_of(at) == dst_fid) return true;
    if (hop == regs::kMaxHops) break;
    CardState& c = card(at);
    const std::uint32_t entry = dst_fid < regs::kRouteEntries ? c.routes[dst_fid].load(std::memory_order_acquire) : 0;
    // The Up ports this hop may take: the route entry's port set, or (no entry) a direct link.
    const bool routed = regs::route::kValid.get(entry) != 0;
    const auto mask = static_cast<std::uint16_t>(routed ? regs::route::kPortMask.get(entry) : 0);
    std::uint32_t cand_fid[regs::kMaxPorts];
    unsigned n = 0;
    const unsigned ports = std::min<unsigned>(c.num_ports.load(std::memory_order_relaxed), regs::kMaxPorts);
    for (unsigned p = 0; p < ports; ++p) {
      if (mask != 0 && (mask & (1u << p)) == 0) continue;
      const std::uint64_t lw = c.link[p].load(std::memory_order_acquire);
      if ((lw & CardState::kLinkUp) == 0) continue;
      const auto nb = static_cast<std::uint32_t>(lw & 0xffff);
      if (!routed && nb != dst_fid) continue;
      cand_fid[n++] = nb;
    }
    if (n == 0) return false;
    const std::uint32_t next = cand_fid[(routed ? flow >> hop : flow) % n];
    const std::uint32_t ni = card_index_of(next);
    if (ni >= cards_ || card(ni).has(CardState::kRemoved)) return false;
    at = ni;
  }
  return false;
}

}  // namespace npo::emu
