// SPDX-License-Identifier: Apache-2.0
// The emulator's card as the device behind the fake kernel's VFIO device fd, so the whole
// VFIO backend (regions, pread/pwrite BARs, mmap'd aperture, DMA, MSI-X, reset) runs the
// backend conformance suite with no hardware. The card is reached only through the emulator's
// own backend::Device (the same interface the suite checks), as vfio-pci reaches a real card
// only through PCI.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "fake_kernel.hpp"
#include "npo/hal/backend/backend.hpp"
#include "vfio/iommu.hpp"

namespace npo::vfio::test {

/// vfio-pci's view of an emulated card: config space (region 7) and BARs 0/4 through
/// config_read/write and Mmio (read/write, not mmappable), BAR2 mmappable at its full BAR size
/// (the card's HBM memfd mapped over its first bytes; the rest is scratch memory, as the part
/// of a real BAR beyond the HBM that backs it).
class EmulatorDevice final : public DeviceModel {
 public:
  /// Opens the first card of the emulator URI `emu_uri` (e.g. "emu:1?clock=virtual") through
  /// the builtin registry. Null (with a GoogleTest failure added) on error.
  static std::unique_ptr<EmulatorDevice> open(const std::string& emu_uri);
  ~EmulatorDevice() override;

  [[nodiscard]] const backend::FunctionInfo& info() const { return dev_->info(); }
  [[nodiscard]] std::vector<backend::IovaRange> iova_ranges() const { return dev_->iova_ranges(); }

  RegionSpec region(unsigned index) override;
  int read(unsigned index, std::uint64_t offset, void* buf, std::size_t n) override;
  int write(unsigned index, std::uint64_t offset, const void* buf, std::size_t n) override;
  std::byte* map(unsigned index, std::uint64_t offset, std::size_t len) override;
  unsigned msix_count() override { return dev_->msix_vectors(); }
  int set_msix(unsigned vector, int fd) override;
  bool can_reset() override { return true; }
  int reset() override;
  int dma_map(std::uint64_t vaddr, std::uint64_t iova, std::uint64_t length, bool read, bool write) override;
  int dma_unmap(std::uint64_t iova, std::uint64_t length) override;

 private:
  EmulatorDevice() = default;
  std::unique_ptr<backend::Backend> be_;
  std::unique_ptr<backend::Device> dev_;
  backend::Mmio* bar0_ = nullptr;
  backend::Mmio* bar4_ = nullptr;
  std::byte* bar2_ = nullptr;
  std::uint64_t bar2_size_ = 0;
};

/// Builds a VFIO backend (api `api`) over a fake kernel whose only device is the first card
/// of `emu_uri`, with a fake sysfs naming it bound to vfio-pci in IOMMU group 7 with cdev
/// vfio0. The returned backend owns the emulator, the fake kernel and the temporary tree.
/// Null (with a GoogleTest failure added) on error.
std::unique_ptr<backend::Backend> vfio_over_emulator(const std::string& emu_uri, IommuApi api);

}  // namespace npo::vfio::test
