// SPDX-License-Identifier: Apache-2.0
// npo-hal emulator: adds the "emu" and "emu-remote" schemes to a backend registry.
#pragma once

#include "npo/hal/backend/registry.hpp"

namespace npo::emu {

/// Registers scheme "emu" (forms: emu:mesh8, emu:N, emu:file=PATH, with ?options; see
/// parse_uri in emulator.hpp). Errors: kAlreadyExists if "emu" is taken.
Result<void> register_backend(backend::Registry& registry);

/// Registers scheme "emu-remote", a client of the shared emulator daemon npo-emud
/// (docs/spec/emud-protocol.md, DESIGN.md "One supernode, many processes"; emulator/src/remote/):
/// forms emu-remote:DIR, emu-remote:DIR?card=K[,L...], with &mode=ro for a read-only attach that
/// watches cards without taking them from their owner, owner=K[,L...], doorbell=shadow|socket
/// and engine=local|daemon (who runs an owner's DMA engines, spec §5.12). Opening a card owned by
/// another client fails with kUnavailable naming the owner's pid; a daemon that is gone makes
/// every call fail with kUnavailable. Errors of add(): kAlreadyExists.
Result<void> register_remote_backend(backend::Registry& registry);

}  // namespace npo::emu
