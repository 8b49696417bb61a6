// SPDX-License-Identifier: Apache-2.0
// npo-hal public API: byte sizes as people type them ("64M", "4K", "1GiB"), one grammar for
// every tool option, URI option and topology file field.
#pragma once

#include <cstdint>
#include <string_view>

#include "npo/hal/error.hpp"

namespace npo {

/// Parses a byte count: a non-negative integer in decimal (or hexadecimal after "0x"),
/// optionally followed by a binary multiplier K, M or G (2^10, 2^20, 2^30; either case), which
/// may be followed by "B" or "iB" ("64M", "64MiB", "64MB" are all 64 × 2^20 bytes). No sign,
/// spaces or fractions. Errors: kInvalidArgument naming the text and the grammar; kOutOfRange
/// when the value does not fit in 64 bits. Thread-safety: pure function.
Result<std::uint64_t> parse_bytes(std::string_view text);

}  // namespace npo
