// SPDX-License-Identifier: Apache-2.0
// drivers/optics (private): which SFF-8024 identifiers each decoder handles, and the SFF-8024
// code tables the CMIS decoder names (host/media interface IDs, module media type).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace npo::xcvr::detail {

/// QSFP-DD, OSFP, DSFP, QSFP+ with CMIS, SFP-DD with CMIS, SFP+ with CMIS (SFF-8024 Table 4-1).
[[nodiscard]] constexpr bool is_cmis_identifier(std::uint8_t id) noexcept {
  return id == 0x18 || id == 0x19 || id == 0x1b || id == 0x1e || id == 0x1f || id == 0x20;
}
/// QSFP (INF-8438 / SFF-8436), QSFP+, QSFP28 and later with SFF-8636.
[[nodiscard]] constexpr bool is_sff8636_identifier(std::uint8_t id) noexcept {
  return id == 0x0c || id == 0x0d || id == 0x11;
}
/// SFP/SFP+/SFP28 and modules soldered to the board (SFF-8472).
[[nodiscard]] constexpr bool is_sff8472_identifier(std::uint8_t id) noexcept { return id == 0x02 || id == 0x03; }

/// SFF-8024 Table 4-2 module media type (CMIS byte 85): "single-mode fiber", ...
[[nodiscard]] std::string_view media_type_name(std::uint8_t media_type) noexcept;
/// SFF-8024 Table 4-5 host electrical interface ID; "code 0xNN" when not in our table.
[[nodiscard]] std::string host_interface_name(std::uint8_t id);
/// Media interface ID under the table its media type selects (Tables 4-6 MMF, 4-7 SMF, 4-8
/// passive copper, 4-9 active cable, 4-10 BASE-T); "code 0xNN" when not in our table.
[[nodiscard]] std::string media_interface_name(std::uint8_t media_type, std::uint8_t id);

}  // namespace npo::xcvr::detail
