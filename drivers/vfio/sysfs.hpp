// SPDX-License-Identifier: Apache-2.0
// drivers/vfio: PCI discovery through sysfs (/sys/bus/pci/devices/*) and the diagnostics that
// turn "it does not work" into the one command that fixes it. The sysfs and /dev roots are
// configurable so tests run on a fake tree in a temporary directory.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "npo/hal/backend/backend.hpp"
#include "vfio/sys.hpp"

namespace npo::vfio {

/// Which functions a discovery returns.
struct PciFilter {
  std::optional<std::uint16_t> vendor_id;      ///< unset: any vendor
  std::optional<std::uint16_t> device_id;      ///< unset: any device
  std::optional<backend::PciAddress> address;  ///< set: only this function (IDs still apply)
  /// Whether `f` passes every set criterion.
  [[nodiscard]] bool matches(const backend::FunctionInfo& f) const noexcept;
};

/// One function of an IOMMU group and the driver bound to it ("" when none).
struct GroupMember {
  backend::PciAddress address;
  std::string driver;
};

/// Reads PCI functions from a sysfs tree rooted at `sysfs_root` ("/sys" on a live system).
/// Thread-safety: stateless apart from its configuration; concurrent calls are safe when the
/// Sys is (the real one is).
class Sysfs {
 public:
  /// `sys` must outlive the Sysfs. `sysfs_root` without a trailing '/'.
  Sysfs(Sys& sys, std::string sysfs_root);

  /// The sysfs root this instance reads ("/sys").
  [[nodiscard]] const std::string& root() const noexcept { return root_; }
  /// "<root>/bus/pci/devices".
  [[nodiscard]] std::string devices_dir() const;
  /// "<root>/bus/pci/devices/<bdf>".
  [[nodiscard]] std::string function_dir(const backend::PciAddress& a) const;

  /// Every function matching `filter`, sorted by address. Entries that are not PCI addresses
  /// or whose vendor/device cannot be read are skipped.
  /// Errors: kUnavailable (with the errno) when devices_dir() cannot be listed -- the message
  /// says sysfs is not mounted or not readable.
  Result<std::vector<backend::FunctionInfo>> list(const PciFilter& filter) const;

  /// One function: vendor/device/subsystem IDs, class, NUMA node (-1 when sysfs says -1 or
  /// lacks the file), IOMMU group (from the iommu_group link; -1 without one) and bound
  /// driver (from the driver link; "" when unbound). Errors: kNotFound when the function's
  /// directory does not exist; kUnavailable/kPermissionDenied (errno kept) when an attribute
  /// cannot be read; kDataLoss when an attribute is not the number sysfs always writes.
  Result<backend::FunctionInfo> function(const backend::PciAddress& a) const;

  /// The functions of IOMMU group `group` with their drivers, sorted by address
  /// ("<root>/kernel/iommu_groups/<group>/devices"). Errors: kNotFound for an unknown group.
  Result<std::vector<GroupMember>> group_members(int group) const;

  /// The VFIO device name of a function bound to vfio-pci ("vfio3" from
  /// "<function>/vfio-dev/vfio3", listed since Linux 6.1), or nullopt. Its character device
  /// /dev/vfio/devices/vfio3 exists only from Linux 6.6 with CONFIG_VFIO_DEVICE_CDEV.
  [[nodiscard]] std::optional<std::string> vfio_cdev(const backend::PciAddress& a) const;

 private:
  Result<std::string> attr(const backend::PciAddress& a, const char* name) const;
  Sys& sys_;
  std::string root_;
};

// ---- Diagnostics: one Error per failure, each naming the fix -------------------------------
// Every message starts with the function (or path) and ends with the command(s) to run.

/// The function is bound to `driver` (or to nothing) instead of vfio-pci: kFailedPrecondition
/// naming the udev helper and the exact driver_override / unbind / drivers_probe commands.
[[nodiscard]] Error not_bound_error(const backend::PciAddress& a, const std::string& driver,
                                    const std::string& sysfs_root);
/// The function has no IOMMU group: kFailedPrecondition, enable the IOMMU.
[[nodiscard]] Error no_iommu_group_error(const backend::PciAddress& a);
/// VFIO_GROUP_GET_STATUS says the group is not viable: kFailedPrecondition listing the other
/// functions of the group and their drivers, and what to do with them.
[[nodiscard]] Error group_not_viable_error(const backend::PciAddress& a, int group,
                                           const std::vector<GroupMember>& members);
/// `<dev_root>/vfio` is missing: kUnavailable, load vfio-pci and enable the IOMMU.
[[nodiscard]] Error no_dev_vfio_error(const std::string& dev_root, std::string_view uri);
/// Opening `path` failed with EACCES/EPERM: kPermissionDenied naming the npo group and the
/// udev rule (errno kept).
[[nodiscard]] Error permission_error(const std::string& path, int err);
/// An open/ioctl failure with no better diagnosis: the errno's canonical code, errno kept.
[[nodiscard]] Error sys_error(int err, std::string what);

}  // namespace npo::vfio
