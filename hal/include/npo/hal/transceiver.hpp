// SPDX-License-Identifier: Apache-2.0
// npo-hal public API: Transceiver -- CMIS 5.2 module access through the firmware mailbox
// (XCVR_READ / XCVR_WRITE, docs/spec/mailbox.md §3.5). Status: raw page access is
// implemented; decoding arrives with the optics issue (kUnimplemented until then).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "npo/hal/error.hpp"

namespace npo {

class Device;

/// Reads `out.size()` bytes (1..128) of the module in `port`: offsets 0..127 address the
/// lower memory, 128..255 upper page `page` of bank `bank` (CMIS 5.2 §8.1).
/// Errors: kNotFound (no module: mailbox kNoModule), kOutOfRange (offset+length > 256),
/// kUnimplemented (page not advertised: kPageNotSupported), mailbox errors.
/// Thread-safety: serialised on the card's mailbox.
Result<void> read_transceiver(Device& device, unsigned port, std::uint8_t bank, std::uint8_t page, std::uint8_t offset,
                              std::span<std::byte> out);

/// Writes bytes into the module's writable registers. Errors as read_transceiver, plus
/// kPermissionDenied for read-only bytes.
Result<void> write_transceiver(Device& device, unsigned port, std::uint8_t bank, std::uint8_t page, std::uint8_t offset,
                               std::span<const std::byte> data);

}  // namespace npo
