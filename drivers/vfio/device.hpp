// SPDX-License-Identifier: Apache-2.0
// drivers/vfio: one PCI function opened through VFIO, as a backend::Device: config space and
// BARs through the device fd's regions (VFIO_DEVICE_GET_REGION_INFO), ordered MMIO accessors
// over mmap'd BARs (pread/pwrite where a BAR or part of it cannot be mapped), DMA through the
// function's DmaSpace, MSI-X to eventfds (VFIO_DEVICE_SET_IRQS) and FLR (VFIO_DEVICE_RESET).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "npo/hal/backend/backend.hpp"
#include "vfio/iommu.hpp"
#include "vfio/sys.hpp"

namespace npo::vfio {

/// A store barrier for MMIO: host-memory stores issued before it (including non-temporal
/// ones) are globally visible before any later store, so a doorbell written after it cannot
/// overtake the descriptors. x86-64: sfence; AArch64: dmb oshst; otherwise a full fence.
/// (asm rather than std::atomic_thread_fence, which GCC's ThreadSanitizer rejects.)
inline void mmio_store_barrier() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  asm volatile("sfence" ::: "memory");
#elif defined(__aarch64__)
  asm volatile("dmb oshst" ::: "memory");
#else
  __sync_synchronize();
#endif
}

/// One part of a BAR the CPU reaches directly (an mmap of the device fd).
struct MappedArea {
  std::uint64_t offset = 0;  ///< from the BAR start
  std::uint64_t size = 0;
  std::byte* ptr = nullptr;
};

/// Ordered MMIO accessors for one BAR (backend::Mmio's contract). Offsets inside a mapped area
/// are volatile loads/stores of the exact width (a 64-bit access is one instruction); other
/// offsets go through pread/pwrite on the device fd, which vfio-pci performs as ioread/iowrite
/// (a kernel without 8-byte support splits an 8-byte pwrite into two 4-byte ones, low first).
/// Every write issues mmio_store_barrier() first. Misaligned or out-of-BAR accesses read as
/// all-ones and are dropped, logged once per BAR. A failing pread (removed device) reads as
/// all-ones. Thread-safety: any thread; program order is kept per thread.
class BarMmio final : public backend::Mmio {
 public:
  /// `region_offset`: the BAR's offset in the device fd; `areas`: the mmap'd parts (may be empty).
  BarMmio(Sys& sys, int device_fd, unsigned bar, std::uint64_t region_offset, std::uint64_t size,
          std::vector<MappedArea> areas);
  [[nodiscard]] std::uint32_t read32(std::uint64_t offset) noexcept override;
  [[nodiscard]] std::uint64_t read64(std::uint64_t offset) noexcept override;
  void write32(std::uint64_t offset, std::uint32_t value) noexcept override;
  void write64(std::uint64_t offset, std::uint64_t value) noexcept override;
  [[nodiscard]] std::uint64_t size() const noexcept override { return size_; }
  /// Whether `offset` is served by a mapping (true) or by pread/pwrite (false).
  [[nodiscard]] bool is_direct(std::uint64_t offset) const noexcept;

 private:
  bool check(std::uint64_t offset, unsigned bytes) noexcept;
  std::byte* direct(std::uint64_t offset, unsigned bytes) const noexcept;
  Sys& sys_;
  int fd_;
  unsigned bar_;
  std::uint64_t region_offset_;
  std::uint64_t size_;
  std::vector<MappedArea> areas_;
  std::atomic<bool> warned_{false};
  std::atomic<bool> io_warned_{false};
};

/// What the backend tells a device about itself when opening it.
struct DeviceSetup {
  Sys* sys = nullptr;
  backend::FunctionInfo info;
  std::shared_ptr<DmaSpace> space;  ///< the function's IOMMU address space
  Fd device_fd;                     ///< from VFIO_GROUP_GET_DEVICE_FD or the bound cdev
  /// Called (once) by the destructor, after everything is released: the backend's "open" set.
  std::function<void()> on_close;
};

/// A VFIO device. Created by VfioBackend::open; see backend::Device for the contract of each
/// method. Thread-safety: as backend::Device (config, DMA, IRQ and reset calls may come from
/// several threads; each serializes where the kernel state needs it).
class VfioDevice final : public backend::Device {
 public:
  /// Reads VFIO_DEVICE_GET_INFO, the region info of BARs 0..5 and config space
  /// (VFIO_DEVICE_GET_REGION_INFO, with the sparse-mmap capability), and the MSI-X count
  /// (VFIO_DEVICE_GET_IRQ_INFO). Errors: kUnimplemented when the fd is not a vfio-pci device
  /// (VFIO_DEVICE_FLAGS_PCI unset) or has no config region; ioctl errors by errno.
  static Result<std::unique_ptr<VfioDevice>> create(DeviceSetup setup);
  ~VfioDevice() override;

  [[nodiscard]] const backend::FunctionInfo& info() const noexcept override { return info_; }
  /// pread on the config region; reads past the region (a 256-byte conventional config space)
  /// return zeros. Errors: kOutOfRange past 4096, kUnavailable (ENODEV/EIO; `out` is all-ones).
  Result<void> config_read(std::uint32_t offset, std::span<std::byte> out) override;
  /// pwrite on the config region (vfio-pci virtualizes and filters the write).
  /// Errors: kOutOfRange, kPermissionDenied (EPERM/EACCES), kUnavailable (ENODEV/EIO).
  Result<void> config_write(std::uint32_t offset, std::span<const std::byte> data) override;
  /// Size from the region info; prefetchable/64-bit from the BAR register. `mappable` is true
  /// for prefetchable memory BARs the kernel lets us mmap whole (apertures, not registers).
  Result<backend::RegionInfo> region_info(unsigned index) override;
  /// Errors: kInvalidArgument (index > 5), kNotFound (BAR not implemented), kUnavailable (the
  /// region can be neither mapped nor read).
  Result<backend::Mmio*> mmio(unsigned index) override;
  /// mmap of the whole BAR (cached; shared with mmio()). Errors: kUnimplemented when the BAR is
  /// not an aperture (region_info().mappable false), kUnavailable when mmap fails (errno kept).
  Result<std::span<std::byte>> map_aperture(unsigned index) override;
  /// {device fd, region offset, size} of an aperture BAR. Errors: kUnimplemented when not mappable.
  Result<ApertureFd> aperture_fd(unsigned index) override;
  [[nodiscard]] std::vector<backend::IovaRange> iova_ranges() const override { return space_->ranges(); }
  Result<void> dma_map(const void* vaddr, std::uint64_t iova, std::uint64_t length, backend::DmaAccess access) override;
  Result<void> dma_unmap(std::uint64_t iova, std::uint64_t length) override;
  [[nodiscard]] unsigned msix_vectors() const noexcept override { return msix_count_; }
  /// VFIO_DEVICE_SET_IRQS(MSI-X, DATA_EVENTFD | ACTION_TRIGGER). The first connected vector
  /// enables MSI-X with as many vectors as the highest connected one needs; connecting a vector
  /// past the enabled count re-enables MSI-X with the larger count (vfio-pci cannot grow an
  /// enabled MSI-X block before Linux 6.5); disconnecting the last vector disables MSI-X
  /// (DATA_NONE | ACTION_TRIGGER, count 0). Errors: kOutOfRange, kInvalidArgument (fd < -1;
  /// EBADF/EINVAL from the kernel: not an eventfd), kUnavailable (ENODEV), others by errno.
  Result<void> set_msix_eventfds(unsigned first, std::span<const int> fds) override;
  /// VFIO_DEVICE_SET_IRQS(MSI, DATA_EVENTFD | ACTION_TRIGGER, start 0, count 1); -1 disables
  /// MSI (DATA_NONE | ACTION_TRIGGER, count 0). The MSI vector count comes from
  /// VFIO_DEVICE_GET_IRQ_INFO(MSI) on first use (0: no MSI capability). Connecting MSI while
  /// MSI-X vectors are connected, or MSI-X while MSI is, is refused before the kernel sees it.
  /// Errors: kUnimplemented (no MSI), kFailedPrecondition (MSI-X in use), kInvalidArgument
  /// (fd < -1; EBADF/EINVAL from the kernel), kUnavailable (ENODEV), others by errno.
  Result<void> set_msi_eventfd(int fd) override;
  /// VFIO_DEVICE_RESET when VFIO_DEVICE_GET_INFO has VFIO_DEVICE_FLAGS_RESET.
  /// Errors: kUnimplemented (no reset method), kUnavailable (EBUSY/EAGAIN/ENODEV/EIO).
  Result<void> reset() override;

  /// The IOMMU API this device's DMA goes through.
  [[nodiscard]] IommuApi iommu_api() const noexcept { return space_->api(); }

  /// A region as VFIO_DEVICE_GET_REGION_INFO described it at open.
  struct Region {
    std::uint32_t flags = 0;   ///< VFIO_REGION_INFO_FLAG_*
    std::uint64_t size = 0;    ///< bytes; 0 = not implemented
    std::uint64_t offset = 0;  ///< offset in the device fd (pread/pwrite/mmap)
    bool sparse = false;       ///< a VFIO_REGION_INFO_CAP_SPARSE_MMAP capability was present
    /// Parts the kernel allows to mmap (ptr unset): the whole region when MMAP is set without
    /// a sparse capability, the capability's areas with one, nothing without MMAP.
    std::vector<MappedArea> mmap_areas;
    std::uint32_t bar_reg = 0;  ///< BAR register (config space) at open: memory type bits
  };
  /// Region `index`: 0..5 BARs, 7 config space. Null for other indexes.
  [[nodiscard]] const Region* region(unsigned index) const noexcept;

 private:
  explicit VfioDevice(DeviceSetup setup);
  Result<void> load_regions();
  Result<void> map_region(unsigned index);  // under mu_
  [[nodiscard]] bool is_aperture(const Region& r) const noexcept;
  /// VFIO_DEVICE_SET_IRQS on IRQ index `index` (MSI or MSI-X). Under irq_mu_.
  Result<void> set_irqs(unsigned index, std::uint32_t flags, std::uint32_t start, std::span<const int> fds);

  Sys& sys_;
  backend::FunctionInfo info_;
  std::shared_ptr<DmaSpace> space_;  // declared before device_fd_: closed after it
  Fd device_fd_;
  std::function<void()> on_close_;
  std::uint32_t device_flags_ = 0;
  std::array<Region, 6> bars_{};
  Region config_{};
  unsigned msix_count_ = 0;

  std::mutex mu_;  // BAR mappings and Mmio objects
  std::array<std::vector<MappedArea>, 6> mapped_{};
  std::array<bool, 6> mapping_tried_{};
  std::array<std::unique_ptr<BarMmio>, 6> mmio_{};

  std::mutex irq_mu_;
  std::vector<int> msix_fds_;          // the eventfd of each vector, -1 when disconnected
  unsigned msix_enabled_ = 0;          // vectors VFIO enabled (0: MSI-X off)
  std::optional<unsigned> msi_count_;  // VFIO_DEVICE_GET_IRQ_INFO(MSI), read on first use
  bool msi_enabled_ = false;           // MSI connected to an eventfd
};

}  // namespace npo::vfio
