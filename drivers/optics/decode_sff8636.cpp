// SPDX-License-Identifier: Apache-2.0
// drivers/optics: SFF-8636 (QSFP+/QSFP28) memory map decoder, rev 2.10a.
// Linear layout (ethtool): lower page 0-127, page 00h 128-255, page 01h 256-383, page 02h
// 384-511, page 03h 512-639. Page 03h (thresholds) exists only for paged memory (byte 2 bit 2
// Flat_mem clear); pages 01h/02h only when page 00h byte 195 bits 6/7 advertise them.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include <fmt/format.h>

#include "npo/hal/xcvr_decode.hpp"
#include "optics/xcvr_bytes.hpp"
#include "optics/xcvr_ids.hpp"

namespace npo::xcvr {

namespace {

using detail::Bytes;

// Lower page 00h (SFF-8636 rev 2.10a).
constexpr std::size_t kRevision = 1;
constexpr std::size_t kStatus = 2;         // bit 2 Flat_mem
constexpr std::size_t kLosFlags = 3;       // 7:4 Tx4..1 LOS, 3:0 Rx4..1 LOS
constexpr std::size_t kFaultFlags = 4;     // 7:4 Tx4..1 adaptive EQ fault, 3:0 Tx4..1 fault
constexpr std::size_t kLolFlags = 5;       // 7:4 Tx4..1 CDR LOL, 3:0 Rx4..1 CDR LOL
constexpr std::size_t kTempFlags = 6;      // 7 high alarm, 6 low alarm, 5 high warning, 4 low warning
constexpr std::size_t kVccFlags = 7;       // same bits
constexpr std::size_t kRxPowerFlags = 9;   // 9-10: per lane a nibble HA, LA, HW, LW; lane 1 = byte 9 bits 7:4
constexpr std::size_t kTxBiasFlags = 11;   // 11-12
constexpr std::size_t kTxPowerFlags = 13;  // 13-14
constexpr std::size_t kTemperature = 22;
constexpr std::size_t kVcc = 26;
constexpr std::size_t kRxPower = 34;  // 4 lanes x 2 bytes
constexpr std::size_t kTxBias = 42;
constexpr std::size_t kTxPower = 50;
constexpr std::size_t kMaxPowerClass8 = 107;  // 0.1 W units, power class 8
// Upper page 00h.
constexpr std::size_t kExtIdentifier = 129;  // power class bits 7:6, 1:0, bit 5 class 8
constexpr std::size_t kDeviceTech = 147;     // 7:4 transmitter technology
constexpr std::size_t kVendorName = 148;
constexpr std::size_t kVendorOui = 165;
constexpr std::size_t kVendorPn = 168;
constexpr std::size_t kVendorRev = 184;
constexpr std::size_t kCcBase = 191;    // over 128..190
constexpr std::size_t kOptions4 = 195;  // 7 page 02h, 6 page 01h, 3 Tx_FAULT, 1 Tx LOS implemented
constexpr std::size_t kVendorSn = 196;
constexpr std::size_t kDateCode = 212;
constexpr std::size_t kDiagType = 220;  // 3 Rx power average (else OMA), 2 Tx power supported
constexpr std::size_t kCcExt = 223;     // over 192..222
// Upper page 03h thresholds, at linear 512 + (offset - 128).
constexpr std::size_t kPage03 = 4 * detail::kPageSize;
constexpr std::size_t kThrTemperature = 128;
constexpr std::size_t kThrVcc = 144;
constexpr std::size_t kThrRxPower = 176;
constexpr std::size_t kThrTxBias = 184;
constexpr std::size_t kThrTxPower = 192;

ThresholdSet thr_temp(const Bytes& b, std::size_t off) {
  return {detail::temperature_c(b.s16(off)), detail::temperature_c(b.s16(off + 2)),
          detail::temperature_c(b.s16(off + 4)), detail::temperature_c(b.s16(off + 6))};
}
template <double (*Conv)(std::uint16_t)>
ThresholdSet thr_u16(const Bytes& b, std::size_t off) {
  return {Conv(b.u16(off)), Conv(b.u16(off + 2)), Conv(b.u16(off + 4)), Conv(b.u16(off + 6))};
}

/// Per-lane alarm nibbles over two bytes (lanes 1-2 in `off`, 3-4 in `off+1`) into bitmaps
/// of the four flags high alarm, low alarm, high warning, low warning.
void nibble_flags(const Bytes& b, std::size_t off, const std::array<LaneFlag, 4>& kinds, LaneFlags& f) {
  for (unsigned lane = 0; lane < 4; ++lane) {
    const std::uint8_t byte = b.u8(off + lane / 2);
    const unsigned nib = (lane % 2 == 0) ? (byte >> 4) & 0xfu : byte & 0xfu;
    for (unsigned k = 0; k < 4; ++k) {
      if (((nib >> (3 - k)) & 1u) != 0)
        f.bitmap[static_cast<std::size_t>(kinds[k])] |= static_cast<LaneBitmap>(1u << lane);
    }
  }
}

void power_class(const Bytes& b, DecodedModule& m) {
  const std::uint8_t ext = b.u8(kExtIdentifier);
  static constexpr std::array<double, 8> kMaxW{1.5, 2.0, 2.5, 3.5, 4.0, 4.5, 5.0, 0.0};
  unsigned cls = 0;
  if ((ext & 0x20) != 0) {
    cls = 8;
  } else if ((ext & 0x03) != 0) {
    cls = 4 + (ext & 0x03);
  } else {
    cls = ((ext >> 6) & 0x03) + 1;
  }
  m.power_class = cls;
  m.max_power_w = cls == 8 ? b.u8(kMaxPowerClass8) * 0.1 : kMaxW[cls - 1];
}

}  // namespace

Result<DecodedModule> decode_sff8636(std::span<const std::byte> linear) {
  if (auto ok = detail::check_paged_image(linear, "SFF-8636", "lower page", detail::is_sff8636_identifier); !ok) {
    return std::unexpected(ok.error());
  }
  const Bytes b(linear);

  DecodedModule m;
  m.spec = Spec::kSff8636;
  m.identifier = b.u8(0);
  m.identifier_name = std::string(identifier_name(m.identifier));
  m.spec_revision = fmt::format("0x{:02x}", b.u8(kRevision));
  m.flat_memory = (b.u8(kStatus) & 0x04) != 0;

  // Pages present: in the dump AND advertised. 03h needs paged memory; 01h/02h byte 195.
  const std::uint8_t opt4 = b.u8(kOptions4);
  const std::size_t upper_in_dump = b.size() / detail::kPageSize - 1;
  m.pages.push_back(0x00);
  std::size_t used = 2 * detail::kPageSize;
  if (!m.flat_memory) {
    if (upper_in_dump > 1 && (opt4 & 0x40) != 0) m.pages.push_back(0x01);
    if (upper_in_dump > 2 && (opt4 & 0x80) != 0) m.pages.push_back(0x02);
    if (upper_in_dump > 3) m.pages.push_back(0x03);
    used = std::min<std::size_t>(b.size(), 5 * detail::kPageSize);
    // Bytes of unadvertised 01h/02h slots inside `used` are layout padding, not counted as ignored.
  }
  const bool p03 = !m.flat_memory && upper_in_dump > 3;
  m.ignored_bytes = b.size() - used;
  if (m.ignored_bytes > 0) {
    m.notes.push_back(m.flat_memory ? fmt::format("flat memory (byte 2 bit 2): only page 00h exists; {} dump bytes "
                                                  "past it ignored",
                                                  m.ignored_bytes)
                                    : fmt::format("{} dump bytes past page 03h ignored", m.ignored_bytes));
  }

  m.vendor_name = b.ascii(kVendorName, 16);
  m.vendor_oui = b.oui(kVendorOui);
  m.part_number = b.ascii(kVendorPn, 16);
  m.revision = b.ascii(kVendorRev, 2);
  m.serial_number = b.ascii(kVendorSn, 16);
  m.date_code = b.ascii(kDateCode, 8);
  detail::parse_date_code(m);
  power_class(b, m);
  m.checksums_valid = b.sum(128, kCcBase - 1) == b.u8(kCcBase) && b.sum(192, kCcExt - 1) == b.u8(kCcExt);

  const unsigned tech = b.u8(kDeviceTech) >> 4;
  m.passive_copper = tech == 0xa || tech == 0xb;  // copper cable unequalized / passive equalized
  m.media_type_name = m.passive_copper ? "passive copper" : tech >= 0xc ? "active copper" : "optical";
  m.media_lane_source = "form_factor";
  detail::make_lanes(m, 4);

  const std::uint8_t diag = b.u8(kDiagType);
  m.rx_power_is_average = (diag & 0x08) != 0;
  const bool tx_power_supported = (diag & 0x04) != 0;
  m.monitors_valid = !m.passive_copper;
  if (!m.monitors_valid) {
    m.notes.push_back(fmt::format("monitors not reported: passive copper (byte 147 = 0x{:02x}) has no measurements",
                                  b.u8(kDeviceTech)));
  }

  LaneFlags f;
  // LOS and Tx fault exist only when implemented (byte 195); SFF-8636 has no separate Rx LOS bit.
  if ((opt4 & 0x02) != 0) {
    f.bitmap[static_cast<std::size_t>(LaneFlag::kRxLos)] = b.u8(kLosFlags) & 0x0f;
    f.bitmap[static_cast<std::size_t>(LaneFlag::kTxLos)] = static_cast<LaneBitmap>(b.u8(kLosFlags) >> 4);
  }
  if ((opt4 & 0x08) != 0) f.bitmap[static_cast<std::size_t>(LaneFlag::kTxFault)] = b.u8(kFaultFlags) & 0x0f;

  if (m.monitors_valid) {
    m.temperature_c = detail::temperature_c(b.s16(kTemperature));
    m.supply_voltage_v = detail::voltage_v(b.u16(kVcc));
    for (Lane& l : m.lanes) {
      const std::size_t i = l.lane - 1;
      l.tx_bias_ma = detail::bias_ma(b.u16(kTxBias + 2 * i));
      detail::set_power(l.rx_power_mw, l.rx_power_dbm, detail::power_mw(b.u16(kRxPower + 2 * i)));
      if (tx_power_supported) {
        detail::set_power(l.tx_power_mw, l.tx_power_dbm, detail::power_mw(b.u16(kTxPower + 2 * i)));
      }
    }
    if (!tx_power_supported) m.notes.push_back("Tx power not monitored (byte 220 bit 2 clear)");

    f.bitmap[static_cast<std::size_t>(LaneFlag::kTxAdaptiveEqFault)] = static_cast<LaneBitmap>(b.u8(kFaultFlags) >> 4);
    f.bitmap[static_cast<std::size_t>(LaneFlag::kRxCdrLol)] = b.u8(kLolFlags) & 0x0f;
    f.bitmap[static_cast<std::size_t>(LaneFlag::kTxCdrLol)] = static_cast<LaneBitmap>(b.u8(kLolFlags) >> 4);
    nibble_flags(b, kRxPowerFlags,
                 {LaneFlag::kRxPowerHighAlarm, LaneFlag::kRxPowerLowAlarm, LaneFlag::kRxPowerHighWarning,
                  LaneFlag::kRxPowerLowWarning},
                 f);
    nibble_flags(b, kTxBiasFlags,
                 {LaneFlag::kTxBiasHighAlarm, LaneFlag::kTxBiasLowAlarm, LaneFlag::kTxBiasHighWarning,
                  LaneFlag::kTxBiasLowWarning},
                 f);
    if (tx_power_supported) {
      nibble_flags(b, kTxPowerFlags,
                   {LaneFlag::kTxPowerHighAlarm, LaneFlag::kTxPowerLowAlarm, LaneFlag::kTxPowerHighWarning,
                    LaneFlag::kTxPowerLowWarning},
                   f);
    }
    static constexpr std::array<ModuleFlag, 4> kTemp{
        ModuleFlag::kTemperatureHighAlarm, ModuleFlag::kTemperatureLowAlarm, ModuleFlag::kTemperatureHighWarning,
        ModuleFlag::kTemperatureLowWarning};
    static constexpr std::array<ModuleFlag, 4> kVccF{ModuleFlag::kVccHighAlarm, ModuleFlag::kVccLowAlarm,
                                                     ModuleFlag::kVccHighWarning, ModuleFlag::kVccLowWarning};
    for (unsigned k = 0; k < 4; ++k) {
      if (((b.u8(kTempFlags) >> (7 - k)) & 1u) != 0) m.module_flags.push_back(kTemp[k]);
    }
    for (unsigned k = 0; k < 4; ++k) {
      if (((b.u8(kVccFlags) >> (7 - k)) & 1u) != 0) m.module_flags.push_back(kVccF[k]);
    }
  }
  detail::apply_lane_flags(m, f);

  if (p03) {
    m.thresholds.temperature_c = thr_temp(b, kPage03 + kThrTemperature - 128);
    m.thresholds.supply_voltage_v = thr_u16<detail::voltage_v>(b, kPage03 + kThrVcc - 128);
    m.thresholds.rx_power_mw = thr_u16<detail::power_mw>(b, kPage03 + kThrRxPower - 128);
    m.thresholds.tx_bias_ma = thr_u16<detail::bias_ma>(b, kPage03 + kThrTxBias - 128);
    m.thresholds.tx_power_mw = thr_u16<detail::power_mw>(b, kPage03 + kThrTxPower - 128);
  } else if (!m.flat_memory) {
    m.notes.push_back("page 03h not in the dump: thresholds not available");
  }
  return m;
}

}  // namespace npo::xcvr
