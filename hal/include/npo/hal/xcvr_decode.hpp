// SPDX-License-Identifier: Apache-2.0
// npo-hal public API: transceiver EEPROM decoders. Turns a module memory image (a "linear
// layout", as `ethtool -m IF raw on` writes it) into identity, state, per-lane DDM, latched
// flags and thresholds, for the three management interfaces in the field:
//   CMIS 5.2 (QSFP-DD, OSFP, QSFP+ with CMIS, ...), SFF-8636 (QSFP+/QSFP28), SFF-8472 (SFP).
// Also reads the dump formats (raw bytes, `ethtool -m hex on` text, the `.hex` files of
// tests/data/eeprom). Pure functions on bytes: no device, no I/O except load_dump_file.
//
// Units everywhere: temperature °C (signed), voltage V, current mA, optical power mW, with dBm
// derived (std::nullopt when the power is 0 mW: there is no finite dBm for "no light").
// A value the module does not monitor, or that a passive copper module leaves as junk, is
// std::nullopt: "not reported" is never shown as 0.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "npo/hal/error.hpp"

namespace npo::xcvr {

/// The management interface a memory map follows.
enum class Spec : std::uint8_t {
  kCmis,     ///< OIF CMIS (rev 3.0 .. 5.2): lower memory + pages 00h, 01h, 02h, 10h, 11h (bank 0)
  kSff8636,  ///< SFF-8636 / SFF-8436: lower memory + pages 00h, 01h, 02h, 03h
  kSff8472,  ///< SFF-8472: A0h (256 B) + A2h (256 B)
};
/// Stable name: "cmis", "sff8636", "sff8472".
[[nodiscard]] std::string_view spec_name(Spec s) noexcept;

/// SFF-8024 Table 4-1 name of an identifier byte (byte 0), e.g. 0x18 -> "QSFP-DD".
/// Never empty: reserved codes give "reserved", 0x80..0xff "vendor specific".
[[nodiscard]] std::string_view identifier_name(std::uint8_t code) noexcept;

/// Latched per-lane flags (CMIS 5.2 §8.9.3: page 11h bytes 135-152; SFF-8636 lower page bytes
/// 3-5 and 9-14; SFF-8472 A2h bytes 112-117, and byte 110 for Tx fault / Rx LOS).
enum class LaneFlag : std::uint8_t {
  kTxPowerHighAlarm,
  kTxPowerLowAlarm,
  kTxPowerHighWarning,
  kTxPowerLowWarning,
  kTxBiasHighAlarm,
  kTxBiasLowAlarm,
  kTxBiasHighWarning,
  kTxBiasLowWarning,
  kRxPowerHighAlarm,
  kRxPowerLowAlarm,
  kRxPowerHighWarning,
  kRxPowerLowWarning,
  kTxLos,
  kRxLos,
  kTxCdrLol,
  kRxCdrLol,
  kTxFault,
  kTxAdaptiveEqFault,
};
inline constexpr std::size_t kLaneFlagCount = 18;
/// Stable snake_case name, e.g. LaneFlag::kTxPowerHighAlarm -> "tx_power_high_alarm".
[[nodiscard]] std::string_view lane_flag_name(LaneFlag f) noexcept;

/// Latched module-level flags (CMIS lower byte 9; SFF-8636 lower bytes 6-7; SFF-8472 A2h 112/116).
enum class ModuleFlag : std::uint8_t {
  kTemperatureHighAlarm,
  kTemperatureLowAlarm,
  kTemperatureHighWarning,
  kTemperatureLowWarning,
  kVccHighAlarm,
  kVccLowAlarm,
  kVccHighWarning,
  kVccLowWarning,
};
inline constexpr std::size_t kModuleFlagCount = 8;
/// Stable snake_case name, e.g. "temperature_high_alarm", "vcc_low_warning".
[[nodiscard]] std::string_view module_flag_name(ModuleFlag f) noexcept;

/// One bit per media lane: bit i set = the flag is raised on lane i+1. Eight lanes cover a
/// CMIS bank; SFF-8636 uses bits 0-3, SFF-8472 bit 0.
using LaneBitmap = std::uint8_t;

/// Every lane flag as a bitmap over the media lanes in use (bits of lanes not in use are 0).
struct LaneFlags {
  std::array<LaneBitmap, kLaneFlagCount> bitmap{};

  [[nodiscard]] LaneBitmap get(LaneFlag f) const noexcept { return bitmap[static_cast<std::size_t>(f)]; }
  /// Whether flag `f` is raised on media lane `lane` (from 1); false for lanes outside 1..8.
  [[nodiscard]] bool test(LaneFlag f, unsigned lane) const noexcept {
    return lane >= 1 && lane <= 8 && ((get(f) >> (lane - 1)) & 1u) != 0;
  }
  /// The flags raised on media lane `lane` (from 1), in enum order.
  [[nodiscard]] std::vector<LaneFlag> on_lane(unsigned lane) const;
};

/// CMIS Module State (CMIS 5.2 §8.2: lower memory byte 3 bits 3:1).
struct ModuleState {
  std::uint8_t code = 0;  ///< 1 ModuleLowPwr, 2 ModulePwrUp, 3 ModuleReady, 4 ModulePwrDn, 5 ModuleFault
  std::string name;       ///< "ModuleReady", ...; "reserved (0)" for codes CMIS leaves reserved
};

/// One CMIS Application Descriptor (CMIS 5.2 §8.2/§8.4: lower bytes 86-117 for AppSel 1-8, page
/// 01h bytes 223-250 for AppSel 9-15).
struct ApplicationDescriptor {
  std::uint8_t app_sel = 0;               ///< AppSel code: the descriptor's position, 1..15
  std::uint8_t host_interface_id = 0;     ///< SFF-8024 Table 4-5
  std::uint8_t media_interface_id = 0;    ///< SFF-8024 table chosen by the module media type
  std::string host_interface;             ///< name of host_interface_id ("400GAUI-8 C2M", "code 0x4a")
  std::string media_interface;            ///< name of media_interface_id under the module's media type
  std::uint8_t host_lane_count = 0;       ///< byte 2 bits 7:4
  std::uint8_t media_lane_count = 0;      ///< byte 2 bits 3:0
  std::uint8_t host_lane_assignment = 0;  ///< byte 3: bitmap of host lanes a data path may start on
};

/// One media lane. Absent values are not monitored, not advertised, or not in the dump.
struct Lane {
  unsigned lane = 0;                   ///< media lane number, from 1
  std::optional<double> tx_bias_ma;    ///< laser bias, mA (CMIS: 2 µA LSB × page 01h scaling factor)
  std::optional<double> tx_power_mw;   ///< transmit optical power, mW (0.1 µW LSB)
  std::optional<double> tx_power_dbm;  ///< 10·log10(tx_power_mw); empty when the power is 0 mW
  std::optional<double> rx_power_mw;   ///< receive optical power, mW (average or OMA, see rx_power_is_average)
  std::optional<double> rx_power_dbm;  ///< 10·log10(rx_power_mw); empty when the power is 0 mW
  std::vector<LaneFlag> flags;         ///< latched flags raised on this lane
};

/// Alarm and warning thresholds of one monitor, in the monitor's unit.
struct ThresholdSet {
  double high_alarm = 0;
  double low_alarm = 0;
  double high_warning = 0;
  double low_warning = 0;
};

/// Module-defined thresholds (CMIS page 02h, SFF-8636 page 03h, SFF-8472 A2h bytes 0-39).
/// Empty when the page holding them is not advertised or not in the dump.
struct Thresholds {
  std::optional<ThresholdSet> temperature_c;
  std::optional<ThresholdSet> supply_voltage_v;
  std::optional<ThresholdSet> tx_power_mw;
  std::optional<ThresholdSet> tx_bias_ma;
  std::optional<ThresholdSet> rx_power_mw;
};

/// A decoded module memory map.
struct DecodedModule {
  Spec spec = Spec::kCmis;
  std::uint8_t identifier = 0;  ///< SFF-8024 identifier code (byte 0)
  std::string identifier_name;  ///< identifier_name(identifier)
  std::string spec_revision;    ///< CMIS "4.0"; SFF-8636 byte 1 / SFF-8472 byte 94 as "0x07"

  // Identity (printable ASCII with trailing blanks removed; other bytes shown as '?').
  std::string vendor_name;
  std::string vendor_oui;  ///< "00:90:65"
  std::string part_number;
  std::string serial_number;
  std::string revision;
  std::string date_code;                        ///< raw YYMMDDLL field, trailing blanks removed ("190426")
  std::optional<std::string> manufacture_date;  ///< "2019-04-26" when the code starts with a valid YYMMDD

  std::optional<ModuleState> module_state;  ///< CMIS only
  bool flat_memory = false;  ///< only lower memory and page 00h exist (CMIS byte 2 bit 7, SFF-8636 byte 2 bit 2)
  /// Upper pages present in the dump AND advertised by the module, in layout order: CMIS 0x00,
  /// 0x01, 0x02, 0x10, 0x11; SFF-8636 0x00, 0x01, 0x02, 0x03; SFF-8472 the I2C pages 0xA0, 0xA2.
  std::vector<std::uint8_t> pages;
  std::size_t ignored_bytes = 0;  ///< dump bytes past the advertised pages, never decoded

  std::optional<unsigned> power_class;  ///< CMIS byte 200 / SFF-8636 byte 129 (1..8)
  std::optional<double> max_power_w;    ///< CMIS byte 201; SFF-8636 from the power class

  std::optional<std::uint8_t> media_type;  ///< CMIS byte 85 (SFF-8024 Table 4-2 "module media type")
  std::string media_type_name;             ///< "single-mode fiber", "passive copper", ...
  bool passive_copper = false;             ///< CMIS media type 03h, SFF-8636 byte 147 Ah/Bh, SFF-8472 byte 8 bit 2

  std::vector<ApplicationDescriptor> applications;  ///< CMIS only; undefined (host ID 00h) entries skipped
  std::optional<std::uint8_t> active_app_sel;       ///< the AppSel that gave media_lane_count
  unsigned media_lane_count = 0;                    ///< media lanes in use; lanes.size()
  std::string media_lane_source;  ///< "active_control_set", "first_application", "form_factor", "none"

  /// True when the monitor bytes carry measurements. False for passive copper (its monitor
  /// bytes are junk), for SFF-8472 without DDM (A0h byte 92 bit 6) or without A2h in the dump.
  bool monitors_valid = false;
  bool rx_power_is_average = true;  ///< false: the module reports Rx OMA

  std::optional<double> temperature_c;     ///< module temperature, signed, 1/256 °C LSB
  std::optional<double> supply_voltage_v;  ///< 100 µV LSB

  std::vector<Lane> lanes;               ///< one per media lane in use, lane 1 first (listed even without values)
  std::optional<LaneFlags> lane_flags;   ///< empty when the flag bytes are not in the dump or not valid
  std::vector<ModuleFlag> module_flags;  ///< module-level flags raised
  Thresholds thresholds;

  std::optional<bool> checksums_valid;  ///< every check code of the decoded pages matches
  std::vector<std::string> notes;       ///< decoder remarks ("flat memory: 512 dump bytes ignored", ...)
};

/// 10·log10(mw) for mw > 0; std::nullopt for 0 mW, negative or non-finite input (never -inf).
/// Thread-safety: pure.
[[nodiscard]] std::optional<double> mw_to_dbm(double mw) noexcept;

/// Decodes a module memory image, choosing the spec from byte 0 (SFF-8024 identifier):
/// 0x18/0x19/0x1b/0x1e/0x1f/0x20 CMIS, 0x0c/0x0d/0x11 SFF-8636, 0x02/0x03 SFF-8472.
/// `linear` is the ethtool linear layout: CMIS lower memory, page 00h, then 01h, 02h, 10h, 11h
/// (128 B each, as many as present); SFF-8636 lower, 00h, 01h, 02h, 03h; SFF-8472 A0h then A2h
/// (256 B each). Bytes of pages the module does not advertise (flat memory, no DDM) are ignored.
/// Errors: kInvalidArgument (empty input, unknown identifier), kDataLoss (shorter than lower
/// memory + page 00h / A0h, or a partial page).
/// Thread-safety: pure; safe from any number of threads.
[[nodiscard]] Result<DecodedModule> decode_module(std::span<const std::byte> linear);

/// CMIS 5.2 decoder (§8.2 lower memory, §8.3 page 00h, §8.4 page 01h, §8.5 page 02h, §8.9 page
/// 11h). Media lanes in use come from the Active Control Set (page 11h bytes 206-213, CMIS 5.2
/// §8.9), else from the first defined Application Descriptor. Tx bias is scaled by page 01h
/// byte 160 bits 4:3 (x1/x2/x4), monitors and thresholds alike. Errors as decode_module;
/// kInvalidArgument for a non-CMIS identifier. Thread-safety: pure.
[[nodiscard]] Result<DecodedModule> decode_cmis(std::span<const std::byte> linear);

/// SFF-8636 rev 2.10a decoder (lower page 00h, upper page 00h, upper page 03h thresholds).
/// Page 03h exists only when byte 2 bit 2 (Flat_mem) is clear. Always 4 media lanes.
/// Errors as decode_module; kInvalidArgument for a non-SFF-8636 identifier. Thread-safety: pure.
[[nodiscard]] Result<DecodedModule> decode_sff8636(std::span<const std::byte> linear);

/// SFF-8472 rev 12.4 decoder (A0h serial ID, A2h diagnostics). A2h exists only when A0h
/// byte 92 bit 6 (DDM implemented) is set. With external calibration (byte 92 bit 4) the A2h
/// slopes/offsets (bytes 76-91) and the Rx power polynomial (bytes 56-75, IEEE-754) are applied
/// to measurements and thresholds (SFF-8472 "external calibration"). One media lane. Flags tx_fault/rx_los are A2h byte
/// 110 real-time states. Errors as decode_module; 256 < size < 512 is kDataLoss (A2h cut short). Thread-safety: pure.
[[nodiscard]] Result<DecodedModule> decode_sff8472(std::span<const std::byte> linear);

/// Parses a text dump into the linear layout. Accepts `ethtool -m IF hex on` output (header
/// lines "Offset  Values" / "------", data lines "0x0000:  18 52 ...") and the `.hex` format of
/// tests/data/eeprom (`#` comments; "OFFSET  16 hex bytes  |ascii|"). Data bytes in file order
/// form the layout; each line's offset must agree with its position within its 128-byte page.
/// Errors: kInvalidArgument (a token that is not hex, an odd number of hex digits, a line
/// without data, no data at all, more than 64 KiB), kDataLoss (a missing line: offset out of
/// step; a total that is not a whole number of 128-byte pages). Messages name the line.
/// Thread-safety: pure.
[[nodiscard]] Result<std::vector<std::byte>> parse_dump_text(std::string_view text);

/// Parses file contents in any of the three formats: raw binary (as `ethtool -m IF raw on`
/// writes it: any byte outside printable ASCII/whitespace means binary) or text (parse_dump_text).
/// Errors: kInvalidArgument (empty input, bad text, over 64 KiB), kDataLoss (not whole 128-byte
/// pages). Thread-safety: pure.
[[nodiscard]] Result<std::vector<std::byte>> parse_dump(std::span<const std::byte> contents);

/// Reads `path` and parse_dump()s it. Errors: kNotFound / kPermissionDenied / ... from the
/// failed open or read (errno kept), then as parse_dump. Messages name the file.
/// Thread-safety: safe from any number of threads.
[[nodiscard]] Result<std::vector<std::byte>> load_dump_file(const std::filesystem::path& path);

}  // namespace npo::xcvr
