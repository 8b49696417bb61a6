// SPDX-License-Identifier: Apache-2.0
// Window memfds of npo-emud's cards (hbm_windows.hpp; docs/spec/emud-protocol.md §5.13).
#include "hbm_windows.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>

#include <fmt/format.h>

namespace npo::emu {

namespace {
// Writes all of [p, p+n) at `off` of `fd`. Returns errno, or 0.
int write_all(int fd, const std::byte* p, std::uint64_t n, std::uint64_t off) {
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(off));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return w < 0 ? errno : EIO;
    p += w;
    n -= static_cast<std::uint64_t>(w);
    off += static_cast<std::uint64_t>(w);
  }
  return 0;
}
}  // namespace

HbmWindows::HbmWindows(std::byte* base, std::uint64_t stride, const std::vector<int>& card_fds, FabricState& fabric,
                       std::uint32_t lock_tag)
    : base_(base), stride_(stride), card_fds_(card_fds), fabric_(fabric), tag_(lock_tag), ranges_(card_fds.size()) {}

HbmWindows::~HbmWindows() {
  for (auto& m : ranges_) {
    for (auto& [off, r] : m) ::close(r.fd);
  }
}

void HbmWindows::lock_queues(std::uint32_t card) noexcept {
  for (auto& q : fabric_.card(card).queues) q.lock.lock(tag_);
}

void HbmWindows::unlock_queues(std::uint32_t card) noexcept {
  for (auto& q : fabric_.card(card).queues) q.lock.unlock();
}

Result<void> HbmWindows::open(std::uint32_t card, std::uint64_t off, std::uint64_t size) {
  if (card >= ranges_.size() || size == 0 || off > stride_ || size > stride_ - off) {
    return fail(Code::kOutOfRange, fmt::format("window [{:#x}, +{:#x}) of card {}", off, size, card));
  }
  std::lock_guard lock(mu_);
  auto& m = ranges_[card];
  auto next = m.lower_bound(off);
  if (next != m.end() && next->first == off && next->second.size == size) {
    ++next->second.refs;
    return {};
  }
  const bool hits_next = next != m.end() && next->first < off + size;
  const bool hits_prev = next != m.begin() && std::prev(next)->first + std::prev(next)->second.size > off;
  if (hits_next || hits_prev) {
    const auto& o = hits_next ? *next : *std::prev(next);
    return fail(Code::kAlreadyExists,
                fmt::format("window [{:#x}, +{:#x}) of card {} overlaps the open window over [{:#x}, +{:#x}) "
                            "without being equal to it (npo-emud isolates windows by range)",
                            off, size, card, o.first, o.second.size));
  }
  const int fd = ::memfd_create("npo-emud window", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return fail_errno(errno, "window memfd_create");
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0 ||
      ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    const int err = errno;
    ::close(fd);
    return fail_errno(err, fmt::format("window memfd of {} bytes", size));
  }
  std::byte* view = base_ + std::uint64_t{card} * stride_ + off;
  lock_queues(card);
  int err = write_all(fd, view, size, 0);
  if (err == 0 &&
      ::mmap(view, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED | MAP_NORESERVE, fd, 0) == MAP_FAILED) {
    err = errno;
  }
  if (err == 0) {
    // The card's own pages of the range hold nothing now: give them back until the window closes.
    (void)::fallocate(card_fds_[card], FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(off),
                      static_cast<off_t>(size));
  }
  unlock_queues(card);
  if (err != 0) {
    ::close(fd);
    return fail_errno(err, fmt::format("window of card {}: move [{:#x}, +{:#x}) into its memfd", card, off, size));
  }
  m.emplace(off, Range{size, fd, 1});
  return {};
}

void HbmWindows::move_back(std::uint32_t card, std::uint64_t off, const Range& r) {
  std::byte* view = base_ + std::uint64_t{card} * stride_ + off;
  lock_queues(card);
  // Nothing to do on failure but keep the window's memfd as the card's memory (still mapped).
  if (write_all(card_fds_[card], view, r.size, off) == 0) {
    (void)::mmap(view, r.size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED | MAP_NORESERVE, card_fds_[card],
                 static_cast<off_t>(off));
  }
  unlock_queues(card);
  ::close(r.fd);  // an importer's mapping keeps its pages; no card reads them any more
}

void HbmWindows::close(std::uint32_t card, std::uint64_t off, std::uint64_t size) {
  std::lock_guard lock(mu_);
  if (card >= ranges_.size()) return;
  auto& m = ranges_[card];
  auto it = m.find(off);
  if (it == m.end() || it->second.size != size) return;
  if (--it->second.refs > 0) return;
  move_back(card, off, it->second);
  m.erase(it);
}

void HbmWindows::close_all(std::uint32_t card) {
  std::lock_guard lock(mu_);
  if (card >= ranges_.size()) return;
  for (auto& [off, r] : ranges_[card]) move_back(card, off, r);
  ranges_[card].clear();
}

int HbmWindows::fd_of(std::uint32_t card, std::uint64_t off, std::uint64_t size) const {
  std::lock_guard lock(mu_);
  if (card >= ranges_.size()) return -1;
  auto it = ranges_[card].find(off);
  return it == ranges_[card].end() || it->second.size != size ? -1 : it->second.fd;
}

}  // namespace npo::emu
