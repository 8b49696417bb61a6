// SPDX-License-Identifier: Apache-2.0
// npo-hal emulator: adds the "emu" scheme to a backend registry.
#pragma once

#include "npo/hal/backend/registry.hpp"

namespace npo::emu {

/// Registers scheme "emu" (forms: emu:mesh8, emu:N, emu:file=PATH, with ?options; see
/// parse_uri in emulator.hpp). Errors: kAlreadyExists if "emu" is taken.
Result<void> register_backend(backend::Registry& registry);

}  // namespace npo::emu
