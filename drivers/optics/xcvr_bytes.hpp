// SPDX-License-Identifier: Apache-2.0
// drivers/optics (private): byte access and unit conversions shared by the CMIS, SFF-8636 and
// SFF-8472 decoders (decode_*.cpp) and the dump formats (dump_format.cpp). Not installed.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "npo/hal/xcvr_decode.hpp"

namespace npo::xcvr::detail {

inline constexpr std::size_t kPageSize = 128;

/// Bounds-checked big-endian reader over a linear memory image. Reads past the end give 0;
/// the decoders check the layout length first, so this only guards against their own bugs.
class Bytes {
 public:
  explicit Bytes(std::span<const std::byte> b) noexcept : b_(b) {}

  [[nodiscard]] std::size_t size() const noexcept { return b_.size(); }
  [[nodiscard]] std::uint8_t u8(std::size_t off) const noexcept {
    return off < b_.size() ? std::to_integer<std::uint8_t>(b_[off]) : std::uint8_t{0};
  }
  [[nodiscard]] std::uint16_t u16(std::size_t off) const noexcept {
    return static_cast<std::uint16_t>((u8(off) << 8) | u8(off + 1));
  }
  [[nodiscard]] std::int16_t s16(std::size_t off) const noexcept { return static_cast<std::int16_t>(u16(off)); }
  [[nodiscard]] float f32(std::size_t off) const noexcept {
    const std::uint32_t v = (std::uint32_t{u8(off)} << 24) | (std::uint32_t{u8(off + 1)} << 16) |
                            (std::uint32_t{u8(off + 2)} << 8) | std::uint32_t{u8(off + 3)};
    return std::bit_cast<float>(v);
  }
  /// A fixed-width ASCII field: printable characters kept, others shown as '?', trailing
  /// blanks and NULs removed.
  [[nodiscard]] std::string ascii(std::size_t off, std::size_t len) const {
    std::string s;
    s.reserve(len);
    for (std::size_t i = 0; i < len; ++i) {
      const std::uint8_t c = u8(off + i);
      s.push_back(c >= 0x20 && c <= 0x7e ? static_cast<char>(c) : (c == 0 ? '\0' : '?'));
    }
    while (!s.empty() && (s.back() == ' ' || s.back() == '\0')) s.pop_back();
    for (char& c : s) {
      if (c == '\0') c = '?';
    }
    return s;
  }
  /// Three bytes as "xx:xx:xx".
  [[nodiscard]] std::string oui(std::size_t off) const;
  /// 8-bit sum of bytes [from, to] (inclusive), the SFF check code.
  [[nodiscard]] std::uint8_t sum(std::size_t from, std::size_t to) const noexcept {
    unsigned s = 0;
    for (std::size_t i = from; i <= to; ++i) s += u8(i);
    return static_cast<std::uint8_t>(s & 0xffu);
  }

 private:
  std::span<const std::byte> b_;
};

// Units of the SFF/CMIS monitors (CMIS 5.2 §8.2 and §8.9.4, SFF-8636, SFF-8472).
[[nodiscard]] inline double temperature_c(std::int16_t raw) noexcept { return raw / 256.0; }  // 1/256 °C
[[nodiscard]] inline double voltage_v(std::uint16_t raw) noexcept { return raw * 1e-4; }      // 100 µV
[[nodiscard]] inline double bias_ma(std::uint16_t raw) noexcept { return raw * 0.002; }       // 2 µA
[[nodiscard]] inline double power_mw(std::uint16_t raw) noexcept { return raw * 1e-4; }       // 0.1 µW

/// Sets `mw` and its dBm (empty for 0 mW) into the pair of a lane.
inline void set_power(std::optional<double>& mw_out, std::optional<double>& dbm_out, double mw) {
  mw_out = mw;
  dbm_out = mw_to_dbm(mw);
}

/// Fills manufacture_date from date_code when its first six characters are a valid YYMMDD;
/// otherwise adds a note.
void parse_date_code(DecodedModule& m);

/// Sets media_lane_count and builds `lanes` 1..count (at most 8) without values.
void make_lanes(DecodedModule& m, unsigned count);

/// Masks `flags` to the lanes in use, stores it as m.lane_flags and copies each lane's raised
/// flags into Lane::flags. Call after make_lanes.
void apply_lane_flags(DecodedModule& m, LaneFlags flags);

/// Error for an image of the wrong spec handed to a specific decoder.
[[nodiscard]] Error wrong_identifier(std::string_view decoder, std::uint8_t id);

/// Checks a paged module image (CMIS 5.2 §8.1, SFF-8636 §6.1: a 128-byte lower memory plus
/// 128-byte upper pages) before a decoder reads it: not empty (kInvalidArgument), the
/// identifier at byte 0 accepted by `is_identifier` (kInvalidArgument, wrong_identifier), at
/// least lower memory + page 00h (kDataLoss "truncated dump"), whole pages only (kDataLoss
/// "partial page"). `decoder` names the spec and `lower` the first 128 bytes in messages.
[[nodiscard]] Result<void> check_paged_image(std::span<const std::byte> linear, std::string_view decoder,
                                             std::string_view lower, bool (*is_identifier)(std::uint8_t));

}  // namespace npo::xcvr::detail
