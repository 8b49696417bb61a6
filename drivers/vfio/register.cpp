// SPDX-License-Identifier: Apache-2.0
// The VFIO backend's entry point: the "vfio" scheme of the backend registry.
#include "vfio/register.hpp"

#include "vfio/backend.hpp"

namespace npo::vfio {

Result<void> register_backend(backend::Registry& registry) {
  return registry.add(
      "vfio", {"vfio:all", "vfio:BDF (e.g. vfio:0000:3b:00.0)", "vfio:...?iommu=type1|iommufd|auto&ids=VVVV:DDDD"},
      [](std::string_view rest, std::string_view uri) -> Result<std::unique_ptr<backend::Backend>> {
        Options opts;
        if (auto r = parse_uri(rest, uri, opts); !r) return std::unexpected(r.error());
        return open_backend(std::move(opts));
      });
}

}  // namespace npo::vfio
