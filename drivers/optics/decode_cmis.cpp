// SPDX-License-Identifier: Apache-2.0
// drivers/optics: CMIS 5.2 memory map decoder (QSFP-DD, OSFP, QSFP+/SFP+ with CMIS).
// Linear layout: lower memory (0-127), page 00h (128-255), then 01h, 02h, 10h, 11h of bank 0,
// 128 bytes each, as far as the dump goes. Flat-memory modules have page 00h only.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "npo/hal/xcvr_decode.hpp"
#include "optics/xcvr_bytes.hpp"
#include "optics/xcvr_ids.hpp"

namespace npo::xcvr {

namespace {

using detail::Bytes;

// Slot of each upper page in the linear layout (slot 0 = page 00h at bytes 128-255).
constexpr std::size_t kSlot01 = 1;
constexpr std::size_t kSlot02 = 2;
constexpr std::size_t kSlot11 = 4;  // slot 3 is page 10h (staged control set), not decoded

/// Linear index of byte `off` (128..255) of the upper page in `slot`.
constexpr std::size_t at(std::size_t slot, std::size_t off) { return slot * detail::kPageSize + off; }

// Lower memory (CMIS 5.2 §8.2).
constexpr std::size_t kRevision = 1;
constexpr std::size_t kMemoryModel = 2;  // bit 7: flat memory
constexpr std::size_t kModuleState = 3;  // bits 3:1
constexpr std::size_t kModuleFlags = 9;  // temperature/Vcc latched flags
constexpr std::size_t kTemperature = 14;
constexpr std::size_t kVcc = 16;
constexpr std::size_t kMediaType = 85;
constexpr std::size_t kAppDescLower = 86;  // AppSel 1..8, 4 bytes each
// Page 00h (§8.3).
constexpr std::size_t kVendorName = 129;
constexpr std::size_t kVendorOui = 145;
constexpr std::size_t kVendorPn = 148;
constexpr std::size_t kVendorRev = 164;
constexpr std::size_t kVendorSn = 166;
constexpr std::size_t kDateCode = 182;
constexpr std::size_t kPowerClass = 200;  // bits 7:5 = class - 1
constexpr std::size_t kMaxPower = 201;    // 0.25 W units
constexpr std::size_t kChecksum00 = 222;  // over 128..221
// Page 01h (§8.4).
constexpr std::size_t kRxPowerType = 151;    // bit 4: 1 = average, 0 = OMA
constexpr std::size_t kTxFlagsAdv = 157;     // bit 0 TxFault, 1 TxLOS, 2 TxCDRLOL, 3 TxAdaptEqFail
constexpr std::size_t kRxFlagsAdv = 158;     // bit 1 RxLOS, 2 RxCDRLOL
constexpr std::size_t kModuleMonAdv = 159;   // bit 0 temperature, bit 1 Vcc
constexpr std::size_t kLaneMonAdv = 160;     // bit 0 Tx bias, 1 Tx power, 2 Rx power, 4:3 bias scale
constexpr std::size_t kAppDescPage01 = 223;  // AppSel 9..15
// Page 02h thresholds (§8.5), each high alarm, low alarm, high warning, low warning.
constexpr std::size_t kThrTemperature = 128;
constexpr std::size_t kThrVcc = 136;
constexpr std::size_t kThrTxPower = 176;
constexpr std::size_t kThrTxBias = 184;
constexpr std::size_t kThrRxPower = 192;
// Page 11h (§8.9): latched lane flags, lane monitors, Active Control Set.
constexpr std::size_t kFlagTxFault = 135;
constexpr std::size_t kFlagTxLos = 136;
constexpr std::size_t kFlagTxCdrLol = 137;
constexpr std::size_t kFlagTxAdaptEq = 138;
constexpr std::size_t kFlagTxPower = 139;  // 139..142 high alarm, low alarm, high warning, low warning
constexpr std::size_t kFlagTxBias = 143;   // 143..146
constexpr std::size_t kFlagRxLos = 147;
constexpr std::size_t kFlagRxCdrLol = 148;
constexpr std::size_t kFlagRxPower = 149;  // 149..152
constexpr std::size_t kMonTxPower = 154;   // 8 lanes x 2 bytes
constexpr std::size_t kMonTxBias = 170;
constexpr std::size_t kMonRxPower = 186;
constexpr std::size_t kActiveAppSel = 206;  // per host lane: AppSel 7:4, DataPathID 3:1

std::string_view module_state_name(std::uint8_t s) {
  switch (s) {
    case 1: return "ModuleLowPwr";
    case 2: return "ModulePwrUp";
    case 3: return "ModuleReady";
    case 4: return "ModulePwrDn";
    case 5: return "ModuleFault";
    default: return "";
  }
}

ThresholdSet thresholds(const Bytes& b, std::size_t off, double (*conv)(const Bytes&, std::size_t)) {
  return {conv(b, off), conv(b, off + 2), conv(b, off + 4), conv(b, off + 6)};
}
double conv_temp(const Bytes& b, std::size_t off) { return detail::temperature_c(b.s16(off)); }
double conv_volt(const Bytes& b, std::size_t off) { return detail::voltage_v(b.u16(off)); }
double conv_power(const Bytes& b, std::size_t off) { return detail::power_mw(b.u16(off)); }
double conv_bias(const Bytes& b, std::size_t off) { return detail::bias_ma(b.u16(off)); }

ApplicationDescriptor read_descriptor(const Bytes& b, std::size_t off, std::uint8_t app_sel, std::uint8_t media_type) {
  ApplicationDescriptor d;
  d.app_sel = app_sel;
  d.host_interface_id = b.u8(off);
  d.media_interface_id = b.u8(off + 1);
  d.host_lane_count = static_cast<std::uint8_t>(b.u8(off + 2) >> 4);
  d.media_lane_count = static_cast<std::uint8_t>(b.u8(off + 2) & 0x0f);
  d.host_lane_assignment = b.u8(off + 3);
  d.host_interface = detail::host_interface_name(d.host_interface_id);
  d.media_interface = detail::media_interface_name(media_type, d.media_interface_id);
  return d;
}

/// Reads the descriptor list: AppSel 1..8 from lower memory, 9..15 from page 01h when present.
/// Host interface ID FFh ends the list; 00h (undefined) entries are skipped but keep their AppSel.
void read_applications(const Bytes& b, bool have_p01, DecodedModule& m) {
  const std::uint8_t mt = m.media_type.value_or(0);
  for (std::uint8_t i = 0; i < 15; ++i) {
    if (i >= 8 && !have_p01) return;
    const std::size_t off = i < 8 ? kAppDescLower + 4u * i : at(kSlot01, kAppDescPage01 + 4u * (i - 8u));
    const std::uint8_t host = b.u8(off);
    if (host == 0xff) return;
    if (host == 0x00) continue;
    m.applications.push_back(read_descriptor(b, off, static_cast<std::uint8_t>(i + 1), mt));
  }
}

const ApplicationDescriptor* find_app(const DecodedModule& m, std::uint8_t app_sel) {
  for (const auto& a : m.applications) {
    if (a.app_sel == app_sel) return &a;
  }
  return nullptr;
}

/// Media lanes in use (CMIS 5.2 §8.9, Active Control Set): the sum of the media lane counts of the data
/// paths of the Active Control Set; else the first defined Application Descriptor.
void media_lanes(const Bytes& b, bool have_p11, DecodedModule& m) {
  if (have_p11) {
    std::array<std::uint8_t, 8> app_of_dp{};  // DataPathID (first host lane) -> AppSel
    for (std::size_t lane = 0; lane < 8; ++lane) {
      const std::uint8_t v = b.u8(at(kSlot11, kActiveAppSel + lane));
      const auto app = static_cast<std::uint8_t>(v >> 4);
      const auto dp = static_cast<std::size_t>((v >> 1) & 0x7);
      if (app != 0 && app_of_dp[dp] == 0) app_of_dp[dp] = app;
    }
    unsigned total = 0;
    std::optional<std::uint8_t> first;
    for (std::uint8_t app : app_of_dp) {
      if (app == 0) continue;
      const ApplicationDescriptor* d = find_app(m, app);
      if (d == nullptr) {
        m.notes.push_back(fmt::format("active control set selects AppSel {} which no descriptor advertises", app));
        continue;
      }
      if (!first) first = app;
      total += d->media_lane_count;
    }
    if (total > 0) {
      m.media_lane_count = total;
      m.active_app_sel = first;
      m.media_lane_source = "active_control_set";
      return;
    }
  }
  if (!m.applications.empty()) {
    m.media_lane_count = m.applications.front().media_lane_count;
    m.active_app_sel = m.applications.front().app_sel;
    m.media_lane_source = "first_application";
    return;
  }
  m.media_lane_count = 0;
  m.media_lane_source = "none";
  m.notes.push_back("no application descriptor: media lane count unknown");
}

void set_bit_flags(LaneFlags& f, LaneFlag flag, std::uint8_t bitmap) {
  f.bitmap[static_cast<std::size_t>(flag)] = bitmap;
}

}  // namespace

namespace detail {

std::string_view media_type_name(std::uint8_t media_type) noexcept {
  switch (media_type) {
    case 0x00: return "undefined";
    case 0x01: return "multimode fiber";
    case 0x02: return "single-mode fiber";
    case 0x03: return "passive copper";
    case 0x04: return "active cable";
    case 0x05: return "BASE-T";
    default: return media_type >= 0x40 && media_type <= 0x8f ? "custom" : "reserved";
  }
}

std::string host_interface_name(std::uint8_t id) {
  // SFF-8024 Table 4-5 (Ethernet entries and the common CR/BASE-T ones).
  static constexpr std::array<std::string_view, 0x22> kNames{"undefined",
                                                             "1000BASE-CX",
                                                             "XAUI",
                                                             "XFI",
                                                             "SFI",
                                                             "25GAUI C2M",
                                                             "XLAUI C2M",
                                                             "XLPPI",
                                                             "LAUI-2 C2M",
                                                             "50GAUI-2 C2M",
                                                             "50GAUI-1 C2M",
                                                             "CAUI-4 C2M",
                                                             "100GAUI-4 C2M",
                                                             "100GAUI-2 C2M",
                                                             "200GAUI-8 C2M",
                                                             "200GAUI-4 C2M",
                                                             "400GAUI-16 C2M",
                                                             "400GAUI-8 C2M",
                                                             "",
                                                             "10GBASE-CX4",
                                                             "25GBASE-CR CA-L",
                                                             "25GBASE-CR CA-S",
                                                             "25GBASE-CR CA-N",
                                                             "40GBASE-CR4",
                                                             "50GBASE-CR",
                                                             "100GBASE-CR10",
                                                             "100GBASE-CR4",
                                                             "100GBASE-CR2",
                                                             "200GBASE-CR4",
                                                             "400G CR8",
                                                             "1000BASE-T",
                                                             "2.5GBASE-T",
                                                             "5GBASE-T",
                                                             "10GBASE-T"};
  if (id < kNames.size() && !kNames[id].empty()) return std::string(kNames[id]);
  return fmt::format("code 0x{:02x}", id);
}

std::string media_interface_name(std::uint8_t media_type, std::uint8_t id) {
  std::string_view n;
  switch (media_type) {
    case 0x01: {  // SFF-8024 Table 4-6, MMF
      static constexpr std::array<std::string_view, 0x12> kMmf{
          "undefined",    "10GBASE-SW", "10GBASE-SR",    "25GBASE-SR",    "40GBASE-SR4",  "40GE SWDM4",
          "40GE BiDi",    "50GBASE-SR", "100GBASE-SR10", "100GBASE-SR4",  "100GE SWDM4",  "100GE BiDi",
          "100GBASE-SR2", "100G-SR",    "200GBASE-SR4",  "400GBASE-SR16", "400GBASE-SR8", "400G-SR4"};
      if (id < kMmf.size()) n = kMmf[id];
      break;
    }
    case 0x02: {  // SFF-8024 Table 4-7, SMF
      static constexpr std::array<std::string_view, 0x1e> kSmf{
          "undefined",    "10GBASE-LW",   "10GBASE-EW",   "10G-ZW",       "10GBASE-LR",   "10GBASE-ER",
          "10G-ZR",       "25GBASE-LR",   "25GBASE-ER",   "40GBASE-LR4",  "40GBASE-FR",   "50GBASE-FR",
          "50GBASE-LR",   "100GBASE-LR4", "100GBASE-ER4", "100G PSM4",    "100G CWDM4",   "100G 4WDM-10",
          "100G 4WDM-20", "100G 4WDM-40", "100GBASE-DR",  "100G-FR",      "100G-LR",      "200GBASE-DR4",
          "200GBASE-FR4", "200GBASE-LR4", "400GBASE-FR8", "400GBASE-LR8", "400GBASE-DR4", "400G-FR4"};
      if (id < kSmf.size()) n = kSmf[id];
      break;
    }
    case 0x03:  // Table 4-8, passive copper
      n = id == 0x00 ? "undefined" : id == 0x01 ? "copper cable" : id == 0x02 ? "passive loopback" : "";
      break;
    case 0x04:  // Table 4-9, active cable
      switch (id) {
        case 0x00: n = "undefined"; break;
        case 0x01: n = "active cable, BER < 1e-12"; break;
        case 0x02: n = "active cable, BER < 5e-5"; break;
        case 0x03: n = "active cable, BER < 2.6e-4"; break;
        case 0x04: n = "active cable, BER < 1e-6"; break;
        case 0xbf: n = "active loopback"; break;
        default: break;
      }
      break;
    case 0x05: {  // Table 4-10, BASE-T
      static constexpr std::array<std::string_view, 5> kBaseT{"undefined", "1000BASE-T", "2.5GBASE-T", "5GBASE-T",
                                                              "10GBASE-T"};
      if (id < kBaseT.size()) n = kBaseT[id];
      break;
    }
    default: break;
  }
  if (!n.empty()) return std::string(n);
  return fmt::format("code 0x{:02x}", id);
}

}  // namespace detail

Result<DecodedModule> decode_cmis(std::span<const std::byte> linear) {
  if (auto ok = detail::check_paged_image(linear, "CMIS", "lower memory", detail::is_cmis_identifier); !ok) {
    return std::unexpected(ok.error());
  }
  const Bytes b(linear);

  DecodedModule m;
  m.spec = Spec::kCmis;
  m.identifier = b.u8(0);
  m.identifier_name = std::string(identifier_name(m.identifier));
  m.spec_revision = fmt::format("{}.{}", b.u8(kRevision) >> 4, b.u8(kRevision) & 0x0f);
  m.flat_memory = (b.u8(kMemoryModel) & 0x80) != 0;
  const auto state = static_cast<std::uint8_t>((b.u8(kModuleState) >> 1) & 0x7);
  const std::string_view sname = module_state_name(state);
  m.module_state = ModuleState{state, sname.empty() ? fmt::format("reserved ({})", state) : std::string(sname)};

  // Pages: 00h always; 01h, 02h, 10h, 11h of bank 0 only for paged memory, as far as the dump goes.
  const std::size_t upper_in_dump = b.size() / detail::kPageSize - 1;
  const std::size_t upper_used = m.flat_memory ? 1 : std::min<std::size_t>(upper_in_dump, 5);
  static constexpr std::array<std::uint8_t, 5> kPages{0x00, 0x01, 0x02, 0x10, 0x11};
  for (std::size_t i = 0; i < upper_used; ++i) m.pages.push_back(kPages[i]);
  m.ignored_bytes = b.size() - (upper_used + 1) * detail::kPageSize;
  if (m.ignored_bytes > 0) {
    m.notes.push_back(m.flat_memory ? fmt::format("flat memory (byte 2 bit 7): only page 00h exists; {} dump bytes "
                                                  "past it ignored",
                                                  m.ignored_bytes)
                                    : fmt::format("{} dump bytes past page 11h ignored", m.ignored_bytes));
  }
  const bool p01 = upper_used > kSlot01;
  const bool p02 = upper_used > kSlot02;
  const bool p11 = upper_used > kSlot11;

  m.vendor_name = b.ascii(kVendorName, 16);
  m.vendor_oui = b.oui(kVendorOui);
  m.part_number = b.ascii(kVendorPn, 16);
  m.revision = b.ascii(kVendorRev, 2);
  m.serial_number = b.ascii(kVendorSn, 16);
  m.date_code = b.ascii(kDateCode, 8);
  detail::parse_date_code(m);
  m.power_class = static_cast<unsigned>((b.u8(kPowerClass) >> 5) + 1);
  m.max_power_w = b.u8(kMaxPower) * 0.25;
  m.checksums_valid = b.sum(128, kChecksum00 - 1) == b.u8(kChecksum00);

  m.media_type = b.u8(kMediaType);
  m.media_type_name = std::string(detail::media_type_name(*m.media_type));
  m.passive_copper = *m.media_type == 0x03;
  read_applications(b, p01, m);
  media_lanes(b, p11, m);
  if (m.media_lane_count > 8) {
    m.notes.push_back(fmt::format("{} media lanes in use; bank 0 holds lanes 1-8 only", m.media_lane_count));
    m.media_lane_count = 8;
  }
  detail::make_lanes(m, m.media_lane_count);

  // Monitors. Passive copper carries no measurements (its monitor bytes are junk or zero).
  m.monitors_valid = !m.passive_copper;
  if (!m.monitors_valid) {
    m.notes.push_back("monitors not reported: passive copper (media type 03h) has no measurements");
  }
  const std::uint8_t mod_adv = p01 ? b.u8(at(kSlot01, kModuleMonAdv)) : 0x03;
  const std::uint8_t lane_adv = p01 ? b.u8(at(kSlot01, kLaneMonAdv)) : 0x00;
  if (p01) m.rx_power_is_average = (b.u8(at(kSlot01, kRxPowerType)) & 0x10) != 0;
  if (m.monitors_valid) {
    if (mod_adv & 0x01) m.temperature_c = detail::temperature_c(b.s16(kTemperature));
    if (mod_adv & 0x02) m.supply_voltage_v = detail::voltage_v(b.u16(kVcc));
    const std::uint8_t mf = b.u8(kModuleFlags);
    static constexpr std::array<ModuleFlag, 8> kModBits{
        ModuleFlag::kTemperatureHighAlarm,  ModuleFlag::kTemperatureLowAlarm, ModuleFlag::kTemperatureHighWarning,
        ModuleFlag::kTemperatureLowWarning, ModuleFlag::kVccHighAlarm,        ModuleFlag::kVccLowAlarm,
        ModuleFlag::kVccHighWarning,        ModuleFlag::kVccLowWarning};
    for (unsigned bit = 0; bit < 8; ++bit) {
      const bool supported = bit < 4 ? (mod_adv & 0x01) != 0 : (mod_adv & 0x02) != 0;
      if (supported && ((mf >> bit) & 1u) != 0) m.module_flags.push_back(kModBits[bit]);
    }
  }

  // Tx bias scaling factor (page 01h byte 160 bits 4:3): LSB = 2 µA x 1, 2 or 4.
  double bias_scale = 1.0;
  bool bias_known = true;
  if (p01) {
    switch ((lane_adv >> 3) & 0x3) {
      case 0: bias_scale = 1.0; break;
      case 1: bias_scale = 2.0; break;
      case 2: bias_scale = 4.0; break;
      default:
        bias_known = false;
        m.notes.push_back("Tx bias scaling factor is the reserved code 11b: bias not reported");
        break;
    }
  }

  if (p11 && m.monitors_valid) {
    for (Lane& l : m.lanes) {
      const std::size_t i = l.lane - 1;
      if ((lane_adv & 0x01) && bias_known) {
        l.tx_bias_ma = detail::bias_ma(b.u16(at(kSlot11, kMonTxBias + 2 * i))) * bias_scale;
      }
      if (lane_adv & 0x02) {
        detail::set_power(l.tx_power_mw, l.tx_power_dbm, detail::power_mw(b.u16(at(kSlot11, kMonTxPower + 2 * i))));
      }
      if (lane_adv & 0x04) {
        detail::set_power(l.rx_power_mw, l.rx_power_dbm, detail::power_mw(b.u16(at(kSlot11, kMonRxPower + 2 * i))));
      }
    }
    // Latched flags: one byte per flag, bit i = lane i+1 (CMIS 5.2 §8.9.3), each gated by its
    // advertisement in page 01h.
    LaneFlags f;
    const std::uint8_t tx_adv = b.u8(at(kSlot01, kTxFlagsAdv));
    const std::uint8_t rx_adv = b.u8(at(kSlot01, kRxFlagsAdv));
    const auto flag = [&](std::size_t off) { return b.u8(at(kSlot11, off)); };
    if (tx_adv & 0x01) set_bit_flags(f, LaneFlag::kTxFault, flag(kFlagTxFault));
    if (tx_adv & 0x02) set_bit_flags(f, LaneFlag::kTxLos, flag(kFlagTxLos));
    if (tx_adv & 0x04) set_bit_flags(f, LaneFlag::kTxCdrLol, flag(kFlagTxCdrLol));
    if (tx_adv & 0x08) set_bit_flags(f, LaneFlag::kTxAdaptiveEqFault, flag(kFlagTxAdaptEq));
    if (rx_adv & 0x02) set_bit_flags(f, LaneFlag::kRxLos, flag(kFlagRxLos));
    if (rx_adv & 0x04) set_bit_flags(f, LaneFlag::kRxCdrLol, flag(kFlagRxCdrLol));
    static constexpr std::array<LaneFlag, 4> kTxPow{LaneFlag::kTxPowerHighAlarm, LaneFlag::kTxPowerLowAlarm,
                                                    LaneFlag::kTxPowerHighWarning, LaneFlag::kTxPowerLowWarning};
    static constexpr std::array<LaneFlag, 4> kTxBias{LaneFlag::kTxBiasHighAlarm, LaneFlag::kTxBiasLowAlarm,
                                                     LaneFlag::kTxBiasHighWarning, LaneFlag::kTxBiasLowWarning};
    static constexpr std::array<LaneFlag, 4> kRxPow{LaneFlag::kRxPowerHighAlarm, LaneFlag::kRxPowerLowAlarm,
                                                    LaneFlag::kRxPowerHighWarning, LaneFlag::kRxPowerLowWarning};
    for (std::size_t k = 0; k < 4; ++k) {
      if (lane_adv & 0x02) set_bit_flags(f, kTxPow[k], flag(kFlagTxPower + k));
      if (lane_adv & 0x01) set_bit_flags(f, kTxBias[k], flag(kFlagTxBias + k));
      if (lane_adv & 0x04) set_bit_flags(f, kRxPow[k], flag(kFlagRxPower + k));
    }
    detail::apply_lane_flags(m, f);
  } else if (!p11 && !m.flat_memory && m.monitors_valid) {
    m.notes.push_back("page 11h not in the dump: lane monitors and flags not available");
  }

  if (p02) {
    m.thresholds.temperature_c = thresholds(b, at(kSlot02, kThrTemperature), conv_temp);
    m.thresholds.supply_voltage_v = thresholds(b, at(kSlot02, kThrVcc), conv_volt);
    m.thresholds.tx_power_mw = thresholds(b, at(kSlot02, kThrTxPower), conv_power);
    m.thresholds.rx_power_mw = thresholds(b, at(kSlot02, kThrRxPower), conv_power);
    if (bias_known) {
      ThresholdSet t = thresholds(b, at(kSlot02, kThrTxBias), conv_bias);
      t.high_alarm *= bias_scale;
      t.low_alarm *= bias_scale;
      t.high_warning *= bias_scale;
      t.low_warning *= bias_scale;
      m.thresholds.tx_bias_ma = t;
    }
  }
  return m;
}

}  // namespace npo::xcvr
