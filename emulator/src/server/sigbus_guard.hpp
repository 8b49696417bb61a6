// SPDX-License-Identifier: Apache-2.0
// npo-emud: mappings of client memory that the client can still shrink (a memfd created
// without MFD_ALLOW_SEALING, e.g. DPDK's --no-huge memory), guarded against SIGBUS
// (docs/spec/emud-protocol.md §5.2 "Unsealed memory").
//
// A MAP_SHARED page past the end of its file raises SIGBUS when touched. If a client
// truncates a guarded memfd while the card (any daemon thread) is accessing it, the handler
// replaces the daemon's whole mapping of it by private zero pages and lets the access retry:
// the daemon carries on, the card reads zeros and its writes go nowhere from then on, and
// the mapping is marked hit (logged when it is unmapped). A SIGBUS at any other address goes
// to the handler that was installed before (by default: the process dies, as without us).
#pragma once

#include <cstddef>

namespace npo::emu::server {

/// Installs the SIGBUS handler (once per process; later calls are no-ops). Returns false if
/// sigaction failed. Thread-safety: any thread.
bool install_sigbus_guard() noexcept;

/// Guards [addr, addr+len), a MAP_SHARED mapping of a client's memfd. Returns a slot number
/// for unguard_mapping, or -1 when all slots are taken (the caller refuses the mapping).
/// Thread-safety: any thread.
[[nodiscard]] int guard_mapping(void* addr, std::size_t len) noexcept;

/// Stops guarding slot `slot` (before the mapping is unmapped; no device access may be in
/// flight). Returns true if a SIGBUS replaced the mapping by zero pages while it was guarded.
/// Thread-safety: any thread.
bool unguard_mapping(int slot) noexcept;

/// Number of guard slots (guarded mappings at one time, all clients together).
inline constexpr int kGuardSlots = 4096;

}  // namespace npo::emu::server
