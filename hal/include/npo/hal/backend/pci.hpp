// SPDX-License-Identifier: Apache-2.0
// npo-hal: PCI helpers over backend::Device, shared by the drivers, the VFIO backend and
// the backend conformance suite: typed config-space access and the capability walk
// (PCI Local Bus 3.0 §6.7, PCIe 6.0 §7.6 extended capabilities).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "npo/hal/backend/backend.hpp"

namespace npo::backend {

/// Reads 1, 2 or 4 bytes of config space (little-endian). Errors: as Device::config_read.
Result<std::uint8_t> config_read8(Device& dev, std::uint32_t offset);
Result<std::uint16_t> config_read16(Device& dev, std::uint32_t offset);
Result<std::uint32_t> config_read32(Device& dev, std::uint32_t offset);
Result<void> config_write16(Device& dev, std::uint32_t offset, std::uint16_t value);
Result<void> config_write32(Device& dev, std::uint32_t offset, std::uint32_t value);

/// One capability found by the walk.
struct Capability {
  std::uint16_t id = 0;      ///< capability ID (8-bit for standard, 16-bit for extended)
  std::uint32_t offset = 0;  ///< config-space offset of its header
  bool extended = false;     ///< found in the extended list (offset >= 0x100)
  std::uint8_t version = 0;  ///< extended capabilities only
};

/// Walks the standard list (from 0x34, if Status.CapList is set) and the extended list
/// (from 0x100). Loops and pointers outside config space stop the walk with kDataLoss;
/// at most 48 standard and 480 extended entries are followed (PCIe bounds).
/// Errors: kDataLoss (corrupt list), errors of config_read.
Result<std::vector<Capability>> walk_capabilities(Device& dev);

/// Finds a capability by ID in a walk result.
[[nodiscard]] std::optional<Capability> find_capability(const std::vector<Capability>& caps, std::uint16_t id,
                                                        bool extended);

/// PCIe link of a function, from its PCI Express capability (PCIe 6.0 §7.5.3.6/§7.5.3.8).
struct PcieLinkInfo {
  unsigned max_speed_code = 0;  ///< LnkCap speed: 1=2.5 2=5 3=8 4=16 5=32 6=64 GT/s
  unsigned max_width = 0;
  unsigned speed_code = 0;  ///< LnkSta
  unsigned width = 0;
  bool flr_capable = false;  ///< DevCap bit 28

  /// True when the negotiated link (LnkSta) runs below its capability (LnkCap) in speed or
  /// width, what lspci prints as "(downgraded)" -- e.g. an x16 card trained at x8, or a
  /// 32 GT/s link at 16 GT/s. A field that is 0 on either side (unknown code, link down)
  /// is not compared.
  [[nodiscard]] bool downgraded() const noexcept {
    const bool slower = speed_code != 0 && max_speed_code != 0 && speed_code < max_speed_code;
    const bool narrower = width != 0 && max_width != 0 && width < max_width;
    return slower || narrower;
  }
};
/// Errors: kNotFound (no PCI Express capability), config read errors.
Result<PcieLinkInfo> read_pcie_link(Device& dev, const std::vector<Capability>& caps);

/// Size in bytes of BAR `index` (0..5), found the standard way (PCI Local Bus 3.0 §6.2.5.1):
/// memory and I/O decode are turned off in Command, all-ones is written to the BAR (both
/// halves of a 64-bit BAR), the writable address bits are read back, and the BAR and Command
/// are restored. Returns 0 for an unimplemented BAR. Not for use while a driver has the BAR in
/// use (decode is off for the duration). Errors: kInvalidArgument (index > 5), kDataLoss (a
/// 64-bit BAR in slot 5), config read/write errors (restoring is attempted regardless).
Result<std::uint64_t> bar_size(Device& dev, unsigned index);

/// GT/s of a LnkCap/LnkSta speed code (0 for unknown codes).
[[nodiscard]] double pcie_speed_gts(unsigned code) noexcept;

}  // namespace npo::backend
