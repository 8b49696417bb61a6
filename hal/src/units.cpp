// SPDX-License-Identifier: Apache-2.0
// npo-hal: byte-size parsing shared by the tools, the emulator's URIs and topology files.
#include "npo/hal/units.hpp"

#include <charconv>

#include <fmt/format.h>

namespace npo {

Result<std::uint64_t> parse_bytes(std::string_view text) {
  std::string_view s = text;
  if (s.ends_with("iB")) {
    s.remove_suffix(2);
  } else if (s.ends_with("B") && s.size() >= 2 && std::string_view("KMGkmg").find(s[s.size() - 2]) != s.npos) {
    s.remove_suffix(1);
  }
  std::uint64_t mult = 1;
  if (!s.empty()) {
    switch (s.back()) {
      case 'K':
      case 'k': mult = 1ULL << 10; break;
      case 'M':
      case 'm': mult = 1ULL << 20; break;
      case 'G':
      case 'g': mult = 1ULL << 30; break;
      default: break;
    }
    if (mult != 1) s.remove_suffix(1);
  }
  int base = 10;
  if (s.starts_with("0x") || s.starts_with("0X")) {
    s.remove_prefix(2);
    base = 16;
  }
  std::uint64_t v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v, base);
  if (s.empty() || p != s.data() + s.size() || (ec != std::errc() && ec != std::errc::result_out_of_range)) {
    return fail(Code::kInvalidArgument,
                fmt::format("'{}' is not a byte size: expected digits with an optional K, M or G (e.g. 64M)", text));
  }
  if (ec == std::errc::result_out_of_range || v > ~0ULL / mult) {
    return fail(Code::kOutOfRange, fmt::format("'{}' is too large: byte sizes must fit in 64 bits", text));
  }
  return v * mult;
}

}  // namespace npo
