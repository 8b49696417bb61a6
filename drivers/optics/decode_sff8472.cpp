// SPDX-License-Identifier: Apache-2.0
// drivers/optics: SFF-8472 (SFP/SFP+/SFP28) decoder, rev 12.4.
// Linear layout (ethtool): A0h (I2C 0x50, serial ID) at 0-255, A2h (I2C 0x51, diagnostics) at
// 256-511. A2h exists only when A0h byte 92 bit 6 (digital diagnostics implemented) is set.
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "npo/hal/xcvr_decode.hpp"
#include "optics/xcvr_bytes.hpp"
#include "optics/xcvr_ids.hpp"

namespace npo::xcvr {

namespace {

using detail::Bytes;

// A0h (SFF-8472 serial ID fields).
constexpr std::size_t kCableTech = 8;      // bit 3 active cable, bit 2 passive cable (SFP+)
constexpr std::size_t kEthCompliance = 6;  // bit 3 1000BASE-T
constexpr std::size_t kVendorName = 20;
constexpr std::size_t kVendorOui = 37;
constexpr std::size_t kVendorPn = 40;
constexpr std::size_t kVendorRev = 56;
constexpr std::size_t kCcBase = 63;  // over 0..62
constexpr std::size_t kVendorSn = 68;
constexpr std::size_t kDateCode = 84;
constexpr std::size_t kDiagType = 92;  // 6 DDM, 5 internal cal, 4 external cal, 3 Rx average, 2 address change
constexpr std::size_t kEnhanced = 93;  // 7 alarm/warning flags, 5 soft TX_FAULT, 4 soft RX_LOS monitoring
constexpr std::size_t kCompliance = 94;
constexpr std::size_t kCcExt = 95;  // over 64..94
// A2h (diagnostics), linear 256 + offset.
constexpr std::size_t kA2 = 256;
constexpr std::size_t kThrTemperature = 0;  // high alarm, low alarm, high warning, low warning
constexpr std::size_t kThrVcc = 8;
constexpr std::size_t kThrTxBias = 16;
constexpr std::size_t kThrTxPower = 24;
constexpr std::size_t kThrRxPower = 32;
constexpr std::size_t kCalRxPwr4 = 56;    // IEEE-754 single, Rx_PWR(4) .. Rx_PWR(0) at 56, 60, 64, 68, 72
constexpr std::size_t kCalTxISlope = 76;  // unsigned 8.8 slope, then signed offset, for I, TxPWR, T, V
constexpr std::size_t kCalTxPwrSlope = 80;
constexpr std::size_t kCalTSlope = 84;
constexpr std::size_t kCalVSlope = 88;
constexpr std::size_t kCcDmi = 95;  // over A2h 0..94
constexpr std::size_t kTemperature = 96;
constexpr std::size_t kVcc = 98;
constexpr std::size_t kTxBias = 100;
constexpr std::size_t kTxPower = 102;
constexpr std::size_t kRxPower = 104;
constexpr std::size_t kStatus = 110;  // bit 2 TX_FAULT state, bit 1 RX_LOS state
constexpr std::size_t kAlarms = 112;  // 112: 7 temp HA, 6 temp LA, 5 Vcc HA, 4 Vcc LA, 3 bias HA, 2 bias LA,
                                      //      1 Tx HA, 0 Tx LA; 113: 7 Rx HA, 6 Rx LA
constexpr std::size_t kWarnings = 116;

/// Converts raw A/D words into calibrated values in the internal-calibration units.
class Calibration {
 public:
  Calibration(const Bytes& b, bool external) : b_(b), ext_(external) {}

  [[nodiscard]] double temperature(std::int16_t raw) const { return linear(raw, kCalTSlope) / 256.0; }
  [[nodiscard]] double voltage(std::uint16_t raw) const { return linear(raw, kCalVSlope) * 1e-4; }
  [[nodiscard]] double bias(std::uint16_t raw) const { return linear(raw, kCalTxISlope) * 0.002; }
  [[nodiscard]] double tx_power(std::uint16_t raw) const { return linear(raw, kCalTxPwrSlope) * 1e-4; }
  [[nodiscard]] double rx_power(std::uint16_t raw) const {
    if (!ext_) return raw * 1e-4;
    // Rx_PWR = Rx_PWR(4)·AD^4 + Rx_PWR(3)·AD^3 + Rx_PWR(2)·AD^2 + Rx_PWR(1)·AD + Rx_PWR(0), in 0.1 µW.
    double acc = 0;
    for (std::size_t k = 0; k < 5; ++k) acc = acc * raw + b_.f32(kA2 + kCalRxPwr4 + 4 * k);
    return acc * 1e-4;
  }

 private:
  /// slope (unsigned 8.8 fixed point) x raw + offset (signed, in the raw unit).
  [[nodiscard]] double linear(double raw, std::size_t slope_off) const {
    if (!ext_) return raw;
    const double slope = b_.u16(kA2 + slope_off) / 256.0;
    const double offset = b_.s16(kA2 + slope_off + 2);
    return slope * raw + offset;
  }

  const Bytes& b_;
  bool ext_;
};

/// Measurements after external calibration may come out non-finite or negative; a power or
/// current below zero means nothing physical, so it is reported as 0.
std::optional<double> physical(double v, bool non_negative) {
  if (!std::isfinite(v)) return std::nullopt;
  return non_negative && v < 0 ? 0.0 : v;
}

std::optional<ThresholdSet> thresholds(const Bytes& b, std::size_t off, bool non_negative, bool is_signed,
                                       const std::function<double(std::uint16_t)>& conv_u,
                                       const std::function<double(std::int16_t)>& conv_s) {
  std::array<double, 4> v{};
  for (std::size_t k = 0; k < 4; ++k) {
    const double x = is_signed ? conv_s(b.s16(kA2 + off + 2 * k)) : conv_u(b.u16(kA2 + off + 2 * k));
    const auto p = physical(x, non_negative);
    if (!p) return std::nullopt;
    v[k] = *p;
  }
  return ThresholdSet{v[0], v[1], v[2], v[3]};
}

}  // namespace

Result<DecodedModule> decode_sff8472(std::span<const std::byte> linear) {
  const Bytes b(linear);
  if (b.size() == 0) return fail(Code::kInvalidArgument, "SFF-8472: empty module image");
  if (!detail::is_sff8472_identifier(b.u8(0))) return std::unexpected(detail::wrong_identifier("SFF-8472", b.u8(0)));
  if (b.size() < 2 * detail::kPageSize) {
    return fail(Code::kDataLoss, fmt::format("SFF-8472: {} bytes, need A0h (256 bytes): truncated dump", b.size()));
  }
  if (b.size() > 256 && b.size() < 512) {
    return fail(Code::kDataLoss,
                fmt::format("SFF-8472: {} bytes: A2h cut short (A0h + A2h are 512 bytes): truncated dump", b.size()));
  }
  if (b.size() % detail::kPageSize != 0) {
    return fail(Code::kDataLoss,
                fmt::format("SFF-8472: {} bytes is not a whole number of 128-byte pages (partial page)", b.size()));
  }

  DecodedModule m;
  m.spec = Spec::kSff8472;
  m.identifier = b.u8(0);
  m.identifier_name = std::string(identifier_name(m.identifier));
  m.spec_revision = fmt::format("0x{:02x}", b.u8(kCompliance));
  m.vendor_name = b.ascii(kVendorName, 16);
  m.vendor_oui = b.oui(kVendorOui);
  m.part_number = b.ascii(kVendorPn, 16);
  m.revision = b.ascii(kVendorRev, 4);
  m.serial_number = b.ascii(kVendorSn, 16);
  m.date_code = b.ascii(kDateCode, 8);
  detail::parse_date_code(m);

  const std::uint8_t diag = b.u8(kDiagType);
  const std::uint8_t enh = b.u8(kEnhanced);
  const bool ddm = (diag & 0x40) != 0;
  const bool external = (diag & 0x10) != 0;
  m.rx_power_is_average = (diag & 0x08) != 0;
  const std::uint8_t cable = b.u8(kCableTech);
  m.passive_copper = (cable & 0x04) != 0;
  m.media_type_name = m.passive_copper                     ? "passive copper"
                      : (cable & 0x08) != 0                ? "active cable"
                      : (b.u8(kEthCompliance) & 0x08) != 0 ? "BASE-T"
                                                           : "optical";
  m.media_lane_source = "form_factor";

  const bool a2 = ddm && b.size() >= 512;
  m.pages.push_back(0xa0);
  if (a2) m.pages.push_back(0xa2);
  m.ignored_bytes = b.size() - (a2 ? 512 : 256);
  if (!ddm) {
    m.notes.push_back("no digital diagnostics (A0h byte 92 bit 6 clear): A2h does not exist");
  } else if (!a2) {
    m.notes.push_back("digital diagnostics implemented but A2h is not in the dump");
  }
  if (m.ignored_bytes > 0) m.notes.push_back(fmt::format("{} dump bytes not decoded", m.ignored_bytes));
  if (a2 && (diag & 0x04) != 0) m.notes.push_back("A2h needs an address change sequence (byte 92 bit 2)");

  bool sums = b.sum(0, kCcBase - 1) == b.u8(kCcBase) && b.sum(64, kCcExt - 1) == b.u8(kCcExt);
  if (a2) sums = sums && b.sum(kA2, kA2 + kCcDmi - 1) == b.u8(kA2 + kCcDmi);
  m.checksums_valid = sums;

  m.monitors_valid = a2 && !m.passive_copper;
  if (a2 && m.passive_copper) m.notes.push_back("monitors not reported: passive copper cable (A0h byte 8 bit 2)");
  detail::make_lanes(m, 1);
  if (!a2) return m;

  if (external) m.notes.push_back("external calibration (byte 92 bit 4): A2h constants applied");
  const Calibration cal(b, external);
  if (m.monitors_valid) {
    m.temperature_c = physical(cal.temperature(b.s16(kA2 + kTemperature)), false);
    m.supply_voltage_v = physical(cal.voltage(b.u16(kA2 + kVcc)), true);
    Lane& l = m.lanes.front();
    l.tx_bias_ma = physical(cal.bias(b.u16(kA2 + kTxBias)), true);
    if (auto p = physical(cal.tx_power(b.u16(kA2 + kTxPower)), true))
      detail::set_power(l.tx_power_mw, l.tx_power_dbm, *p);
    if (auto p = physical(cal.rx_power(b.u16(kA2 + kRxPower)), true))
      detail::set_power(l.rx_power_mw, l.rx_power_dbm, *p);

    LaneFlags f;
    const auto set = [&f](LaneFlag fl, bool on) {
      if (on) f.bitmap[static_cast<std::size_t>(fl)] = 1;
    };
    if ((enh & 0x80) != 0) {
      const std::uint8_t a0 = b.u8(kA2 + kAlarms), a1 = b.u8(kA2 + kAlarms + 1);
      const std::uint8_t w0 = b.u8(kA2 + kWarnings), w1 = b.u8(kA2 + kWarnings + 1);
      set(LaneFlag::kTxBiasHighAlarm, a0 & 0x08);
      set(LaneFlag::kTxBiasLowAlarm, a0 & 0x04);
      set(LaneFlag::kTxPowerHighAlarm, a0 & 0x02);
      set(LaneFlag::kTxPowerLowAlarm, a0 & 0x01);
      set(LaneFlag::kRxPowerHighAlarm, a1 & 0x80);
      set(LaneFlag::kRxPowerLowAlarm, a1 & 0x40);
      set(LaneFlag::kTxBiasHighWarning, w0 & 0x08);
      set(LaneFlag::kTxBiasLowWarning, w0 & 0x04);
      set(LaneFlag::kTxPowerHighWarning, w0 & 0x02);
      set(LaneFlag::kTxPowerLowWarning, w0 & 0x01);
      set(LaneFlag::kRxPowerHighWarning, w1 & 0x80);
      set(LaneFlag::kRxPowerLowWarning, w1 & 0x40);
      static constexpr std::array<std::pair<ModuleFlag, std::uint8_t>, 4> kAlarmBits{
          {{ModuleFlag::kTemperatureHighAlarm, 0x80},
           {ModuleFlag::kTemperatureLowAlarm, 0x40},
           {ModuleFlag::kVccHighAlarm, 0x20},
           {ModuleFlag::kVccLowAlarm, 0x10}}};
      static constexpr std::array<std::pair<ModuleFlag, std::uint8_t>, 4> kWarnBits{
          {{ModuleFlag::kTemperatureHighWarning, 0x80},
           {ModuleFlag::kTemperatureLowWarning, 0x40},
           {ModuleFlag::kVccHighWarning, 0x20},
           {ModuleFlag::kVccLowWarning, 0x10}}};
      for (const auto& [fl, bit] : kAlarmBits) {
        if ((a0 & bit) != 0) m.module_flags.push_back(fl);
      }
      for (const auto& [fl, bit] : kWarnBits) {
        if ((w0 & bit) != 0) m.module_flags.push_back(fl);
      }
    }
    const std::uint8_t st = b.u8(kA2 + kStatus);
    if ((enh & 0x20) != 0) set(LaneFlag::kTxFault, st & 0x04);
    if ((enh & 0x10) != 0) set(LaneFlag::kRxLos, st & 0x02);
    detail::apply_lane_flags(m, f);
  }

  const auto temp = [&cal](std::int16_t r) { return cal.temperature(r); };
  const auto volt = [&cal](std::uint16_t r) { return cal.voltage(r); };
  const auto bias = [&cal](std::uint16_t r) { return cal.bias(r); };
  const auto txp = [&cal](std::uint16_t r) { return cal.tx_power(r); };
  const auto rxp = [&cal](std::uint16_t r) { return cal.rx_power(r); };
  const auto none_u = [](std::uint16_t) { return 0.0; };
  const auto none_s = [](std::int16_t) { return 0.0; };
  m.thresholds.temperature_c = thresholds(b, kThrTemperature, false, true, none_u, temp);
  m.thresholds.supply_voltage_v = thresholds(b, kThrVcc, true, false, volt, none_s);
  m.thresholds.tx_bias_ma = thresholds(b, kThrTxBias, true, false, bias, none_s);
  m.thresholds.tx_power_mw = thresholds(b, kThrTxPower, true, false, txp, none_s);
  m.thresholds.rx_power_mw = thresholds(b, kThrRxPower, true, false, rxp, none_s);
  return m;
}

}  // namespace npo::xcvr
