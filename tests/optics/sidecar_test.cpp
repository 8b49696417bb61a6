// SPDX-License-Identifier: Apache-2.0
// Every dump of tests/data/eeprom decodes to the values its sidecar .md states. Values below
// are transcribed from the sidecars ("Authoritative values" and "Computed" sections), at the
// precision the sidecar gives them (4 decimals for mW/°C/V, 3 for mA, 2 for dBm).
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "optics_test_util.hpp"

namespace {

using npo::xcvr::DecodedModule;
using npo::xcvr::LaneFlag;
using npo::xcvr::Spec;
using optics_test::dbm2;
using optics_test::decode_file;

constexpr double k4 = 5.1e-5;  // half a unit of the 4th decimal
constexpr double k3 = 5.1e-4;  // 3rd decimal
constexpr double k2 = 5.1e-3;  // 2nd decimal

void expect_near(const std::optional<double>& v, double want, double tol, const std::string& what) {
  ASSERT_TRUE(v.has_value()) << what << " absent, want " << want;
  EXPECT_NEAR(*v, want, tol) << what;
}

void expect_thresholds(const std::optional<npo::xcvr::ThresholdSet>& t, std::array<double, 4> want, double tol,
                       const std::string& what) {
  ASSERT_TRUE(t.has_value()) << what;
  EXPECT_NEAR(t->high_alarm, want[0], tol) << what << " high alarm";
  EXPECT_NEAR(t->low_alarm, want[1], tol) << what << " low alarm";
  EXPECT_NEAR(t->high_warning, want[2], tol) << what << " high warning";
  EXPECT_NEAR(t->low_warning, want[3], tol) << what << " low warning";
}

/// Per-lane values of a 4-lane SFF-8636 sidecar: rx mW, rx dBm, bias mA, tx mW, tx dBm.
void expect_lanes(const DecodedModule& m, std::array<double, 4> rx_mw, std::array<const char*, 4> rx_dbm,
                  std::array<double, 4> bias, std::optional<std::array<double, 4>> tx_mw,
                  std::array<const char*, 4> tx_dbm) {
  ASSERT_EQ(m.lanes.size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) {
    const auto& l = m.lanes[i];
    const std::string lane = "lane " + std::to_string(i + 1);
    EXPECT_EQ(l.lane, i + 1);
    expect_near(l.rx_power_mw, rx_mw[i], k4, lane + " rx mW");
    EXPECT_EQ(dbm2(l.rx_power_dbm), rx_dbm[i]) << lane;
    expect_near(l.tx_bias_ma, bias[i], k3, lane + " bias");
    if (tx_mw) {
      expect_near(l.tx_power_mw, (*tx_mw)[i], k4, lane + " tx mW");
      EXPECT_EQ(dbm2(l.tx_power_dbm), tx_dbm[i]) << lane;
    } else {
      EXPECT_FALSE(l.tx_power_mw.has_value()) << lane << ": Tx power is not monitored";
    }
  }
}

std::uint16_t raw16(const std::vector<std::byte>& b, std::size_t off) {
  return static_cast<std::uint16_t>((std::to_integer<unsigned>(b[off]) << 8) | std::to_integer<unsigned>(b[off + 1]));
}

// ---- CMIS ----------------------------------------------------------------------------------

TEST(Sidecar, CmisAmphenolNdyyyf0001FlatPassiveCopper) {
  const auto m = decode_file("cmis_qsfpdd_amphenol_NDYYYF-0001_400G-CR8-DAC_page00.hex");
  EXPECT_EQ(m.spec, Spec::kCmis);
  EXPECT_EQ(m.identifier, 0x18);
  EXPECT_EQ(m.identifier_name, "QSFP-DD");
  EXPECT_EQ(m.spec_revision, "3.0");
  EXPECT_EQ(m.vendor_name, "Amphenol");
  EXPECT_EQ(m.part_number, "NDYYYF-0001");
  EXPECT_EQ(m.vendor_oui, "78:a7:14");
  EXPECT_EQ(m.revision, "D");
  EXPECT_EQ(m.date_code, "190426");
  EXPECT_EQ(m.manufacture_date, "2019-04-26");
  EXPECT_EQ(m.serial_number.rfind("REDACTED", 0), 0u) << m.serial_number;
  EXPECT_TRUE(m.flat_memory);
  EXPECT_EQ(m.pages, std::vector<std::uint8_t>{0x00});
  ASSERT_TRUE(m.module_state.has_value());
  EXPECT_EQ(m.module_state->code, 0);  // byte 3 = 0x01: state field 0
  // Temperature/Vcc bytes are 0: "not supported", not 0 °C / 0 V.
  EXPECT_FALSE(m.temperature_c.has_value());
  EXPECT_FALSE(m.supply_voltage_v.has_value());
  EXPECT_FALSE(m.monitors_valid);
  EXPECT_TRUE(m.passive_copper);
  EXPECT_EQ(m.media_type, 0x03);
  EXPECT_EQ(m.max_power_w, 0.25);  // byte 201 = 0x01
  const std::array<std::uint8_t, 8> hosts{0x1d, 0x1c, 0x1b, 0x18, 0x1a, 0x16, 0x15, 0x14};
  ASSERT_EQ(m.applications.size(), 8u);
  for (std::size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(m.applications[i].app_sel, i + 1);
    EXPECT_EQ(m.applications[i].host_interface_id, hosts[i]);
    EXPECT_EQ(m.applications[i].media_interface_id, 0x01);
    EXPECT_EQ(m.applications[i].host_lane_count, 8);
    EXPECT_EQ(m.applications[i].media_lane_count, 8);
  }
  EXPECT_EQ(m.applications[0].host_interface, "400G CR8");
  EXPECT_EQ(m.media_lane_count, 8u);
  EXPECT_EQ(m.lanes.size(), 8u);
  EXPECT_EQ(m.checksums_valid, true);
}

TEST(Sidecar, CmisCisco68103205Paged) {
  const auto bytes = optics_test::load("cmis_qsfpdd_cisco_68-103205-02_page00.hex");
  const auto m = decode_file("cmis_qsfpdd_cisco_68-103205-02_page00.hex");
  EXPECT_EQ(m.spec, Spec::kCmis);
  EXPECT_EQ(m.identifier, 0x18);
  EXPECT_EQ(m.vendor_name, "CISCO");  // the source test's assertion
  EXPECT_EQ(m.spec_revision, "4.0");
  EXPECT_FALSE(m.flat_memory);
  ASSERT_TRUE(m.module_state.has_value());
  EXPECT_EQ(m.module_state->code, 3);
  EXPECT_EQ(m.module_state->name, "ModuleReady");
  EXPECT_EQ(m.part_number, "68-103205-02");
  EXPECT_EQ(m.revision, "2");
  EXPECT_EQ(m.vendor_oui, "00:06:f6");
  EXPECT_EQ(m.date_code, "221018");
  EXPECT_EQ(m.power_class, 8u);  // byte 200 = 0xe0
  EXPECT_EQ(m.max_power_w, 30.0);
  EXPECT_EQ(m.media_type, 0x03);
  // The sidecar's 23.0000 °C / 3.3280 V are what bytes 14-17 hold...
  EXPECT_EQ(raw16(bytes, 14), 0x1700);
  EXPECT_EQ(raw16(bytes, 16), 0x8200);
  // ...but media type 03h says passive copper, and no page 01h advertises monitors: policy is
  // to report no measurement from a passive copper module (see PassiveCopperMonitorJunk...).
  EXPECT_FALSE(m.monitors_valid);
  EXPECT_FALSE(m.temperature_c.has_value());
  // Descriptors 1-7 are all zero (host ID 00h, undefined); the list goes on to AppSel 8.
  ASSERT_EQ(m.applications.size(), 1u);
  EXPECT_EQ(m.applications[0].app_sel, 8);
  EXPECT_EQ(m.applications[0].host_interface_id, 0x11);
  EXPECT_EQ(m.applications[0].media_interface_id, 0x00);
  EXPECT_EQ(m.applications[0].host_lane_count, 8);
  EXPECT_EQ(m.applications[0].media_lane_count, 8);
  EXPECT_EQ(m.media_lane_count, 8u);
  EXPECT_EQ(m.checksums_valid, true);
}

TEST(Sidecar, CmisInnolightTDp4cnh400gDr4) {
  const auto m = decode_file("cmis_qsfpdd_innolight_T-DP4CNH-N00_400G-DR4_page00.hex");
  EXPECT_EQ(m.spec, Spec::kCmis);
  EXPECT_EQ(m.vendor_name, "INNOLIGHT");
  EXPECT_EQ(m.part_number, "T-DP4CNH-N00");
  EXPECT_EQ(m.spec_revision, "3.0");
  EXPECT_FALSE(m.flat_memory);
  ASSERT_TRUE(m.module_state.has_value());
  EXPECT_EQ(m.module_state->name, "ModuleReady");
  expect_near(m.temperature_c, 59.8398, k4, "temperature");
  expect_near(m.supply_voltage_v, 3.2880, k4, "Vcc");
  EXPECT_EQ(m.media_type, 0x02);
  ASSERT_EQ(m.applications.size(), 1u);  // descriptor 2 starts with FFh
  const auto& a = m.applications[0];
  EXPECT_EQ(a.host_interface_id, 0x11);
  EXPECT_EQ(a.host_interface, "400GAUI-8 C2M");
  EXPECT_EQ(a.media_interface_id, 0x1c);
  EXPECT_EQ(a.media_interface, "400GBASE-DR4");
  EXPECT_EQ(a.host_lane_count, 8);
  EXPECT_EQ(a.media_lane_count, 4);
  EXPECT_EQ(a.host_lane_assignment, 0x01);
  EXPECT_EQ(m.vendor_oui, "44:7c:7f");
  EXPECT_EQ(m.revision, "1B");
  // "20190312": 4-digit year, not YYMMDD: kept raw, no date made up.
  EXPECT_EQ(m.date_code, "20190312");
  EXPECT_FALSE(m.manufacture_date.has_value());
  EXPECT_EQ(m.power_class, 6u);
  EXPECT_EQ(m.max_power_w, 12.0);
  EXPECT_EQ(m.media_lane_count, 4u);
  EXPECT_EQ(m.checksums_valid, true);
}

// ---- SFF-8472 ------------------------------------------------------------------------------

TEST(Sidecar, Sff8472FinisarFtlf8536p4bclA0Only) {
  const auto m = decode_file("sff8472_sfp28_finisar_FTLF8536P4BCL_25G-SR_A0.hex");
  EXPECT_EQ(m.spec, Spec::kSff8472);
  EXPECT_EQ(m.identifier, 0x03);
  EXPECT_EQ(m.vendor_name, "FINISAR CORP.");
  EXPECT_EQ(m.part_number, "FTLF8536P4BCL");
  EXPECT_EQ(m.vendor_oui, "00:90:65");
  EXPECT_EQ(m.revision, "A");
  EXPECT_EQ(m.date_code, "161225");
  EXPECT_EQ(m.spec_revision, "0x08");
  EXPECT_EQ(m.pages, std::vector<std::uint8_t>{0xa0});  // DDM advertised, but no A2h in the dump
  EXPECT_FALSE(m.monitors_valid);
  EXPECT_EQ(m.lanes.size(), 1u);
  EXPECT_EQ(m.checksums_valid, true);
}

TEST(Sidecar, Sff8472Brocade1000BaseTNoDom) {
  const auto m = decode_file("sff8472_sfp_brocade_57-1000042-02_1000BASE-T_A0.hex");
  EXPECT_EQ(m.spec, Spec::kSff8472);
  EXPECT_EQ(m.vendor_name, "BROCADE");
  EXPECT_EQ(m.vendor_oui, "00:05:1e");
  EXPECT_EQ(m.part_number, "57-1000042-02");
  EXPECT_EQ(m.revision, "");
  EXPECT_EQ(m.date_code, "181121");
  EXPECT_EQ(m.media_type_name, "BASE-T");
  // Byte 92 = 0x00: no A2h; no DOM may be shown.
  EXPECT_FALSE(m.monitors_valid);
  EXPECT_FALSE(m.temperature_c.has_value());
  EXPECT_FALSE(m.thresholds.temperature_c.has_value());
  EXPECT_EQ(m.checksums_valid, true);
}

TEST(Sidecar, Sff8472FinisarFtlx8571d3bclA0A2) {
  const auto m = decode_file("sff8472_sfp_finisar_FTLX8571D3BCL_10G-SR_A0A2.hex");
  EXPECT_EQ(m.vendor_name, "FINISAR CORP.");
  EXPECT_EQ(m.part_number, "FTLX8571D3BCL");
  EXPECT_EQ(m.vendor_oui, "00:90:65");
  EXPECT_EQ(m.revision, "A");
  EXPECT_EQ(m.date_code, "151029");
  EXPECT_EQ(m.pages, (std::vector<std::uint8_t>{0xa0, 0xa2}));
  EXPECT_TRUE(m.monitors_valid);
  expect_thresholds(m.thresholds.temperature_c, {78.00, -13.00, 73.00, -8.00}, k2, "temperature");
  expect_thresholds(m.thresholds.supply_voltage_v, {3.7000, 2.9000, 3.6000, 3.0000}, k4, "Vcc");
  expect_thresholds(m.thresholds.tx_bias_ma, {13.200, 4.000, 12.600, 5.000}, k3, "bias");
  expect_thresholds(m.thresholds.tx_power_mw, {1.0000, 0.2512, 0.7943, 0.3162}, k4, "Tx power");
  expect_thresholds(m.thresholds.rx_power_mw, {1.0000, 0.0100, 0.7943, 0.0158}, k4, "Rx power");
  expect_near(m.temperature_c, 20.0078, k4, "temperature");
  expect_near(m.supply_voltage_v, 3.3201, k4, "Vcc");
  ASSERT_EQ(m.lanes.size(), 1u);
  expect_near(m.lanes[0].tx_bias_ma, 6.836, k3, "bias");
  expect_near(m.lanes[0].tx_power_mw, 0.6053, k4, "Tx mW");
  EXPECT_EQ(dbm2(m.lanes[0].tx_power_dbm), "-2.18");
  expect_near(m.lanes[0].rx_power_mw, 0.5511, k4, "Rx mW");
  EXPECT_EQ(dbm2(m.lanes[0].rx_power_dbm), "-2.59");
  EXPECT_EQ(m.checksums_valid, true);  // CC_BASE, CC_EXT and CC_DMI
}

TEST(Sidecar, Sff8472FlexoptixPB169610Da) {
  const auto m = decode_file("sff8472_sfp_flexoptix_P.B1696.10.DA_10G-LR_A0A2.hex");
  EXPECT_EQ(m.vendor_name, "FLEXOPTIX");
  EXPECT_EQ(m.part_number, "P.B1696.10.DA");
  EXPECT_EQ(m.revision, "A");
  EXPECT_EQ(m.manufacture_date, "2019-12-18");
  // The source library asserts 20:00:00 (it reads offset 0x23); SFF-8472 puts the OUI at 37-39.
  EXPECT_EQ(m.vendor_oui, "00:02:c9");
  EXPECT_NE(m.vendor_oui, "20:00:00");
  EXPECT_TRUE(m.monitors_valid);
  expect_thresholds(m.thresholds.temperature_c, {90.00, -25.00, 85.00, -20.00}, k2, "temperature");
  expect_thresholds(m.thresholds.supply_voltage_v, {3.6000, 3.0000, 3.5000, 3.0500}, k4, "Vcc");
  expect_thresholds(m.thresholds.tx_bias_ma, {90.000, 2.000, 80.000, 3.000}, k3, "bias");
  expect_thresholds(m.thresholds.tx_power_mw, {1.7783, 0.1995, 1.4125, 0.2512}, k4, "Tx power");
  expect_thresholds(m.thresholds.rx_power_mw, {1.2589, 0.0251, 1.1220, 0.0316}, k4, "Rx power");
  expect_near(m.temperature_c, 25.5430, k4, "temperature");
  expect_near(m.supply_voltage_v, 3.2545, k4, "Vcc");
  ASSERT_EQ(m.lanes.size(), 1u);
  expect_near(m.lanes[0].tx_bias_ma, 27.872, k3, "bias");
  expect_near(m.lanes[0].tx_power_mw, 0.6361, k4, "Tx mW");
  EXPECT_EQ(dbm2(m.lanes[0].tx_power_dbm), "-1.96");
  expect_near(m.lanes[0].rx_power_mw, 0.5518, k4, "Rx mW");
  EXPECT_EQ(dbm2(m.lanes[0].rx_power_dbm), "-2.58");
  EXPECT_EQ(m.checksums_valid, true);
}

TEST(Sidecar, Sff8472OemSfp10gbLr) {
  const auto m = decode_file("sff8472_sfp_oem_SFP-10GB-LR_A0A2.hex");
  EXPECT_EQ(m.vendor_name, "OEM");
  EXPECT_EQ(m.vendor_oui, "00:17:6a");
  EXPECT_EQ(m.part_number, "SFP-10GB-LR");
  EXPECT_EQ(m.revision, "B4");
  EXPECT_EQ(m.date_code, "150703");
  EXPECT_TRUE(m.monitors_valid);
  // Asserted by the source test: "34.54" °C, "3.29" V, 35.994 mA, Rx 0.0 mW.
  EXPECT_EQ(fmt::format("{:.2f}", m.temperature_c.value_or(-99)), "34.54");
  EXPECT_EQ(fmt::format("{:.2f}", m.supply_voltage_v.value_or(-99)), "3.29");
  expect_near(m.temperature_c, 34.5391, k4, "temperature");
  expect_near(m.supply_voltage_v, 3.2893, k4, "Vcc");
  ASSERT_EQ(m.lanes.size(), 1u);
  expect_near(m.lanes[0].tx_bias_ma, 35.994, k3, "bias");
  expect_near(m.lanes[0].tx_power_mw, 0.5171, k4, "Tx mW");
  EXPECT_EQ(dbm2(m.lanes[0].tx_power_dbm), "-2.86");
  expect_near(m.lanes[0].rx_power_mw, 0.0, 1e-12, "Rx mW");
  EXPECT_FALSE(m.lanes[0].rx_power_dbm.has_value()) << "0 mW has no finite dBm";
  expect_thresholds(m.thresholds.temperature_c, {90.00, -10.00, 85.00, -5.00}, k2, "temperature");
  expect_thresholds(m.thresholds.supply_voltage_v, {3.6300, 2.9700, 3.4600, 3.1300}, k4, "Vcc");
  expect_thresholds(m.thresholds.tx_bias_ma, {100.000, 2.000, 80.000, 4.000}, k3, "bias");
  expect_thresholds(m.thresholds.tx_power_mw, {1.3464, 0.1267, 1.1220, 0.1584}, k4, "Tx power");
  expect_thresholds(m.thresholds.rx_power_mw, {2.0000, 0.0158, 1.0000, 0.0316}, k4, "Rx power");
  // No light: latched Rx power low alarm + warning (A2h 113/117 bit 6), RX_LOS state (110 bit 1).
  EXPECT_EQ(m.lanes[0].flags,
            (std::vector<LaneFlag>{LaneFlag::kRxPowerLowAlarm, LaneFlag::kRxPowerLowWarning, LaneFlag::kRxLos}));
  EXPECT_EQ(m.checksums_valid, true);
}

// ---- SFF-8636 ------------------------------------------------------------------------------

TEST(Sidecar, Sff8636DellWg8c4Aoc) {
  const auto m = decode_file("sff8636_qsfp28_dell_WG8C4_100G-AOC_page00.hex");
  EXPECT_EQ(m.spec, Spec::kSff8636);
  EXPECT_EQ(m.vendor_name, "DELL");
  EXPECT_EQ(m.part_number, "WG8C4");
  EXPECT_EQ(m.vendor_oui, "ac:4a:fe");
  EXPECT_EQ(m.revision, "A0");
  EXPECT_EQ(m.date_code, "180717");
  expect_near(m.temperature_c, 42.0000, k4, "temperature");
  expect_near(m.supply_voltage_v, 3.3096, k4, "Vcc");
  // Diag type byte 220 = 0x08: Tx power not monitored: suppressed, not -40 dBm.
  expect_lanes(m, {0.8316, 0.7930, 0.8257, 0.8230}, {"-0.80", "-1.01", "-0.83", "-0.85"}, {6.132, 6.140, 6.132, 6.140},
               std::nullopt, {"", "", "", ""});
  EXPECT_EQ(m.checksums_valid, true);
}

TEST(Sidecar, Sff8636FinisarFtlc9551repmSr4) {
  const auto m = decode_file("sff8636_qsfp28_finisar_FTLC9551REPM_100G-SR4_page00.hex");
  EXPECT_EQ(m.vendor_name, "FINISAR CORP");
  EXPECT_EQ(m.part_number, "FTLC9551REPM");
  EXPECT_EQ(m.vendor_oui, "00:90:65");
  EXPECT_EQ(m.revision, "A0");
  EXPECT_EQ(m.date_code, "151006");
  expect_near(m.temperature_c, 26.4062, k4, "temperature");
  expect_near(m.supply_voltage_v, 3.2578, k4, "Vcc");
  expect_lanes(m, {1.3327, 0.7411, 1.3399, 1.3263}, {"1.25", "-1.30", "1.27", "1.23"}, {7.078, 7.154, 7.174, 7.102},
               std::array<double, 4>{0.9958, 1.1731, 1.1736, 1.2500}, {"-0.02", "0.69", "0.70", "0.97"});
  EXPECT_EQ(m.checksums_valid, true);
}

TEST(Sidecar, Sff8636FsQ28PcxxDac) {
  const auto m = decode_file("sff8636_qsfp28_fs_Q28-PCxx-DAC_640B.hex");
  EXPECT_EQ(m.spec, Spec::kSff8636);
  EXPECT_EQ(m.identifier, 0x0d);
  EXPECT_EQ(m.spec_revision, "0x05");
  EXPECT_EQ(m.vendor_name, "FS");
  EXPECT_EQ(m.vendor_oui, "00:02:c9");
  EXPECT_EQ(m.part_number, "Q28-PCxx");
  EXPECT_EQ(m.revision, "A2");
  EXPECT_EQ(m.date_code, "190805");
  // Passive copper (byte 147 = 0xa0): the 27.84 °C / 3.22 V in the lower page are not reported.
  EXPECT_TRUE(m.passive_copper);
  EXPECT_FALSE(m.monitors_valid);
  EXPECT_FALSE(m.temperature_c.has_value());
  EXPECT_FALSE(m.supply_voltage_v.has_value());
  // Page 03h exists (paged memory) and holds thresholds.
  expect_thresholds(m.thresholds.temperature_c, {80.00, -10.00, 75.00, -5.00}, k2, "temperature");
  expect_thresholds(m.thresholds.tx_bias_ma, {11.000, 2.000, 10.000, 3.000}, k3, "bias");
  EXPECT_EQ(m.checksums_valid, true);
}

TEST(Sidecar, Sff8636FsQsfp28Ir4) {
  const auto m = decode_file("sff8636_qsfp28_fs_QSFP28-IR4-100G_640B.hex");
  EXPECT_EQ(m.identifier, 0x11);
  EXPECT_EQ(m.vendor_name, "FS");
  EXPECT_EQ(m.part_number, "QSFP28-IR4-100G");
  EXPECT_EQ(m.revision, "A1");
  EXPECT_EQ(m.vendor_oui, "00:02:c9");
  EXPECT_EQ(m.manufacture_date, "2019-01-10");
  EXPECT_EQ(m.max_power_w, 3.5);
  EXPECT_EQ(m.pages, (std::vector<std::uint8_t>{0x00, 0x01, 0x02, 0x03}));
  expect_near(m.temperature_c, 28.5898, k4, "temperature");
  expect_near(m.supply_voltage_v, 3.3209, k4, "Vcc");
  expect_lanes(m, {1.7258, 1.2744, 1.1138, 1.1990}, {"2.37", "1.05", "0.47", "0.79"}, {34.432, 33.408, 36.736, 35.456},
               std::array<double, 4>{1.1468, 1.1665, 1.2332, 1.2189}, {"0.59", "0.67", "0.91", "0.86"});
  EXPECT_NEAR(m.lanes[0].tx_bias_ma.value_or(0), 34.432, k3);  // asserted by the source test
  expect_thresholds(m.thresholds.temperature_c, {80.00, -10.00, 75.00, -5.00}, k2, "temperature");
  expect_thresholds(m.thresholds.supply_voltage_v, {3.7000, 2.9040, 3.5952, 3.0024}, k4, "Vcc");
  expect_thresholds(m.thresholds.rx_power_mw, {2.8184, 0.0355, 2.2387, 0.0562}, k4, "Rx power");
  expect_thresholds(m.thresholds.tx_bias_ma, {75.000, 10.000, 70.000, 15.000}, k3, "bias");
  expect_thresholds(m.thresholds.tx_power_mw, {2.8183, 0.1412, 2.2387, 0.1778}, k4, "Tx power");
  EXPECT_EQ(m.checksums_valid, true);
}

TEST(Sidecar, Sff8636InnolightTrVc13tPsm4) {
  const auto m = decode_file("sff8636_qsfp28_innolight_TR-VC13T-N00_100G-PSM4_page00.hex");
  EXPECT_EQ(m.vendor_name, "INNOLIGHT");
  EXPECT_EQ(m.part_number, "TR-VC13T-N00");
  EXPECT_EQ(m.vendor_oui, "44:7c:7f");
  EXPECT_EQ(m.revision, "01");
  EXPECT_EQ(m.date_code, "16051219");  // YYMMDD + lot "19"
  EXPECT_EQ(m.manufacture_date, "2016-05-12");
  expect_near(m.temperature_c, 33.7188, k4, "temperature");
  expect_near(m.supply_voltage_v, 3.4059, k4, "Vcc");
  // No light on the receivers: raw 0x0001 = 0.1 µW = -40.00 dBm (a real value, not 0 mW).
  expect_lanes(m, {0.0001, 0.0001, 0.0001, 0.0001}, {"-40.00", "-40.00", "-40.00", "-40.00"},
               {35.404, 35.296, 35.526, 35.444}, std::array<double, 4>{0.7662, 0.7560, 0.9098, 0.9228},
               {"-1.16", "-1.21", "-0.41", "-0.35"});
  EXPECT_EQ(m.checksums_valid, true);
}

TEST(Sidecar, Sff8636LumentumLq210crCwdm4) {
  const auto m = decode_file("sff8636_qsfp28_lumentum_LQ210CR-CAA1_100G-CWDM4_page00.hex");
  EXPECT_EQ(m.vendor_name, "LUMENTUM");
  EXPECT_EQ(m.part_number, "LQ210CR-CAA1");
  EXPECT_EQ(m.vendor_oui, "00:01:9c");
  EXPECT_EQ(m.revision, "01");
  EXPECT_EQ(m.date_code, "151202");
  expect_near(m.temperature_c, 30.6406, k4, "temperature");
  expect_near(m.supply_voltage_v, 3.3091, k4, "Vcc");
  expect_lanes(m, {0.6294, 0.7653, 1.0492, 0.7798}, {"-2.01", "-1.16", "0.21", "-1.08"},
               {24.586, 23.854, 24.926, 33.294}, std::array<double, 4>{0.8007, 0.8048, 0.8204, 0.7569},
               {"-0.97", "-0.94", "-0.86", "-1.21"});
  EXPECT_EQ(m.checksums_valid, true);
}

TEST(Sidecar, Sff8636MolexQsfpPlusDacFlat) {
  const auto m = decode_file("sff8636_qsfpplus_molex_1110401054_DAC_page00.hex");
  EXPECT_EQ(m.identifier, 0x0d);
  EXPECT_EQ(m.spec_revision, "0x00");
  EXPECT_TRUE(m.flat_memory);  // byte 2 = 0x06: Flat_mem bit set
  EXPECT_EQ(m.vendor_name, "Molex Inc.");
  EXPECT_EQ(m.vendor_oui, "00:09:3a");
  EXPECT_EQ(m.part_number, "1110401054");
  EXPECT_EQ(m.date_code, "160419");
  // Bytes 22-23 = 01 81 would read 1.5039 °C: passive DAC, so not reported.
  EXPECT_FALSE(m.temperature_c.has_value());
  EXPECT_FALSE(m.monitors_valid);
  EXPECT_EQ(m.checksums_valid, true);
}

}  // namespace
