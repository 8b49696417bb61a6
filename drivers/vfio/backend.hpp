// SPDX-License-Identifier: Apache-2.0
// drivers/vfio: the VFIO backend (backend::Backend over Linux VFIO). URIs:
//   vfio:all                 every function with the card's vendor/device IDs
//   vfio:0000:3b:00.0        one function (any IDs)
//   ...?iommu=type1|iommufd|auto   the IOMMU API (default auto)
// docs/vfio.md describes the setup, the error catalogue and the tests.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "npo/hal/backend/backend.hpp"
#include "vfio/iommu.hpp"
#include "vfio/sys.hpp"
#include "vfio/sysfs.hpp"

namespace npo::vfio {

/// How to open a VFIO backend.
struct Options {
  std::string uri = "vfio:all";  ///< reported by Backend::uri()
  /// The system calls; null = real_sys(). Must outlive the backend and its devices.
  Sys* sys = nullptr;
  Paths paths;  ///< sysfs and /dev roots ("/sys", "/dev")
  /// Which functions enumerate() lists and open() accepts. vfio:all sets the card's IDs
  /// (npo::fw::pci::kVendorId/kDeviceId); vfio:BDF sets only the address.
  PciFilter filter;
  IommuApi api = IommuApi::kAuto;
};

/// Parses the part of a "vfio:" URI after the scheme into `out` (filter and api; uri is set
/// to `uri`). Errors: kInvalidArgument naming the accepted forms.
Result<void> parse_uri(std::string_view rest, std::string_view uri, Options& out);

/// Opens a VFIO backend. Checks that <dev_root>/vfio exists and, for one address, that sysfs
/// knows the function; devices are opened later, by Backend::open.
/// Errors: kUnavailable (no <dev_root>/vfio: the message names modprobe vfio-pci and
/// intel_iommu=on/amd_iommu=on; sysfs unreadable), kNotFound (the address is not a PCI
/// function), kPermissionDenied (<dev_root>/vfio not searchable).
/// Thread-safety of the result: enumerate() and open() may run concurrently; devices are
/// independent objects (see VfioDevice).
Result<std::unique_ptr<backend::Backend>> open_backend(Options options);

}  // namespace npo::vfio
