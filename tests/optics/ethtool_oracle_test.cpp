// SPDX-License-Identifier: Apache-2.0
// The decoded `ethtool -m` outputs of tests/data/decoded_oracles, field by field where we decode
// the same fields. The oracles are text only (no hex), so each test writes the module image the
// oracle's values imply (raw = value / LSB, at the spec offsets) and checks that decoding it
// prints back exactly what ethtool printed: same rounding, same dBm, same sign handling, and
// the known ethtool conventions we deliberately differ on (0 mW -> no dBm instead of -inf;
// 8 CMIS lanes, not 16) stated explicitly.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "optics_test_util.hpp"

namespace {

using npo::xcvr::DecodedModule;
using npo::xcvr::LaneFlag;
using npo::xcvr::ModuleFlag;
using npo::xcvr::ThresholdSet;
using optics_test::ethtool_bias;
using optics_test::ethtool_power;
using optics_test::ethtool_temp;
using optics_test::ethtool_volt;
using optics_test::Image;
using optics_test::leading_number;

using Fields = std::vector<std::pair<std::string, std::string>>;

std::string oracle(const std::string& name) { return optics_test::read_text(optics_test::oracle_dir() / name); }

const std::string& field(const Fields& f, const std::string& key) {
  static const std::string kNone = "<missing>";
  for (const auto& [k, v] : f) {
    if (k == key) return v;
  }
  ADD_FAILURE() << "oracle has no field '" << key << "'";
  return kNone;
}

/// The raw word the module must hold for ethtool to print `want`: the value / LSB, nudged by a
/// count or two when several raws round to the printed value and only one also gives the
/// printed °F or dBm. No raw at all means the printed digits are inconsistent with our units.
template <typename Render>
long raw_for(const std::string& want, double lsb, Render render) {
  const long est = std::lround(leading_number(want) / lsb);
  for (long d : {0L, -1L, 1L, -2L, 2L, -3L, 3L}) {
    if (render(est + d) == want) return est + d;
  }
  ADD_FAILURE() << "no raw value prints as '" << want << "'";
  return est;
}
int raw_temp(const std::string& v) {
  return static_cast<int>(raw_for(v, 1.0 / 256, [](long r) { return ethtool_temp(static_cast<double>(r) / 256); }));
}
unsigned raw_volt(const std::string& v) {
  return static_cast<unsigned>(raw_for(v, 1e-4, [](long r) { return ethtool_volt(static_cast<double>(r) * 1e-4); }));
}
unsigned raw_bias(const std::string& v) {
  return static_cast<unsigned>(raw_for(v, 0.002, [](long r) { return ethtool_bias(static_cast<double>(r) * 0.002); }));
}
unsigned raw_power(const std::string& v) {
  return static_cast<unsigned>(raw_for(v, 1e-4, [](long r) {
    const double mw = static_cast<double>(r) * 1e-4;
    return ethtool_power(mw, npo::xcvr::mw_to_dbm(mw));
  }));
}

const std::vector<std::string> kLevels{"high alarm", "low alarm", "high warning", "low warning"};

/// Threshold name of ethtool ("Laser output power") -> our threshold set and its printer.
struct ThresholdKind {
  const char* ethtool_name;
  std::optional<ThresholdSet> npo::xcvr::Thresholds::*member;
  std::string (*print)(double);
};
std::string print_power(double mw) { return ethtool_power(mw, npo::xcvr::mw_to_dbm(mw)); }
const std::vector<ThresholdKind> kThresholdKinds{
    {"Laser bias current", &npo::xcvr::Thresholds::tx_bias_ma, ethtool_bias},
    {"Laser output power", &npo::xcvr::Thresholds::tx_power_mw, print_power},
    {"Module temperature", &npo::xcvr::Thresholds::temperature_c, ethtool_temp},
    {"Module voltage", &npo::xcvr::Thresholds::supply_voltage_v, ethtool_volt},
    {"Laser rx power", &npo::xcvr::Thresholds::rx_power_mw, print_power},
};

double level(const ThresholdSet& t, std::size_t i) {
  return i == 0 ? t.high_alarm : i == 1 ? t.low_alarm : i == 2 ? t.high_warning : t.low_warning;
}

/// Our rendering of every threshold line of an ethtool listing, keyed by ethtool's name.
std::map<std::string, std::string> our_thresholds(const DecodedModule& m) {
  std::map<std::string, std::string> out;
  for (const auto& k : kThresholdKinds) {
    const auto& t = m.thresholds.*(k.member);
    if (!t) continue;
    for (std::size_t i = 0; i < 4; ++i)
      out[fmt::format("{} {} threshold", k.ethtool_name, kLevels[i])] = k.print(level(*t, i));
  }
  return out;
}

/// Writes the 20 thresholds of an ethtool listing at `base` in the SFF order temperature, Vcc,
/// (SFF-8472: bias, Tx, Rx at +16/+24/+32) or (SFF-8636 page 03h: Rx, bias, Tx at +48/+56/+64).
void write_thresholds(Image& im, const Fields& f, std::size_t temp, std::size_t vcc, std::size_t bias, std::size_t tx,
                      std::size_t rx) {
  for (std::size_t i = 0; i < 4; ++i) {
    const std::string lv = kLevels[i] + " threshold";
    im.s16(temp + 2 * i, raw_temp(field(f, "Module temperature " + lv)));
    im.u16(vcc + 2 * i, raw_volt(field(f, "Module voltage " + lv)));
    im.u16(bias + 2 * i, raw_bias(field(f, "Laser bias current " + lv)));
    im.u16(tx + 2 * i, raw_power(field(f, "Laser output power " + lv)));
    im.u16(rx + 2 * i, raw_power(field(f, "Laser rx power " + lv)));
  }
}

void expect_thresholds_match(const DecodedModule& m, const Fields& f) {
  const auto ours = our_thresholds(m);
  EXPECT_EQ(ours.size(), 20u);
  std::size_t compared = 0;
  for (const auto& [k, v] : f) {
    if (k.find(" threshold") == std::string::npos) continue;
    ASSERT_TRUE(ours.count(k)) << k;
    EXPECT_EQ(ours.at(k), v) << k;
    ++compared;
  }
  EXPECT_EQ(compared, 20u);
}

/// An SFF-8472 image carrying what an ethtool -m listing of an SFP shows.
Image sff8472_from_listing(const Fields& f) {
  Image im = optics_test::sff8472_ddm();
  im.str(20, field(f, "Vendor name"), 16);
  unsigned a = 0, b = 0, c = 0;
  EXPECT_EQ(std::sscanf(field(f, "Vendor OUI").c_str(), "%x:%x:%x", &a, &b, &c), 3);
  im.u8(37, a);
  im.u8(38, b);
  im.u8(39, c);
  im.str(40, field(f, "Vendor PN"), 16);
  im.str(56, field(f, "Vendor rev"), 4);
  im.str(68, field(f, "Vendor SN"), 16);
  im.str(84, field(f, "Date code"), 8);
  im.u8(92, field(f, "Optical diagnostics support") == "Yes" ? 0x68 : 0x00);
  im.u8(93, field(f, "Alarm/warning flags implemented") == "Yes" ? 0xf0 : 0x00);
  const std::size_t a2 = 256;
  write_thresholds(im, f, a2 + 0, a2 + 8, a2 + 16, a2 + 24, a2 + 32);
  im.s16(a2 + 96, raw_temp(field(f, "Module temperature")));
  im.u16(a2 + 98, raw_volt(field(f, "Module voltage")));
  im.u16(a2 + 100, raw_bias(field(f, "Laser bias current")));
  im.u16(a2 + 102, raw_power(field(f, "Laser output power")));
  im.u16(a2 + 104, raw_power(field(f, "Receiver signal average optical power")));
  return im;
}

void check_sff8472_listing(const std::string& file) {
  const Fields f = optics_test::oracle_fields(oracle(file));
  const Image im = sff8472_from_listing(f);
  const auto r = im.decode();
  ASSERT_TRUE(r.has_value()) << r.error().to_string();
  const DecodedModule& m = *r;
  EXPECT_EQ(fmt::format("0x{:02x}", m.identifier), field(f, "Identifier").substr(0, 4));
  EXPECT_EQ(m.vendor_name, field(f, "Vendor name"));
  EXPECT_EQ(m.vendor_oui, field(f, "Vendor OUI"));
  EXPECT_EQ(m.part_number, field(f, "Vendor PN"));
  EXPECT_EQ(m.revision, field(f, "Vendor rev"));
  EXPECT_EQ(m.serial_number, field(f, "Vendor SN"));
  EXPECT_EQ(m.date_code, field(f, "Date code"));
  EXPECT_TRUE(m.monitors_valid);
  ASSERT_EQ(m.lanes.size(), 1u);
  const auto& l = m.lanes[0];
  EXPECT_EQ(ethtool_bias(l.tx_bias_ma.value_or(-1)), field(f, "Laser bias current"));
  EXPECT_EQ(ethtool_power(l.tx_power_mw.value_or(-1), l.tx_power_dbm), field(f, "Laser output power"));
  EXPECT_EQ(ethtool_power(l.rx_power_mw.value_or(-1), l.rx_power_dbm),
            field(f, "Receiver signal average optical power"));
  EXPECT_EQ(ethtool_temp(m.temperature_c.value_or(-99)), field(f, "Module temperature"));
  EXPECT_EQ(ethtool_volt(m.supply_voltage_v.value_or(-1)), field(f, "Module voltage"));
  // The 20 alarm/warning flags ethtool lists.
  const std::map<std::string, LaneFlag> lane_names{{"Laser bias current high alarm", LaneFlag::kTxBiasHighAlarm},
                                                   {"Laser bias current low alarm", LaneFlag::kTxBiasLowAlarm},
                                                   {"Laser bias current high warning", LaneFlag::kTxBiasHighWarning},
                                                   {"Laser bias current low warning", LaneFlag::kTxBiasLowWarning},
                                                   {"Laser output power high alarm", LaneFlag::kTxPowerHighAlarm},
                                                   {"Laser output power low alarm", LaneFlag::kTxPowerLowAlarm},
                                                   {"Laser output power high warning", LaneFlag::kTxPowerHighWarning},
                                                   {"Laser output power low warning", LaneFlag::kTxPowerLowWarning},
                                                   {"Laser rx power high alarm", LaneFlag::kRxPowerHighAlarm},
                                                   {"Laser rx power low alarm", LaneFlag::kRxPowerLowAlarm},
                                                   {"Laser rx power high warning", LaneFlag::kRxPowerHighWarning},
                                                   {"Laser rx power low warning", LaneFlag::kRxPowerLowWarning}};
  const std::map<std::string, ModuleFlag> mod_names{
      {"Module temperature high alarm", ModuleFlag::kTemperatureHighAlarm},
      {"Module temperature low alarm", ModuleFlag::kTemperatureLowAlarm},
      {"Module temperature high warning", ModuleFlag::kTemperatureHighWarning},
      {"Module temperature low warning", ModuleFlag::kTemperatureLowWarning},
      {"Module voltage high alarm", ModuleFlag::kVccHighAlarm},
      {"Module voltage low alarm", ModuleFlag::kVccLowAlarm},
      {"Module voltage high warning", ModuleFlag::kVccHighWarning},
      {"Module voltage low warning", ModuleFlag::kVccLowWarning}};
  ASSERT_TRUE(m.lane_flags.has_value());
  for (const auto& [name, flag] : lane_names) {
    EXPECT_EQ(m.lane_flags->test(flag, 1) ? "On" : "Off", field(f, name)) << name;
  }
  for (const auto& [name, flag] : mod_names) {
    const bool on = std::find(m.module_flags.begin(), m.module_flags.end(), flag) != m.module_flags.end();
    EXPECT_EQ(on ? "On" : "Off", field(f, name)) << name;
  }
  expect_thresholds_match(m, f);
}

TEST(EthtoolOracle, Sff8472FsSfp10gsr85LiveDiagnostics) {
  check_sff8472_listing("ethtool_m_sff8472_fs_SFP-10GSR-85_i40e28_sfp_10gsr85.txt");
  // Spot checks in plain numbers: a negative threshold and a Tx alarm threshold in dBm.
  const Fields f = optics_test::oracle_fields(oracle("ethtool_m_sff8472_fs_SFP-10GSR-85_i40e28_sfp_10gsr85.txt"));
  const auto m = sff8472_from_listing(f).decode();
  ASSERT_TRUE(m.has_value());
  EXPECT_DOUBLE_EQ(m->thresholds.temperature_c->low_alarm, -10.0);
  EXPECT_EQ(fmt::format("{:.2f}", *npo::xcvr::mw_to_dbm(m->thresholds.tx_power_mw->high_alarm)), "2.00");
  EXPECT_EQ(fmt::format("{:.2f}", *npo::xcvr::mw_to_dbm(m->thresholds.rx_power_mw->low_alarm)), "-14.10");
}

TEST(EthtoolOracle, Sff8472FsSfp10gsr85ZeroDiagnosticsNoInfinity) {
  // A2h diagnostics all zero: ethtool prints "0.0000 mW / -inf dBm"; we keep 0 mW and leave the
  // dBm absent (the printer here renders absent as ethtool's "-inf" to compare the rest).
  check_sff8472_listing("ethtool_m_sff8472_fs_SFP-10GSR-85_ixgbe418_sfp_10gsr85.txt");
  const Fields f = optics_test::oracle_fields(oracle("ethtool_m_sff8472_fs_SFP-10GSR-85_ixgbe418_sfp_10gsr85.txt"));
  const auto m = sff8472_from_listing(f).decode();
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(field(f, "Laser output power"), "0.0000 mW / -inf dBm");
  EXPECT_EQ(m->lanes[0].tx_power_mw, 0.0);
  EXPECT_FALSE(m->lanes[0].tx_power_dbm.has_value());
  EXPECT_FALSE(m->lanes[0].rx_power_dbm.has_value());
  EXPECT_EQ(m->thresholds.rx_power_mw->high_warning, 0.0);
  EXPECT_FALSE(npo::xcvr::mw_to_dbm(m->thresholds.rx_power_mw->high_warning).has_value());
}

/// Splits a multi-read oracle at each "# ethtool -m" command line.
std::vector<Fields> reads(const std::string& text, const std::string& marker) {
  std::vector<Fields> out;
  std::size_t pos = text.find(marker);
  while (pos != std::string::npos) {
    const std::size_t next = text.find(marker, pos + marker.size());
    out.push_back(optics_test::oracle_fields(text.substr(pos, next == std::string::npos ? next : next - pos)));
    pos = next;
  }
  return out;
}

TEST(EthtoolOracle, CmisQsfpDdSwp11PowerPerLane) {
  const auto blocks = reads(oracle("ethtool_m_cmis_qsfpdd_swp11_power_per_lane.txt"), "# ethtool -m swp11");
  ASSERT_EQ(blocks.size(), 3u);  // ModuleReady, ModuleLowPwr, ModuleReady
  for (std::size_t r = 0; r < blocks.size(); ++r) {
    const Fields& f = blocks[r];
    Image im = optics_test::cmis_paged();
    im.u8(88, 0x88);  // AppSel 1: 8 host lanes, 8 media lanes (an 8-lane optical QSFP-DD)
    unsigned state = 0;
    ASSERT_EQ(std::sscanf(field(f, "Module State").c_str(), "0x%x", &state), 1);
    im.u8(3, state << 1);
    for (std::size_t ch = 1; ch <= 8; ++ch) {
      im.u16(optics_test::p11(154 + 2 * (ch - 1)),
             raw_power(field(f, fmt::format("Transmit avg optical power (Channel {})", ch))));
      im.u16(optics_test::p11(186 + 2 * (ch - 1)),
             raw_power(field(f, fmt::format("Rcvr signal avg optical power (Channel {})", ch))));
    }
    const auto m = im.decode();
    ASSERT_TRUE(m.has_value()) << m.error().to_string();
    EXPECT_EQ(fmt::format("0x{:02x} ({})", m->module_state->code, m->module_state->name), field(f, "Module State"));
    EXPECT_EQ(m->identifier, 0x18);
    // One bank of 8 lanes: exactly 8 channels.
    ASSERT_EQ(m->lanes.size(), 8u) << "read " << r;
    for (std::size_t ch = 1; ch <= 8; ++ch) {
      const auto& l = m->lanes[ch - 1];
      EXPECT_EQ(ethtool_power(l.tx_power_mw.value_or(-1), l.tx_power_dbm),
                field(f, fmt::format("Transmit avg optical power (Channel {})", ch)))
          << "read " << r << " channel " << ch;
      EXPECT_EQ(ethtool_power(l.rx_power_mw.value_or(-1), l.rx_power_dbm),
                field(f, fmt::format("Rcvr signal avg optical power (Channel {})", ch)))
          << "read " << r << " channel " << ch;
    }
    // ethtool's channels 9-16 repeat 1-8 (a bank 1 this module does not have): not lanes.
    for (std::size_t ch = 9; ch <= 16; ++ch) {
      EXPECT_EQ(field(f, fmt::format("Transmit avg optical power (Channel {})", ch)),
                field(f, fmt::format("Transmit avg optical power (Channel {})", ch - 8)));
    }
  }
  // In ModuleLowPwr every lane reads the minimum code: 0.0001 mW / -40.00 dBm, not 0 / -inf.
  EXPECT_EQ(field(blocks[1], "Module State"), "0x01 (ModuleLowPwr)");
  EXPECT_EQ(field(blocks[1], "Transmit avg optical power (Channel 1)"), "0.0001 mW / -40.00 dBm");
}

TEST(EthtoolOracle, Sff8636Swp13Page03ThresholdsAfterFix) {
  const std::string text = oracle("ethtool_m_sff8636_swp13_page03_thresholds_before_after.txt");
  const auto after_at = text.find("After patch:");
  ASSERT_NE(after_at, std::string::npos);
  const Fields before = optics_test::oracle_fields(text.substr(0, after_at));
  const Fields after = optics_test::oracle_fields(text.substr(after_at));
  // Page 03h at linear 512: thresholds at page offsets 128 (temperature), 144 (Vcc), 176 (Rx),
  // 184 (bias), 192 (Tx), i.e. linear 512 + offset - 128.
  Image im = optics_test::sff8636_paged();
  write_thresholds(im, after, 512 + 0, 512 + 16, 512 + 56, 512 + 64, 512 + 48);
  const auto m = im.decode();
  ASSERT_TRUE(m.has_value()) << m.error().to_string();
  expect_thresholds_match(*m, after);
  EXPECT_DOUBLE_EQ(m->thresholds.temperature_c->low_alarm, -10.0);
  // The "Before" block (page 03h read off by 128) is a negative oracle: apart from a 0.00 °C
  // coincidence, none of its values is ours.
  const auto ours = our_thresholds(*m);
  std::size_t same = 0;
  for (const auto& [k, v] : before) {
    if (ours.count(k) && ours.at(k) == v) ++same;
  }
  EXPECT_LE(same, 1u);
}

}  // namespace
