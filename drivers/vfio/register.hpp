// SPDX-License-Identifier: Apache-2.0
// drivers/vfio: adds the "vfio" scheme to a backend registry.
#pragma once

#include "npo/hal/backend/registry.hpp"

namespace npo::vfio {

/// Registers scheme "vfio" (forms vfio:all, vfio:BDF). Errors: kAlreadyExists.
Result<void> register_backend(backend::Registry& registry);

}  // namespace npo::vfio
