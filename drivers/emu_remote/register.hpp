// SPDX-License-Identifier: Apache-2.0
// drivers/emu_remote: adds the "emu-remote" scheme to a backend registry -- a client of the
// shared emulator daemon npo-emud (docs/spec/emud-protocol.md, DESIGN.md "One supernode, many
// processes").
#pragma once

#include "npo/hal/backend/registry.hpp"

namespace npo::emu_remote {

/// Registers scheme "emu-remote" (forms emu-remote:DIR, emu-remote:DIR?card=K[,L...], with
/// &mode=ro for a read-only attach that watches cards without taking them from their owner).
/// Opening a card owned by another client fails with kUnavailable naming the owner's pid; a
/// daemon that is gone makes every call fail with kUnavailable. Errors of add(): kAlreadyExists.
Result<void> register_backend(backend::Registry& registry);

}  // namespace npo::emu_remote
