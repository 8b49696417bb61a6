// SPDX-License-Identifier: Apache-2.0
// The VFIO backend's entry point. The backend itself arrives with the VFIO issue; until
// then opening "vfio:..." says plainly why it cannot work here.
#include "vfio/register.hpp"

#include <sys/stat.h>

#include <fmt/format.h>

namespace npo::vfio {

Result<void> register_backend(backend::Registry& registry) {
  return registry.add(
      "vfio", {"vfio:all", "vfio:BDF (e.g. vfio:0000:3b:00.0)"},
      [](std::string_view rest, std::string_view uri) -> Result<std::unique_ptr<backend::Backend>> {
        if (rest != "all") {
          if (auto a = backend::PciAddress::parse(rest); !a) return std::unexpected(a.error());
        }
        struct stat st {};
        if (::stat("/dev/vfio", &st) != 0) {
          return fail(Code::kUnavailable, fmt::format("{}: /dev/vfio does not exist: load vfio-pci (modprobe vfio-pci) "
                                                      "and enable the IOMMU (intel_iommu=on / amd_iommu=on)",
                                                      uri));
        }
        return fail(Code::kUnimplemented, fmt::format("{}: the VFIO backend is not built yet (VFIO issue)", uri));
      });
}

}  // namespace npo::vfio
