// SPDX-License-Identifier: Apache-2.0
// A PCI function opened through VFIO: regions, MMIO, config space, DMA, MSI-X and reset.
#include "vfio/device.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "npo/hal/log.hpp"
#include "vfio/sysfs.hpp"
#include "vfio/uapi.hpp"

namespace npo::vfio {

namespace {

constexpr std::uint32_t kConfigSpace = 4096;
constexpr std::uint32_t kBarRegister0 = 0x10;  // PCI Local Bus 3.0 §6.2.5.1

auto& logger() { return npo::log::get(npo::log::Subsystem::kVfio); }

/// The code of a failed region access: a removed device is kUnavailable (retry after recovery).
Error region_error(int err, std::string what) {
  if (err == ENODEV || err == EIO) {
    return Error(Code::kUnavailable, fmt::format("{}: {} (device removed or in reset)", what, std::strerror(err)), err);
  }
  if (err == EPERM || err == EACCES) {
    return Error(Code::kPermissionDenied, fmt::format("{}: {} (vfio-pci refused the access)", what, std::strerror(err)),
                 err);
  }
  return sys_error(err, std::move(what));
}

}  // namespace

// ---- BarMmio ----------------------------------------------------------------------------------

BarMmio::BarMmio(Sys& sys, int device_fd, unsigned bar, std::uint64_t region_offset, std::uint64_t size,
                 std::vector<MappedArea> areas)
    : sys_(sys), fd_(device_fd), bar_(bar), region_offset_(region_offset), size_(size), areas_(std::move(areas)) {}

bool BarMmio::check(std::uint64_t offset, unsigned bytes) noexcept {
  if (offset % bytes == 0 && offset < size_ && bytes <= size_ - offset) return true;
  if (!warned_.exchange(true)) {
    logger().warn(
        "BAR{}: {}-bit access at 0x{:x} is misaligned or outside the BAR (size 0x{:x}); reads return "
        "all-ones, writes are dropped",
        bar_, bytes * 8, offset, size_);
  }
  return false;
}

std::byte* BarMmio::direct(std::uint64_t offset, unsigned bytes) const noexcept {
  for (const auto& a : areas_) {
    if (offset >= a.offset && offset - a.offset < a.size && bytes <= a.size - (offset - a.offset)) {
      return a.ptr + (offset - a.offset);
    }
  }
  return nullptr;
}

bool BarMmio::is_direct(std::uint64_t offset) const noexcept { return direct(offset, 1) != nullptr; }

std::uint32_t BarMmio::read32(std::uint64_t offset) noexcept {
  if (!check(offset, 4)) return 0xffffffffu;
  if (std::byte* p = direct(offset, 4)) return *reinterpret_cast<const volatile std::uint32_t*>(p);
  std::uint32_t v = 0;
  auto r = sys_.pread(fd_, &v, sizeof v, region_offset_ + offset);
  if (!r || *r != sizeof v) {
    if (!io_warned_.exchange(true)) logger().warn("BAR{}: pread at 0x{:x} failed: reading all-ones", bar_, offset);
    return 0xffffffffu;
  }
  return v;
}

std::uint64_t BarMmio::read64(std::uint64_t offset) noexcept {
  if (!check(offset, 8)) return ~std::uint64_t{0};
  if (std::byte* p = direct(offset, 8)) return *reinterpret_cast<const volatile std::uint64_t*>(p);
  std::uint64_t v = 0;
  auto r = sys_.pread(fd_, &v, sizeof v, region_offset_ + offset);
  if (!r || *r != sizeof v) {
    if (!io_warned_.exchange(true)) logger().warn("BAR{}: pread at 0x{:x} failed: reading all-ones", bar_, offset);
    return ~std::uint64_t{0};
  }
  return v;
}

void BarMmio::write32(std::uint64_t offset, std::uint32_t value) noexcept {
  if (!check(offset, 4)) return;
  mmio_store_barrier();
  if (std::byte* p = direct(offset, 4)) {
    *reinterpret_cast<volatile std::uint32_t*>(p) = value;
    return;
  }
  auto r = sys_.pwrite(fd_, &value, sizeof value, region_offset_ + offset);
  if ((!r || *r != sizeof value) && !io_warned_.exchange(true)) {
    logger().warn("BAR{}: pwrite at 0x{:x} failed: write dropped", bar_, offset);
  }
}

void BarMmio::write64(std::uint64_t offset, std::uint64_t value) noexcept {
  if (!check(offset, 8)) return;
  mmio_store_barrier();
  if (std::byte* p = direct(offset, 8)) {
    *reinterpret_cast<volatile std::uint64_t*>(p) = value;
    return;
  }
  auto r = sys_.pwrite(fd_, &value, sizeof value, region_offset_ + offset);
  if ((!r || *r != sizeof value) && !io_warned_.exchange(true)) {
    logger().warn("BAR{}: pwrite at 0x{:x} failed: write dropped", bar_, offset);
  }
}

// ---- VfioDevice: setup --------------------------------------------------------------------------

VfioDevice::VfioDevice(DeviceSetup setup)
    : sys_(*setup.sys),
      info_(std::move(setup.info)),
      space_(std::move(setup.space)),
      device_fd_(std::move(setup.device_fd)),
      on_close_(std::move(setup.on_close)) {}

Result<std::unique_ptr<VfioDevice>> VfioDevice::create(DeviceSetup setup) {
  std::unique_ptr<VfioDevice> d(new VfioDevice(std::move(setup)));
  const std::string bdf = d->info_.address.to_string();
  uapi::DeviceInfo di{};
  di.argsz = sizeof di;
  if (auto r = d->sys_.ioctl(d->device_fd_.get(), uapi::kDeviceGetInfo, &di); !r) {
    return std::unexpected(region_error(r.error(), "VFIO_DEVICE_GET_INFO on " + bdf));
  }
  if ((di.flags & VFIO_DEVICE_FLAGS_PCI) == 0 || di.num_regions <= uapi::kPciConfigRegion) {
    return fail(Code::kUnimplemented, fmt::format("{}: VFIO device is not a vfio-pci device (flags 0x{:x}, {} regions)",
                                                  bdf, di.flags, di.num_regions));
  }
  d->device_flags_ = di.flags;
  if (auto r = d->load_regions(); !r) return std::unexpected(r.error());
  if (di.num_irqs > uapi::kPciMsixIrq) {
    uapi::IrqInfo ii{};
    ii.argsz = sizeof ii;
    ii.index = uapi::kPciMsixIrq;
    if (auto r = d->sys_.ioctl(d->device_fd_.get(), uapi::kDeviceGetIrqInfo, &ii); !r) {
      return std::unexpected(region_error(r.error(), "VFIO_DEVICE_GET_IRQ_INFO(MSI-X) on " + bdf));
    }
    d->msix_count_ = (ii.flags & VFIO_IRQ_INFO_EVENTFD) != 0 ? ii.count : 0;
  }
  d->msix_fds_.assign(d->msix_count_, -1);
  logger().debug("{}: VFIO device open ({}), reset {}, {} MSI-X vectors", bdf, iommu_api_name(d->space_->api()),
                 (d->device_flags_ & VFIO_DEVICE_FLAGS_RESET) != 0 ? "yes" : "no", d->msix_count_);
  return d;
}

Result<void> VfioDevice::load_regions() {
  const std::string bdf = info_.address.to_string();
  const auto load = [&](unsigned index, Region& out) -> Result<void> {
    std::vector<std::byte> buf(sizeof(uapi::RegionInfo));
    uapi::RegionInfo ri{};
    for (int attempt = 0;; ++attempt) {
      ri = {};
      ri.argsz = static_cast<std::uint32_t>(buf.size());
      ri.index = index;
      std::memset(buf.data(), 0, buf.size());
      std::memcpy(buf.data(), &ri, sizeof ri);
      if (auto r = sys_.ioctl(device_fd_.get(), uapi::kDeviceGetRegionInfo, buf.data()); !r) {
        return std::unexpected(
            region_error(r.error(), fmt::format("VFIO_DEVICE_GET_REGION_INFO({}) on {}", index, bdf)));
      }
      std::memcpy(&ri, buf.data(), sizeof ri);
      if (ri.argsz <= buf.size()) break;
      if (attempt >= 3 || ri.argsz > (1u << 16)) {
        return fail(Code::kDataLoss,
                    fmt::format("VFIO_DEVICE_GET_REGION_INFO({}) on {}: argsz {} keeps growing", index, bdf, ri.argsz));
      }
      buf.resize(ri.argsz);
    }
    out.flags = ri.flags;
    out.size = ri.size;
    out.offset = ri.offset;
    out.mmap_areas.clear();
    if ((ri.flags & VFIO_REGION_INFO_FLAG_MMAP) == 0 || ri.size == 0) return {};
    // Walk the capability chain for the sparse-mmap areas.
    bool sparse = false;
    if ((ri.flags & VFIO_REGION_INFO_FLAG_CAPS) != 0 && ri.cap_offset != 0) {
      std::uint32_t off = ri.cap_offset;
      for (int n = 0; off != 0; ++n) {
        if (n > 32 || off < sizeof ri || off % 4 != 0 || off > buf.size() ||
            buf.size() - off < sizeof(uapi::InfoCapHeader)) {
          return fail(
              Code::kDataLoss,
              fmt::format("VFIO_DEVICE_GET_REGION_INFO({}) on {}: capability chain corrupt at {}", index, bdf, off));
        }
        uapi::InfoCapHeader hdr{};
        std::memcpy(&hdr, buf.data() + off, sizeof hdr);
        if (hdr.id == VFIO_REGION_INFO_CAP_SPARSE_MMAP) {
          uapi::SparseMmapCap cap{};
          if (buf.size() - off < sizeof cap) return fail(Code::kDataLoss, "sparse-mmap capability truncated");
          std::memcpy(&cap, buf.data() + off, sizeof cap);
          if (cap.nr_areas > (buf.size() - off - sizeof cap) / sizeof(uapi::SparseMmapArea)) {
            return fail(Code::kDataLoss,
                        fmt::format("sparse-mmap capability of region {} claims {} areas", index, cap.nr_areas));
          }
          sparse = true;
          for (std::uint32_t i = 0; i < cap.nr_areas; ++i) {
            uapi::SparseMmapArea a{};
            std::memcpy(&a, buf.data() + off + sizeof cap + i * sizeof a, sizeof a);
            if (a.size == 0) continue;
            if (a.offset > ri.size || a.size > ri.size - a.offset) {
              return fail(Code::kDataLoss, fmt::format("sparse-mmap area 0x{:x}+0x{:x} outside region {} (0x{:x})",
                                                       a.offset, a.size, index, ri.size));
            }
            out.mmap_areas.push_back({a.offset, a.size, nullptr});
          }
        }
        off = hdr.next;
      }
    }
    out.sparse = sparse;
    if (!sparse) out.mmap_areas.push_back({0, ri.size, nullptr});
    std::sort(out.mmap_areas.begin(), out.mmap_areas.end(),
              [](const MappedArea& a, const MappedArea& b) { return a.offset < b.offset; });
    return {};
  };

  if (auto r = load(uapi::kPciConfigRegion, config_); !r) return r;
  if (config_.size == 0 || (config_.flags & VFIO_REGION_INFO_FLAG_READ) == 0) {
    return fail(Code::kUnimplemented, fmt::format("{}: VFIO reports no readable config space region", bdf));
  }
  for (unsigned i = 0; i < bars_.size(); ++i) {
    if (auto r = load(i, bars_[i]); !r) return r;
    if (bars_[i].size == 0) continue;
    std::array<std::byte, 4> reg{};
    if (auto r = config_read(kBarRegister0 + 4 * i, reg); !r) return r;
    std::memcpy(&bars_[i].bar_reg, reg.data(), reg.size());
  }
  return {};
}

VfioDevice::~VfioDevice() {
  {
    std::lock_guard lock(irq_mu_);
    if (msix_enabled_ > 0) {
      if (auto r = set_irqs(uapi::kPciMsixIrq, VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER, 0, {}); !r) {
        logger().warn("{}: disabling MSI-X: {}", info_.address.to_string(), r.error().to_string());
      }
      msix_enabled_ = 0;
    }
    if (msi_enabled_) {
      if (auto r = set_irqs(uapi::kPciMsiIrq, VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER, 0, {}); !r) {
        logger().warn("{}: disabling MSI: {}", info_.address.to_string(), r.error().to_string());
      }
      msi_enabled_ = false;
    }
  }
  space_->unmap_owned_by(this);
  for (auto& m : mmio_) m.reset();
  for (unsigned i = 0; i < mapped_.size(); ++i) {
    for (const auto& a : mapped_[i]) sys_.munmap(a.ptr, a.size);
  }
  device_fd_.reset();
  space_.reset();
  if (on_close_) on_close_();
}

const VfioDevice::Region* VfioDevice::region(unsigned index) const noexcept {
  if (index < bars_.size()) return &bars_[index];
  if (index == uapi::kPciConfigRegion) return &config_;
  return nullptr;
}

// ---- Config space -------------------------------------------------------------------------------

Result<void> VfioDevice::config_read(std::uint32_t offset, std::span<std::byte> out) {
  if (offset > kConfigSpace || out.size() > kConfigSpace - offset) {
    return fail(Code::kOutOfRange, fmt::format("{}: config read of {} bytes at 0x{:x} past 4 KiB",
                                               info_.address.to_string(), out.size(), offset));
  }
  std::size_t done = 0;
  while (done < out.size()) {
    const std::uint64_t o = offset + done;
    if (o >= config_.size) {  // a conventional function's 256-byte space: the rest reads as zeros
      std::fill(out.begin() + static_cast<std::ptrdiff_t>(done), out.end(), std::byte{0});
      break;
    }
    const std::size_t n = std::min<std::uint64_t>(out.size() - done, config_.size - o);
    auto r = sys_.pread(device_fd_.get(), out.data() + done, n, config_.offset + o);
    if (!r) {
      std::fill(out.begin() + static_cast<std::ptrdiff_t>(done), out.end(), std::byte{0xff});
      return std::unexpected(
          region_error(r.error(), fmt::format("{}: config read at 0x{:x}", info_.address.to_string(), o)));
    }
    if (*r == 0) {
      std::fill(out.begin() + static_cast<std::ptrdiff_t>(done), out.end(), std::byte{0});
      break;
    }
    done += *r;
  }
  return {};
}

Result<void> VfioDevice::config_write(std::uint32_t offset, std::span<const std::byte> data) {
  if (offset > kConfigSpace || data.size() > kConfigSpace - offset) {
    return fail(Code::kOutOfRange, fmt::format("{}: config write of {} bytes at 0x{:x} past 4 KiB",
                                               info_.address.to_string(), data.size(), offset));
  }
  std::size_t done = 0;
  while (done < data.size()) {
    const std::uint64_t o = offset + done;
    if (o >= config_.size) break;  // nothing there to write
    const std::size_t n = std::min<std::uint64_t>(data.size() - done, config_.size - o);
    auto r = sys_.pwrite(device_fd_.get(), data.data() + done, n, config_.offset + o);
    if (!r) {
      return std::unexpected(
          region_error(r.error(), fmt::format("{}: config write at 0x{:x}", info_.address.to_string(), o)));
    }
    if (*r == 0) break;
    done += *r;
  }
  return {};
}

// ---- BARs -------------------------------------------------------------------------------------

bool VfioDevice::is_aperture(const Region& r) const noexcept {
  const bool memory = (r.bar_reg & 0x1u) == 0;
  const bool prefetchable = (r.bar_reg & 0x8u) != 0;
  return r.size != 0 && memory && prefetchable && (r.flags & VFIO_REGION_INFO_FLAG_MMAP) != 0 &&
         r.mmap_areas.size() == 1 && r.mmap_areas[0].offset == 0 && r.mmap_areas[0].size == r.size;
}

Result<backend::RegionInfo> VfioDevice::region_info(unsigned index) {
  if (index >= bars_.size()) {
    return fail(Code::kInvalidArgument, fmt::format("BAR index {} > 5", index));
  }
  const Region& r = bars_[index];
  backend::RegionInfo out;
  out.index = index;
  out.size = r.size;
  if (r.size != 0) {
    out.mappable = is_aperture(r);
    out.prefetchable = (r.bar_reg & 0x1u) == 0 && (r.bar_reg & 0x8u) != 0;
    out.is_64bit = (r.bar_reg & 0x1u) == 0 && (r.bar_reg & 0x6u) == 0x4u;
  }
  return out;
}

Result<void> VfioDevice::map_region(unsigned index) {
  if (mapping_tried_[index]) return {};
  mapping_tried_[index] = true;
  const Region& r = bars_[index];
  int last_err = 0;
  for (const auto& a : r.mmap_areas) {
    auto p = sys_.mmap(a.size, PROT_READ | PROT_WRITE, device_fd_.get(), r.offset + a.offset);
    if (!p) {
      last_err = p.error();
      logger().info("{}: mmap of BAR{} area 0x{:x}+0x{:x} failed ({}): using pread/pwrite there",
                    info_.address.to_string(), index, a.offset, a.size, std::strerror(p.error()));
      continue;
    }
    mapped_[index].push_back({a.offset, a.size, static_cast<std::byte*>(*p)});
  }
  if (last_err != 0) return std::unexpected(region_error(last_err, fmt::format("mmap of BAR{}", index)));
  return {};
}

Result<backend::Mmio*> VfioDevice::mmio(unsigned index) {
  if (index >= bars_.size()) return fail(Code::kInvalidArgument, fmt::format("BAR index {} > 5", index));
  const Region& r = bars_[index];
  if (r.size == 0) {
    return fail(Code::kNotFound, fmt::format("{}: BAR{} is not implemented", info_.address.to_string(), index));
  }
  std::lock_guard lock(mu_);
  if (!mmio_[index]) {
    (void)map_region(index);  // a failed mmap falls back to pread/pwrite
    const bool rw = (r.flags & (VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE)) ==
                    (VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE);
    if (mapped_[index].empty() && !rw) {
      return fail(Code::kUnavailable,
                  fmt::format("{}: BAR{} can be neither mapped nor read/written through VFIO (flags 0x{:x})",
                              info_.address.to_string(), index, r.flags));
    }
    mmio_[index] = std::make_unique<BarMmio>(sys_, device_fd_.get(), index, r.offset, r.size, mapped_[index]);
  }
  return mmio_[index].get();
}

Result<std::span<std::byte>> VfioDevice::map_aperture(unsigned index) {
  if (index >= bars_.size()) return fail(Code::kInvalidArgument, fmt::format("BAR index {} > 5", index));
  const Region& r = bars_[index];
  if (!is_aperture(r)) {
    return fail(Code::kUnimplemented,
                fmt::format("{}: BAR{} is not an aperture (apertures are prefetchable memory BARs VFIO can mmap whole)",
                            info_.address.to_string(), index));
  }
  std::lock_guard lock(mu_);
  auto mapped = map_region(index);
  if (mapped_[index].size() != 1) {
    if (!mapped) return std::unexpected(mapped.error());
    return fail(Code::kUnavailable, fmt::format("mmap of BAR{} failed earlier", index));
  }
  return std::span<std::byte>(mapped_[index][0].ptr, r.size);
}

Result<backend::Device::ApertureFd> VfioDevice::aperture_fd(unsigned index) {
  if (index >= bars_.size()) return fail(Code::kInvalidArgument, fmt::format("BAR index {} > 5", index));
  const Region& r = bars_[index];
  if (!is_aperture(r)) {
    return fail(Code::kUnimplemented,
                fmt::format("{}: BAR{} cannot be shared (not an aperture)", info_.address.to_string(), index));
  }
  return ApertureFd{device_fd_.get(), r.offset, r.size};
}

// ---- DMA ----------------------------------------------------------------------------------------

Result<void> VfioDevice::dma_map(const void* vaddr, std::uint64_t iova, std::uint64_t length,
                                 backend::DmaAccess access) {
  auto r = space_->map(vaddr, iova, length, access, this);
  if (!r) return std::unexpected(std::move(r.error()).prefixed(info_.address.to_string()));
  return {};
}

Result<void> VfioDevice::dma_unmap(std::uint64_t iova, std::uint64_t length) {
  auto r = space_->unmap(iova, length);
  if (!r) return std::unexpected(std::move(r.error()).prefixed(info_.address.to_string()));
  return {};
}

// ---- MSI and MSI-X ----------------------------------------------------------------------------

Result<void> VfioDevice::set_irqs(unsigned index, std::uint32_t flags, std::uint32_t start, std::span<const int> fds) {
  const bool with_fds = (flags & VFIO_IRQ_SET_DATA_EVENTFD) != 0;
  const std::size_t bytes = sizeof(uapi::IrqSet) + (with_fds ? fds.size() * sizeof(std::int32_t) : 0);
  std::vector<std::byte> buf(bytes);
  uapi::IrqSet s{};
  s.argsz = static_cast<std::uint32_t>(bytes);
  s.flags = flags;
  s.index = index;
  s.start = start;
  s.count = static_cast<std::uint32_t>(fds.size());
  std::memcpy(buf.data(), &s, sizeof s);
  if (with_fds) {
    for (std::size_t i = 0; i < fds.size(); ++i) {
      const std::int32_t fd = fds[i];
      std::memcpy(buf.data() + sizeof s + i * sizeof fd, &fd, sizeof fd);
    }
  }
  auto r = sys_.ioctl(device_fd_.get(), uapi::kDeviceSetIrqs, buf.data());
  if (r) return {};
  const int err = r.error();
  const std::string what = fmt::format("{}: VFIO_DEVICE_SET_IRQS({}, start {}, count {})", info_.address.to_string(),
                                       index == uapi::kPciMsiIrq ? "MSI" : "MSI-X", start, fds.size());
  switch (err) {
    case EBADF:
    case EINVAL:
      return std::unexpected(Error(Code::kInvalidArgument,
                                   fmt::format("{}: {} (an fd is not an open eventfd?)", what, std::strerror(err)),
                                   err));
    case ENOSPC:
    case ENOMEM:
      return std::unexpected(
          Error(Code::kResourceExhausted,
                fmt::format("{}: {} (the host has no interrupt vectors left)", what, std::strerror(err)), err));
    default: return std::unexpected(region_error(err, what));
  }
}

Result<void> VfioDevice::set_msi_eventfd(int fd) {
  const std::string bdf = info_.address.to_string();
  if (fd < -1) {
    return fail(Code::kInvalidArgument,
                fmt::format("{}: MSI: fd {} is neither an eventfd nor -1 (disconnect)", bdf, fd));
  }
  std::lock_guard lock(irq_mu_);
  if (!msi_count_) {
    uapi::IrqInfo ii{};
    ii.argsz = sizeof ii;
    ii.index = uapi::kPciMsiIrq;
    if (auto r = sys_.ioctl(device_fd_.get(), uapi::kDeviceGetIrqInfo, &ii); !r) {
      return std::unexpected(region_error(r.error(), "VFIO_DEVICE_GET_IRQ_INFO(MSI) on " + bdf));
    }
    msi_count_ = (ii.flags & VFIO_IRQ_INFO_EVENTFD) != 0 ? ii.count : 0;
  }
  if (*msi_count_ == 0) {
    return fail(Code::kUnimplemented, fmt::format("{}: the function has no MSI capability (VFIO reports 0 MSI "
                                                  "vectors); use MSI-X",
                                                  bdf));
  }
  if (fd == -1) {
    if (msi_enabled_) {
      if (auto r = set_irqs(uapi::kPciMsiIrq, VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER, 0, {}); !r)
        return r;
      msi_enabled_ = false;
    }
    return {};
  }
  if (msix_enabled_ > 0) {
    return fail(Code::kFailedPrecondition,
                fmt::format("{}: MSI-X vectors are connected; disconnect them before using MSI (MSI and MSI-X "
                            "exclude each other)",
                            bdf));
  }
  const std::array<int, 1> one{fd};
  if (auto r = set_irqs(uapi::kPciMsiIrq, VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER, 0, one); !r) {
    return r;
  }
  msi_enabled_ = true;
  return {};
}

Result<void> VfioDevice::set_msix_eventfds(unsigned first, std::span<const int> fds) {
  if (first > msix_count_ || fds.size() > msix_count_ - first) {
    return fail(Code::kOutOfRange, fmt::format("{}: MSI-X vectors {}..{} past the function's {} vectors",
                                               info_.address.to_string(), first, first + fds.size(), msix_count_));
  }
  for (int fd : fds) {
    if (fd < -1) {
      return fail(Code::kInvalidArgument, fmt::format("MSI-X: fd {} is neither an eventfd nor -1 (disconnect)", fd));
    }
  }
  std::lock_guard lock(irq_mu_);
  if (msi_enabled_ && std::any_of(fds.begin(), fds.end(), [](int fd) { return fd >= 0; })) {
    return fail(Code::kFailedPrecondition,
                fmt::format("{}: MSI is connected; disconnect it (set_msi_eventfd(-1)) before using MSI-X "
                            "(MSI and MSI-X exclude each other)",
                            info_.address.to_string()));
  }
  std::vector<int> next = msix_fds_;
  std::copy(fds.begin(), fds.end(), next.begin() + first);
  int highest = -1;
  for (int v = static_cast<int>(next.size()) - 1; v >= 0; --v) {
    if (next[static_cast<std::size_t>(v)] >= 0) {
      highest = v;
      break;
    }
  }
  constexpr std::uint32_t kEventfds = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;
  constexpr std::uint32_t kDisable = VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER;
  if (highest < 0) {  // nothing connected: MSI-X off
    if (msix_enabled_ > 0) {
      if (auto r = set_irqs(uapi::kPciMsixIrq, kDisable, 0, {}); !r) return r;
      msix_enabled_ = 0;
    }
    msix_fds_ = std::move(next);
    return {};
  }
  const auto needed = static_cast<unsigned>(highest) + 1;
  if (msix_enabled_ == 0) {
    if (auto r = set_irqs(uapi::kPciMsixIrq, kEventfds, 0, std::span<const int>(next.data(), needed)); !r) return r;
    msix_enabled_ = needed;
  } else if (needed <= msix_enabled_) {
    const unsigned end = std::min<unsigned>(first + static_cast<unsigned>(fds.size()), msix_enabled_);
    if (first < end) {
      if (auto r =
              set_irqs(uapi::kPciMsixIrq, kEventfds, first, std::span<const int>(next.data() + first, end - first));
          !r)
        return r;
    }
  } else {
    // Grow: vfio-pci (before Linux 6.5) cannot add vectors to an enabled block.
    if (auto r = set_irqs(uapi::kPciMsixIrq, kDisable, 0, {}); !r) return r;
    msix_enabled_ = 0;
    if (auto r = set_irqs(uapi::kPciMsixIrq, kEventfds, 0, std::span<const int>(next.data(), needed)); !r) {
      // Put the previous routing back so a failed grow does not silence the other vectors.
      int old_highest = -1;
      for (int v = static_cast<int>(msix_fds_.size()) - 1; v >= 0 && old_highest < 0; --v) {
        if (msix_fds_[static_cast<std::size_t>(v)] >= 0) old_highest = v;
      }
      if (old_highest >= 0) {
        const auto old_needed = static_cast<unsigned>(old_highest) + 1;
        if (set_irqs(uapi::kPciMsixIrq, kEventfds, 0, std::span<const int>(msix_fds_.data(), old_needed)))
          msix_enabled_ = old_needed;
      }
      return r;
    }
    msix_enabled_ = needed;
  }
  msix_fds_ = std::move(next);
  return {};
}

// ---- Reset --------------------------------------------------------------------------------------

Result<void> VfioDevice::reset() {
  const std::string bdf = info_.address.to_string();
  if ((device_flags_ & VFIO_DEVICE_FLAGS_RESET) == 0) {
    return fail(Code::kUnimplemented,
                fmt::format("{}: VFIO reports no reset method for this function (no FLR, PM reset or slot/bus reset "
                            "it may use alone)",
                            bdf));
  }
  auto r = sys_.ioctl(device_fd_.get(), uapi::kDeviceReset, nullptr);
  if (r) return {};
  const int err = r.error();
  if (err == EBUSY || err == EAGAIN) {
    return std::unexpected(
        Error(Code::kUnavailable,
              fmt::format("{}: VFIO_DEVICE_RESET: {} (the device lock is held: retry)", bdf, std::strerror(err)), err));
  }
  if (err == ENOTTY) {
    return std::unexpected(Error(Code::kUnimplemented, fmt::format("{}: VFIO_DEVICE_RESET not supported", bdf), err));
  }
  return std::unexpected(region_error(err, bdf + ": VFIO_DEVICE_RESET"));
}

}  // namespace npo::vfio
