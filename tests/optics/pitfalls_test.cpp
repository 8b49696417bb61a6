// SPDX-License-Identifier: Apache-2.0
// One named test per decoding mistake seen in the field (ethtool, SONiC, go-ethtool, vendor
// tools): each test would fail on a decoder that makes it.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "optics_test_util.hpp"

namespace {

using npo::xcvr::DecodedModule;
using npo::xcvr::LaneFlag;
using optics_test::Image;
using optics_test::p01;
using optics_test::p02;
using optics_test::p11;

DecodedModule ok(const npo::Result<DecodedModule>& r) {
  EXPECT_TRUE(r.has_value()) << (r ? "" : r.error().to_string());
  return r.value_or(DecodedModule{});
}

bool any_lane_value(const DecodedModule& m) {
  for (const auto& l : m.lanes) {
    if (l.tx_bias_ma || l.tx_power_mw || l.rx_power_mw || l.tx_power_dbm || l.rx_power_dbm) return true;
  }
  return false;
}

// ---- Tx bias scaling factor from page 01h -------------------------------------------------------

// CMIS 5.2 page 01h byte 160 bits 4:3 multiply the 2 µA bias LSB by 1, 2 or 4, for the lane
// monitors and the page 02h thresholds alike. (ethtool shifts right instead: it divides.)
TEST(OpticsPitfalls, CmisTxBiasScalingFactorFromPage01h) {
  for (unsigned code : {0u, 1u, 2u}) {
    Image im = optics_test::cmis_paged();
    im.u8(p01(160), 0x07 | (code << 3));
    im.u16(p11(170), 3000);  // lane 1 bias raw: 6 mA at x1
    im.u16(p11(172), 1000);  // lane 2: 2 mA at x1
    im.u16(p02(184), 5000);  // bias high alarm threshold raw: 10 mA at x1
    im.u16(p02(190), 500);   // low warning: 1 mA at x1
    const auto m = ok(im.decode());
    const double scale = 1u << code;
    ASSERT_GE(m.lanes.size(), 2u);
    EXPECT_NEAR(m.lanes[0].tx_bias_ma.value_or(-1), 6.0 * scale, 1e-9) << "scale code " << code;
    EXPECT_NEAR(m.lanes[1].tx_bias_ma.value_or(-1), 2.0 * scale, 1e-9) << "scale code " << code;
    ASSERT_TRUE(m.thresholds.tx_bias_ma.has_value());
    EXPECT_NEAR(m.thresholds.tx_bias_ma->high_alarm, 10.0 * scale, 1e-9);
    EXPECT_NEAR(m.thresholds.tx_bias_ma->low_warning, 1.0 * scale, 1e-9);
  }
  // 11b is reserved: the scale is unknown, so no bias value is made up.
  Image im = optics_test::cmis_paged();
  im.u8(p01(160), 0x07 | (3u << 3));
  im.u16(p11(170), 3000);
  const auto m = ok(im.decode());
  EXPECT_FALSE(m.lanes[0].tx_bias_ma.has_value());
  EXPECT_FALSE(m.thresholds.tx_bias_ma.has_value());
  EXPECT_TRUE(m.lanes[0].rx_power_mw.has_value()) << "other monitors still reported";
}

// ---- Per-lane flags are bitmaps over lanes -------------------------------------------------------

// Each CMIS flag byte holds bit i = lane i+1. (ethtool tests `byte & chan`, the lane *number*.)
TEST(OpticsPitfalls, LaneFlagsAreBitmapsOverLanes) {
  Image im = optics_test::cmis_paged();  // 4 media lanes in use
  im.u8(p11(136), 0b0000'0101);          // Tx LOS on lanes 1 and 3
  im.u8(p11(149), 0b0000'1000);          // Rx power high alarm on lane 4
  im.u8(p11(142), 0b0000'0010);          // Tx power low warning on lane 2
  im.u8(p11(147), 0b1111'0000);          // Rx LOS on lanes 5-8: not in use, must not appear
  const auto m = ok(im.decode());
  ASSERT_EQ(m.lanes.size(), 4u);
  ASSERT_TRUE(m.lane_flags.has_value());
  EXPECT_EQ(m.lane_flags->get(LaneFlag::kTxLos), 0b0101);
  EXPECT_EQ(m.lane_flags->get(LaneFlag::kRxLos), 0);
  EXPECT_EQ(m.lanes[0].flags, std::vector<LaneFlag>{LaneFlag::kTxLos});
  EXPECT_EQ(m.lanes[1].flags, std::vector<LaneFlag>{LaneFlag::kTxPowerLowWarning});
  EXPECT_EQ(m.lanes[2].flags, std::vector<LaneFlag>{LaneFlag::kTxLos});
  EXPECT_EQ(m.lanes[3].flags, std::vector<LaneFlag>{LaneFlag::kRxPowerHighAlarm});
  EXPECT_TRUE(m.lane_flags->test(LaneFlag::kTxLos, 3));
  EXPECT_FALSE(m.lane_flags->test(LaneFlag::kTxLos, 2));

  // SFF-8636 packs Tx and Rx in nibbles: real Dell AOC, byte 5 = 0xdf: Tx CDR LOL on lanes
  // 1, 3, 4 (not 2), Rx CDR LOL on all four; byte 3 = 0xff: Tx and Rx LOS on all four.
  const auto dell = optics_test::decode_file("sff8636_qsfp28_dell_WG8C4_100G-AOC_page00.hex");
  ASSERT_TRUE(dell.lane_flags.has_value());
  EXPECT_EQ(dell.lane_flags->get(LaneFlag::kTxCdrLol), 0b1101);
  EXPECT_EQ(dell.lane_flags->get(LaneFlag::kRxCdrLol), 0b1111);
  EXPECT_EQ(dell.lane_flags->get(LaneFlag::kTxLos), 0b1111);
  EXPECT_EQ(dell.lane_flags->get(LaneFlag::kRxLos), 0b1111);
  EXPECT_FALSE(dell.lane_flags->test(LaneFlag::kTxCdrLol, 2));

  // SFF-8636 alarm nibbles: lane 1 in bits 7:4 of the first byte, lane 2 in 3:0, lanes 3-4 in
  // the second byte; each nibble high alarm, low alarm, high warning, low warning.
  Image q = optics_test::sff8636_paged();
  q.u8(9, 0x80);   // Rx power: lane 1 high alarm
  q.u8(10, 0x01);  //           lane 4 low warning
  q.u8(11, 0x04);  // Tx bias: lane 2 low alarm
  q.u8(14, 0x20);  // Tx power: lane 3 high warning
  const auto qm = ok(q.decode());
  ASSERT_TRUE(qm.lane_flags.has_value());
  EXPECT_EQ(qm.lane_flags->get(LaneFlag::kRxPowerHighAlarm), 0b0001);
  EXPECT_EQ(qm.lane_flags->get(LaneFlag::kRxPowerLowWarning), 0b1000);
  EXPECT_EQ(qm.lane_flags->get(LaneFlag::kTxBiasLowAlarm), 0b0010);
  EXPECT_EQ(qm.lane_flags->get(LaneFlag::kTxPowerHighWarning), 0b0100);
  EXPECT_EQ(qm.lanes[2].flags, std::vector<LaneFlag>{LaneFlag::kTxPowerHighWarning});

  // SFF-8636 alarm nibbles: real Innolight PSM4, bytes 9-10 = 55 55: Rx power low alarm and
  // low warning on every lane (it reads 0.1 µW), nothing else.
  const auto psm4 = optics_test::decode_file("sff8636_qsfp28_innolight_TR-VC13T-N00_100G-PSM4_page00.hex");
  ASSERT_TRUE(psm4.lane_flags.has_value());
  EXPECT_EQ(psm4.lane_flags->get(LaneFlag::kRxPowerLowAlarm), 0b1111);
  EXPECT_EQ(psm4.lane_flags->get(LaneFlag::kRxPowerLowWarning), 0b1111);
  EXPECT_EQ(psm4.lane_flags->get(LaneFlag::kRxPowerHighAlarm), 0);
  EXPECT_EQ(psm4.lane_flags->get(LaneFlag::kRxPowerHighWarning), 0);
}

// ---- Only advertised banks/pages exist --------------------------------------------------------

// A flat-memory module has page 00h only: bytes after it (a driver that read pages anyway,
// or a padded buffer) are never decoded, however plausible they look.
TEST(OpticsPitfalls, OnlyAdvertisedPagesExistFlatMemoryIsPage00Only) {
  // Real flat CMIS DAC + 512 bytes of plausible page 01h/02h/10h/11h.
  Image junk = optics_test::cmis_paged();
  junk.u16(p11(154), 12000);  // Tx power 1.2 mW
  junk.u16(p11(186), 11000);  // Rx power 1.1 mW
  junk.u16(p11(170), 3000);
  junk.u8(p11(136), 0xff);  // every Tx LOS flag
  junk.u16(p02(128), 80 * 256);
  auto bytes = optics_test::load("cmis_qsfpdd_amphenol_NDYYYF-0001_400G-CR8-DAC_page00.hex");
  bytes.insert(bytes.end(), junk.b.begin() + 256, junk.b.end());
  ASSERT_EQ(bytes.size(), 768u);
  auto m = ok(npo::xcvr::decode_module(bytes));
  EXPECT_TRUE(m.flat_memory);
  EXPECT_EQ(m.pages, std::vector<std::uint8_t>{0x00});
  EXPECT_EQ(m.ignored_bytes, 512u);
  EXPECT_FALSE(any_lane_value(m));
  EXPECT_FALSE(m.lane_flags.has_value());
  EXPECT_FALSE(m.thresholds.temperature_c.has_value());
  EXPECT_EQ(m.applications.size(), 8u) << "no AppSel 9-15 from a page 01h that does not exist";

  // The same with an optical (SMF) flat module: it is the memory model, not the copper rule.
  Image flat = optics_test::cmis_paged();
  flat.u8(2, 0x80);
  flat.u16(p11(154), 12000);
  flat.u16(p11(186), 11000);
  flat.u8(p11(136), 0x0f);
  flat.u16(p02(128), 80 * 256);
  m = ok(flat.decode());
  EXPECT_TRUE(m.monitors_valid);
  EXPECT_EQ(m.pages, std::vector<std::uint8_t>{0x00});
  EXPECT_FALSE(any_lane_value(m));
  EXPECT_FALSE(m.lane_flags.has_value());
  EXPECT_FALSE(m.thresholds.temperature_c.has_value());
  flat.u8(2, 0x00);  // paged: now they are real
  m = ok(flat.decode());
  EXPECT_EQ(m.pages, (std::vector<std::uint8_t>{0x00, 0x01, 0x02, 0x10, 0x11}));
  EXPECT_NEAR(m.lanes[0].tx_power_mw.value_or(0), 1.2, 1e-9);
  EXPECT_TRUE(m.thresholds.temperature_c.has_value());

  // SFF-8636 flat (Molex DAC) padded to 640 bytes with page 03h thresholds: none decoded.
  auto molex = optics_test::load("sff8636_qsfpplus_molex_1110401054_DAC_page00.hex");
  Image pad(640);
  pad.s16(512, 80 * 256);
  molex.insert(molex.end(), pad.b.begin() + 256, pad.b.end());
  m = ok(npo::xcvr::decode_module(molex));
  EXPECT_EQ(m.pages, std::vector<std::uint8_t>{0x00});
  EXPECT_EQ(m.ignored_bytes, 384u);
  EXPECT_FALSE(m.thresholds.temperature_c.has_value());

  // SFF-8636 paged without page 01h/02h advertised (byte 195 bits 6/7): page 03h is still at 512.
  Image q = optics_test::sff8636_paged();
  q.s16(512, 75 * 256);
  m = ok(q.decode());
  EXPECT_EQ(m.pages, (std::vector<std::uint8_t>{0x00, 0x03}));
  EXPECT_NEAR(m.thresholds.temperature_c.value_or(npo::xcvr::ThresholdSet{}).high_alarm, 75.0, 1e-9);

  // SFF-8472 without DDM (Brocade 1000BASE-T, byte 92 = 0) plus an A2h-looking page: no A2h.
  auto brocade = optics_test::load("sff8472_sfp_brocade_57-1000042-02_1000BASE-T_A0.hex");
  Image a2(512);
  a2.s16(256 + 96, 30 * 256);
  a2.u16(256 + 104, 5000);
  a2.s16(256 + 0, 80 * 256);
  brocade.insert(brocade.end(), a2.b.begin() + 256, a2.b.end());
  m = ok(npo::xcvr::decode_module(brocade));
  EXPECT_EQ(m.pages, std::vector<std::uint8_t>{0xa0});
  EXPECT_EQ(m.ignored_bytes, 256u);
  EXPECT_FALSE(m.monitors_valid);
  EXPECT_FALSE(m.temperature_c.has_value());
  EXPECT_FALSE(any_lane_value(m));
  EXPECT_FALSE(m.thresholds.temperature_c.has_value());
}

// ---- Signed temperature ---------------------------------------------------------------------------

TEST(OpticsPitfalls, SignedTemperatureNegativeValues) {
  Image c = optics_test::cmis_paged();
  c.s16(14, -10 * 256);  // 0xf600
  c.s16(p02(130), -40 * 256);
  auto m = ok(c.decode());
  EXPECT_DOUBLE_EQ(m.temperature_c.value_or(0), -10.0);
  EXPECT_DOUBLE_EQ(m.thresholds.temperature_c.value_or(npo::xcvr::ThresholdSet{}).low_alarm, -40.0);

  Image q = optics_test::sff8636_paged();
  q.u16(22, 0xfb00);       // -5 °C
  q.u16(512 + 2, 0xff80);  // low alarm threshold -0.5 °C
  m = ok(q.decode());
  EXPECT_DOUBLE_EQ(m.temperature_c.value_or(0), -5.0);
  EXPECT_DOUBLE_EQ(m.thresholds.temperature_c.value_or(npo::xcvr::ThresholdSet{}).low_alarm, -0.5);

  Image s = optics_test::sff8472_ddm();
  s.u16(256 + 96, 0xffff);  // -1/256 °C, not 255.996 °C
  m = ok(s.decode());
  EXPECT_DOUBLE_EQ(m.temperature_c.value_or(0), -1.0 / 256.0);

  // Real negative thresholds.
  const auto ir4 = optics_test::decode_file("sff8636_qsfp28_fs_QSFP28-IR4-100G_640B.hex");
  EXPECT_DOUBLE_EQ(ir4.thresholds.temperature_c.value_or(npo::xcvr::ThresholdSet{}).low_alarm, -10.0);
  const auto flex = optics_test::decode_file("sff8472_sfp_flexoptix_P.B1696.10.DA_10G-LR_A0A2.hex");
  EXPECT_DOUBLE_EQ(flex.thresholds.temperature_c.value_or(npo::xcvr::ThresholdSet{}).low_alarm, -25.0);
}

// ---- 0 mW: dBm absent (never -inf), the lane still listed ------------------------------------

TEST(OpticsPitfalls, ZeroMilliwattHasNoDbmAndTheLaneIsStillListed) {
  EXPECT_FALSE(npo::xcvr::mw_to_dbm(0.0).has_value());
  EXPECT_FALSE(npo::xcvr::mw_to_dbm(-0.0).has_value());
  EXPECT_FALSE(npo::xcvr::mw_to_dbm(-1.0).has_value());
  EXPECT_FALSE(npo::xcvr::mw_to_dbm(std::numeric_limits<double>::quiet_NaN()).has_value());
  EXPECT_FALSE(npo::xcvr::mw_to_dbm(std::numeric_limits<double>::infinity()).has_value());
  EXPECT_NEAR(npo::xcvr::mw_to_dbm(0.0001).value_or(0), -40.0, 1e-9);
  EXPECT_NEAR(npo::xcvr::mw_to_dbm(1.0).value_or(1), 0.0, 1e-12);

  // Real SFP with no light: Rx 0.0000 mW.
  const auto oem = optics_test::decode_file("sff8472_sfp_oem_SFP-10GB-LR_A0A2.hex");
  ASSERT_EQ(oem.lanes.size(), 1u);
  EXPECT_EQ(oem.lanes[0].lane, 1u);
  ASSERT_TRUE(oem.lanes[0].rx_power_mw.has_value());
  EXPECT_EQ(*oem.lanes[0].rx_power_mw, 0.0);
  EXPECT_FALSE(oem.lanes[0].rx_power_dbm.has_value());
  EXPECT_TRUE(oem.lanes[0].tx_power_dbm.has_value());

  // CMIS lane 3 dark on Tx and Rx: listed, 0 mW, no dBm; its neighbours keep theirs.
  Image c = optics_test::cmis_paged();
  for (std::size_t i = 0; i < 4; ++i) {
    c.u16(p11(154 + 2 * i), i == 2 ? 0 : 10000);
    c.u16(p11(186 + 2 * i), i == 2 ? 0 : 10000);
  }
  const auto m = ok(c.decode());
  ASSERT_EQ(m.lanes.size(), 4u);
  EXPECT_EQ(m.lanes[2].lane, 3u);
  EXPECT_EQ(m.lanes[2].tx_power_mw, 0.0);
  EXPECT_FALSE(m.lanes[2].tx_power_dbm.has_value());
  EXPECT_FALSE(m.lanes[2].rx_power_dbm.has_value());
  EXPECT_NEAR(m.lanes[1].rx_power_dbm.value_or(-99), 0.0, 1e-12);
  for (const auto& l : m.lanes) {
    for (const auto& v : {l.tx_power_dbm, l.rx_power_dbm}) {
      if (v) {
        EXPECT_TRUE(std::isfinite(*v));
      }
    }
  }
}

// ---- Media lane count from the application in use, not the connector -------------------------

TEST(OpticsPitfalls, MediaLaneCountFromApplicationInUseNotConnector) {
  // Real 400G-DR4: 8 host lanes, MPO-12 connector, QSFP-DD (8 electrical lanes); 4 media lanes.
  const auto dr4 = optics_test::decode_file("cmis_qsfpdd_innolight_T-DP4CNH-N00_400G-DR4_page00.hex");
  EXPECT_EQ(dr4.media_lane_count, 4u);
  EXPECT_EQ(dr4.lanes.size(), 4u);
  EXPECT_EQ(dr4.media_lane_source, "first_application");

  // Two applications; the Active Control Set (page 11h 206-213) selects AppSel 2 =
  // 100GAUI-2 -> 100GBASE-DR (2 host lanes, 1 media lane) on data paths at host lanes 1 and 3.
  Image im = optics_test::cmis_paged();
  im.u8(90, 0x0d);  // AppSel 2: host 100GAUI-2 C2M
  im.u8(91, 0x14);  //           media 100GBASE-DR
  im.u8(92, 0x21);  //           2 host lanes, 1 media lane
  im.u8(93, 0x55);
  im.u8(94, 0xff);
  const unsigned app2_dp0 = (2u << 4) | (0u << 1), app2_dp2 = (2u << 4) | (2u << 1);
  for (std::size_t lane : {0u, 1u}) im.u8(p11(206 + lane), app2_dp0);
  for (std::size_t lane : {2u, 3u}) im.u8(p11(206 + lane), app2_dp2);
  auto m = ok(im.decode());
  EXPECT_EQ(m.media_lane_count, 2u);
  EXPECT_EQ(m.lanes.size(), 2u);
  EXPECT_EQ(m.active_app_sel, 2);
  EXPECT_EQ(m.media_lane_source, "active_control_set");

  // Breakout on all 8 host lanes: 4 data paths x 1 media lane.
  for (std::size_t lane = 0; lane < 8; ++lane) im.u8(p11(206 + lane), (2u << 4) | ((lane & ~1u) << 1));
  m = ok(im.decode());
  EXPECT_EQ(m.media_lane_count, 4u);

  // One 400G data path with AppSel 1 on all 8 host lanes: 4 media lanes, not 8.
  for (std::size_t lane = 0; lane < 8; ++lane) im.u8(p11(206 + lane), 1u << 4);
  m = ok(im.decode());
  EXPECT_EQ(m.media_lane_count, 4u);
  EXPECT_EQ(m.active_app_sel, 1);

  // Nothing active yet (module in low power): the first application.
  for (std::size_t lane = 0; lane < 8; ++lane) im.u8(p11(206 + lane), 0);
  m = ok(im.decode());
  EXPECT_EQ(m.media_lane_count, 4u);
  EXPECT_EQ(m.media_lane_source, "first_application");
}

// ---- Passive copper: monitor bytes are junk, not measurements -------------------------------

TEST(OpticsPitfalls, PassiveCopperMonitorJunkNotReported) {
  // Molex QSFP+ DAC: bytes 22-23 = 01 81 ("1.5039 °C" to a blind decoder).
  const auto molex = optics_test::decode_file("sff8636_qsfpplus_molex_1110401054_DAC_page00.hex");
  EXPECT_TRUE(molex.passive_copper);
  EXPECT_FALSE(molex.monitors_valid);
  EXPECT_FALSE(molex.temperature_c.has_value());
  EXPECT_EQ(molex.lanes.size(), 4u) << "lanes are listed, without values";
  EXPECT_FALSE(any_lane_value(molex));
  // FS QSFP28 DAC: "27.84 °C", "3.22 V" in the lower page, diag type 0: not reported.
  const auto fs = optics_test::decode_file("sff8636_qsfp28_fs_Q28-PCxx-DAC_640B.hex");
  EXPECT_FALSE(fs.temperature_c.has_value());
  EXPECT_FALSE(fs.supply_voltage_v.has_value());
  EXPECT_FALSE(any_lane_value(fs));
  // CMIS media type 03h (Amphenol flat DAC; Cisco paged, whose bytes would read 23 °C).
  for (const char* f :
       {"cmis_qsfpdd_amphenol_NDYYYF-0001_400G-CR8-DAC_page00.hex", "cmis_qsfpdd_cisco_68-103205-02_page00.hex"}) {
    const auto m = optics_test::decode_file(f);
    EXPECT_TRUE(m.passive_copper) << f;
    EXPECT_FALSE(m.monitors_valid) << f;
    EXPECT_FALSE(m.temperature_c.has_value()) << f;
    EXPECT_FALSE(m.supply_voltage_v.has_value()) << f;
    EXPECT_EQ(m.lanes.size(), 8u) << f;
  }
  // A paged CMIS passive copper module with junk in page 11h and the lower monitors.
  Image c = optics_test::cmis_paged();
  c.u8(85, 0x03);
  c.s16(14, 0x1700);
  c.u16(p11(154), 0x1234);
  c.u8(p11(136), 0xff);
  const auto m = ok(c.decode());
  EXPECT_FALSE(m.temperature_c.has_value());
  EXPECT_FALSE(any_lane_value(m));
  EXPECT_FALSE(m.lane_flags.has_value());
  // SFF-8472 passive cable (A0h byte 8 bit 2) with A2h: no measurements.
  Image s = optics_test::sff8472_ddm();
  s.u8(8, 0x04);
  s.s16(256 + 96, 25 * 256);
  const auto sm = ok(s.decode());
  EXPECT_FALSE(sm.monitors_valid);
  EXPECT_FALSE(sm.temperature_c.has_value());
}

// ---- SFF-8472 external calibration ------------------------------------------------------------

TEST(OpticsPitfalls, Sff8472ExternalCalibrationApplied) {
  Image s = optics_test::sff8472_ddm();
  s.u8(92, 0x58);  // DDM, external calibration, average Rx power
  const std::size_t a2 = 256;
  s.s16(a2 + 96, 1000);    // temperature A/D
  s.u16(a2 + 98, 30000);   // Vcc A/D
  s.u16(a2 + 100, 2000);   // bias A/D
  s.u16(a2 + 102, 4000);   // Tx power A/D
  s.u16(a2 + 104, 100);    // Rx power A/D
  s.u16(a2 + 76, 0x0200);  // I slope 2.0
  s.s16(a2 + 78, -500);    // I offset -500 x 2 µA
  s.u16(a2 + 80, 0x0180);  // TxPWR slope 1.5
  s.s16(a2 + 82, 100);     // TxPWR offset
  s.u16(a2 + 84, 0x0100);  // T slope 1.0
  s.s16(a2 + 86, -2560);   // T offset -10 °C
  s.u16(a2 + 88, 0x0080);  // V slope 0.5
  s.s16(a2 + 90, 1000);    // V offset
  // Rx_PWR(4..0) = 0, 0, 0.5, 2.0, 10.0: P = 0.5 AD^2 + 2 AD + 10 (0.1 µW units).
  const auto f32 = [&s](std::size_t off, float v) {
    const auto u = std::bit_cast<std::uint32_t>(v);
    s.u16(off, u >> 16);
    s.u16(off + 2, u & 0xffff);
  };
  f32(a2 + 56, 0.0f);
  f32(a2 + 60, 0.0f);
  f32(a2 + 64, 0.5f);
  f32(a2 + 68, 2.0f);
  f32(a2 + 72, 10.0f);
  s.u16(a2 + 16, 10000);  // bias high alarm threshold A/D
  s.u16(a2 + 32, 200);    // Rx high alarm threshold A/D
  const auto m = ok(s.decode());
  EXPECT_NEAR(m.temperature_c.value_or(0), (1000.0 - 2560.0) / 256.0, 1e-9);
  EXPECT_NEAR(m.supply_voltage_v.value_or(0), (0.5 * 30000 + 1000) * 1e-4, 1e-9);
  EXPECT_NEAR(m.lanes[0].tx_bias_ma.value_or(0), (2.0 * 2000 - 500) * 0.002, 1e-9);
  EXPECT_NEAR(m.lanes[0].tx_power_mw.value_or(0), (1.5 * 4000 + 100) * 1e-4, 1e-9);
  EXPECT_NEAR(m.lanes[0].rx_power_mw.value_or(0), (0.5 * 100 * 100 + 2 * 100 + 10) * 1e-4, 1e-9);
  ASSERT_TRUE(m.thresholds.tx_bias_ma.has_value());
  EXPECT_NEAR(m.thresholds.tx_bias_ma->high_alarm, (2.0 * 10000 - 500) * 0.002, 1e-9);
  EXPECT_NEAR(m.thresholds.rx_power_mw.value_or(npo::xcvr::ThresholdSet{}).high_alarm,
              (0.5 * 200 * 200 + 2 * 200 + 10) * 1e-4, 1e-9);

  // The same module with internal calibration ignores the constants.
  s.u8(92, 0x68);
  const auto i = ok(s.decode());
  EXPECT_NEAR(i.lanes[0].rx_power_mw.value_or(0), 100 * 1e-4, 1e-12);

  // Real dump: its (identity) constants under external calibration give the same values.
  auto fin = optics_test::load("sff8472_sfp_finisar_FTLX8571D3BCL_10G-SR_A0A2.hex");
  const auto internal = ok(npo::xcvr::decode_module(fin));
  fin[92] = std::byte{0x58};
  const auto external = ok(npo::xcvr::decode_module(fin));
  EXPECT_NEAR(external.lanes[0].rx_power_mw.value_or(0), internal.lanes[0].rx_power_mw.value_or(1), 1e-6);
  EXPECT_NEAR(external.temperature_c.value_or(0), internal.temperature_c.value_or(1), 1e-9);
}

}  // namespace
