// SPDX-License-Identifier: Apache-2.0
// drivers/vfio: adds the "vfio" scheme to a backend registry.
#pragma once

#include "npo/hal/backend/registry.hpp"

namespace npo::vfio {

/// Registers scheme "vfio" (forms vfio:all, vfio:BDF, with ?iommu=type1|iommufd|auto and
/// &ids=VVVV:DDDD; see vfio/backend.hpp). Opening fails with one line naming the fix on a
/// machine without VFIO (kUnavailable: /dev/vfio missing). Errors of add(): kAlreadyExists.
Result<void> register_backend(backend::Registry& registry);

}  // namespace npo::vfio
