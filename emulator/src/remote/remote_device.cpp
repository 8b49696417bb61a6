// SPDX-License-Identifier: Apache-2.0
// RemoteDevice: one opened emu-remote card (the HAL's backend::Device): config space, regions
// and the HBM aperture, DMA map/unmap (host memory by fd), MSI/MSI-X eventfds and reset.
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

namespace pci = fw::pci;

class RemoteDevice final : public backend::Device, public HbmViews {
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
    for (const int fd : range_fds_) ::close(fd);
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
      mmio_[index] = make_remote_mmio(*c_, index, r->info.size, ci_.fi.read_only, ci_.card, engine_.get(), this);
    return mmio_[index].get();
  }
  Result<std::span<std::byte>> map_aperture(unsigned index) override {
    auto a = aperture_fd(index);
    if (!a) return std::unexpected(a.error());
    std::lock_guard views(views_mu_);
    std::unique_lock lock(mu_);
    if (aperture_.data() == nullptr) {
      void* p = ::mmap(nullptr, a->size, PROT_READ | PROT_WRITE, MAP_SHARED, a->fd, static_cast<off_t>(a->offset));
      if (p == MAP_FAILED) return fail_errno(errno, "emu-remote: mmap of the HBM aperture", {.card = ci_.card});
      aperture_ = {static_cast<std::byte*>(p), a->size};
      lock.unlock();
      // The ranges of open windows are in their own memfds (spec §5.13).
      for (const auto& [off, size] : committed_) {
        if (size != 0) remap(off, size, false);
      }
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
    std::lock_guard views(views_mu_);
    if (engine_) engine_->lock_views();
    auto r = c_->call(emud::Command::kDeviceReset, {});
    // The reset closed every window: their ranges are the card's memfd's again.
    for (auto& [off, size] : committed_) {
      if (size != 0) remap(off, size);
      off = size = 0;
    }
    if (engine_) engine_->unlock_views();
    if (!r) return std::unexpected(r.error().with({.card = ci_.card}));
    return {};
  }

  // HbmViews (spec §5.13).
  void window_ctrl(unsigned w, const std::function<void()>& write) noexcept override {
    namespace wr = fw::regs::window;
    std::lock_guard views(views_mu_);
    if (engine_) engine_->lock_views();
    write();
    const auto old = committed_[w];
    std::pair<std::uint64_t, std::uint64_t> now{};
    if (auto* bar0 = mmio_[pci::kBarRegs].get(); bar0 != nullptr) {
      const std::uint64_t base = fw::regs::kWindowBase + std::uint64_t{w} * fw::regs::kWindowStride;
      if (wr::kStatusActive.get(bar0->read32(base + wr::kStatus)) != 0) {
        now = {bar0->read64(base + wr::kHbmOffset), bar0->read64(base + wr::kSize)};
      }
    }
    if (old.second != 0 && old != now) remap(old.first, old.second);
    if (now.second != 0 && now != old) remap(now.first, now.second);
    committed_[w] = now;
    if (engine_) engine_->unlock_views();
  }

  Result<ApertureFd> aperture_range_fd(unsigned index, std::uint64_t offset, std::uint64_t size) override {
    if (index != pci::kBarHbm) return fail(Code::kUnimplemented, fmt::format("BAR{} cannot be shared", index));
    auto r = hbm_range_fd(*c_, offset, size);
    if (!r) return std::unexpected(r.error().with({.card = ci_.card}));
    std::lock_guard lock(mu_);
    range_fds_.push_back(r->fd);  // owned here, as aperture_fd's (SCM_RIGHTS duplicates it)
    return ApertureFd{r->fd, r->fd_offset, size};
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

  /// Maps this process's views of [off, off+size) of the card's HBM (the aperture, the local
  /// engines' view unless `engines` is false) from the memfd npo-emud keeps the range in now
  /// (HBM_RANGE_FD). Under views_mu_ (and the engines' lock_views when `engines`).
  void remap(std::uint64_t off, std::uint64_t size, bool engines = true) noexcept {
    auto r = hbm_range_fd(*c_, off, size);
    if (!r) {
      npo::log::get(npo::log::Subsystem::kBackend)
          .error("emu-remote: card {}: HBM [{:#x}, +{:#x}) cannot follow its window: {}", ci_.card, off, size,
                 r.error().message());
      return;
    }
    if (aperture_.data() != nullptr && off <= aperture_.size() && size <= aperture_.size() - off &&
        ::mmap(aperture_.data() + off, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, r->fd,
               static_cast<off_t>(r->fd_offset)) == MAP_FAILED) {
      npo::log::get(npo::log::Subsystem::kBackend)
          .error("emu-remote: card {}: remap of the aperture at {:#x}: {}", ci_.card, off, std::strerror(errno));
    }
    if (engine_ && engines) {
      if (auto m = engine_->remap_own(off, size, r->fd, r->fd_offset); !m) {
        npo::log::get(npo::log::Subsystem::kBackend).error("emu-remote: card {}: {}", ci_.card, m.error().message());
      }
    }
    ::close(r->fd);
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
  std::array<std::unique_ptr<backend::Mmio>, 6> mmio_;
  int aperture_fd_ = -1;
  std::span<std::byte> aperture_;
  /// Window commits and resets, one at a time (they move ranges of the views).
  std::mutex views_mu_;
  /// Each window's range as committed through window_ctrl ({0, 0}: closed), under views_mu_.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> committed_ =
      std::vector<std::pair<std::uint64_t, std::uint64_t>>(fw::regs::kWindowEntries);
  std::vector<int> range_fds_;                         ///< aperture_range_fd's, closed with the device
  std::map<std::uint64_t, std::uintptr_t> reback_of_;  ///< IOVA -> re-backed region it maps
  std::map<std::uint64_t, std::uint64_t> mapped_;      ///< IOVA -> length of each DMA mapping (overlap check)
  std::shared_ptr<OpenSet> open_;
};

}  // namespace

std::unique_ptr<backend::Device> make_remote_device(std::unique_ptr<Conn> c, CardInfo ci, std::shared_ptr<OpenSet> open,
                                                    bool local_engines) {
  return std::make_unique<RemoteDevice>(std::move(c), std::move(ci), std::move(open), local_engines);
}

}  // namespace npo::emu::remote
