// SPDX-License-Identifier: Apache-2.0
// Helpers of the optics tests: the real dumps of tests/data/eeprom, the ethtool oracles of
// tests/data/decoded_oracles, and a byte-image builder for synthetic modules. The builder writes
// fields at the offsets of the specs (CMIS 5.2, SFF-8636, SFF-8472) spelled out here, on purpose
// independently of the decoders' own constants.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "npo/hal/xcvr_decode.hpp"

namespace optics_test {

inline std::filesystem::path eeprom_dir() { return std::filesystem::path(NPO_TEST_DATA_DIR) / "eeprom"; }
inline std::filesystem::path oracle_dir() { return std::filesystem::path(NPO_TEST_DATA_DIR) / "decoded_oracles"; }

/// Bytes of a tests/data/eeprom dump (the .hex format), through the public loader.
inline std::vector<std::byte> load(const std::string& name) {
  auto r = npo::xcvr::load_dump_file(eeprom_dir() / name);
  EXPECT_TRUE(r.has_value()) << name << ": " << (r ? "" : r.error().to_string());
  return r.value_or(std::vector<std::byte>{});
}

/// Decodes a dump of tests/data/eeprom; an error fails the test.
inline npo::xcvr::DecodedModule decode_file(const std::string& name) {
  const auto bytes = load(name);
  auto m = npo::xcvr::decode_module(bytes);
  EXPECT_TRUE(m.has_value()) << name << ": " << (m ? "" : m.error().to_string());
  return m.value_or(npo::xcvr::DecodedModule{});
}

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline void write_file(const std::filesystem::path& p, std::string_view data) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(data.data(), static_cast<std::streamsize>(data.size()));
}

inline std::string as_string(const std::vector<std::byte>& b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

/// `ethtool -m IF hex on` rendering of bytes: header, then "0x0000:\t\t18 52 ..." lines.
inline std::string ethtool_hex(const std::vector<std::byte>& b) {
  std::string s = "Offset\t\tValues\n------\t\t------";
  for (std::size_t i = 0; i < b.size(); ++i) {
    if (i % 16 == 0) s += fmt::format("\n0x{:04x}:\t\t", i);
    s += fmt::format("{:02x} ", std::to_integer<unsigned>(b[i]));
  }
  return s + "\n";
}

/// fmt of a power the way `ethtool -m` prints it: "1.3222 mW / 1.21 dBm"; "-inf" for 0 mW.
inline std::string ethtool_power(double mw, const std::optional<double>& dbm) {
  return dbm ? fmt::format("{:.4f} mW / {:.2f} dBm", mw, *dbm) : fmt::format("{:.4f} mW / -inf dBm", mw);
}
inline std::string ethtool_temp(double c) {
  return fmt::format("{:.2f} degrees C / {:.2f} degrees F", c, c * 1.8 + 32);
}
inline std::string ethtool_volt(double v) { return fmt::format("{:.4f} V", v); }
inline std::string ethtool_bias(double ma) { return fmt::format("{:.3f} mA", ma); }
inline std::string dbm2(const std::optional<double>& dbm) { return dbm ? fmt::format("{:.2f}", *dbm) : "none"; }

/// "name : value" lines of an ethtool -m listing (leading blanks/tabs stripped). Later lines of
/// the same name are kept in order.
inline std::vector<std::pair<std::string, std::string>> oracle_fields(std::string_view text) {
  std::vector<std::pair<std::string, std::string>> out;
  std::istringstream in{std::string(text)};
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const auto colon = line.find(" : ");
    if (colon == std::string::npos) continue;
    auto key = line.substr(0, colon);
    auto val = line.substr(colon + 3);
    const auto b = key.find_first_not_of(" \t");
    const auto e = key.find_last_not_of(" \t");
    if (b == std::string::npos) continue;
    key = key.substr(b, e - b + 1);
    while (!val.empty() && (val.back() == '\r' || val.back() == ' ')) val.pop_back();
    out.emplace_back(key, val);
  }
  return out;
}

/// Parses the number in front of a unit: "1.3222 mW / 1.21 dBm" -> 1.3222.
inline double leading_number(const std::string& v) { return std::stod(v); }

/// A module memory image under construction.
struct Image {
  std::vector<std::byte> b;
  explicit Image(std::size_t n) : b(n) {}
  explicit Image(std::vector<std::byte> bytes) : b(std::move(bytes)) {}

  void u8(std::size_t off, unsigned v) { b.at(off) = static_cast<std::byte>(v & 0xffu); }
  void u16(std::size_t off, unsigned v) {
    u8(off, v >> 8);
    u8(off + 1, v);
  }
  void s16(std::size_t off, int v) {
    u16(off, static_cast<unsigned>(static_cast<std::uint16_t>(static_cast<std::int16_t>(v))));
  }
  void str(std::size_t off, std::string_view s, std::size_t width) {
    for (std::size_t i = 0; i < width; ++i) u8(off + i, i < s.size() ? static_cast<unsigned char>(s[i]) : ' ');
  }
  [[nodiscard]] unsigned get(std::size_t off) const { return std::to_integer<unsigned>(b.at(off)); }
  [[nodiscard]] npo::Result<npo::xcvr::DecodedModule> decode() const { return npo::xcvr::decode_module(b); }
};

// CMIS linear offsets: page 00h byte N is at N; page 01h at 128+N; 02h at 256+N; 10h at 384+N;
// 11h at 512+N (N = 128..255).
constexpr std::size_t p01(std::size_t n) { return 128 + n; }
constexpr std::size_t p02(std::size_t n) { return 256 + n; }
constexpr std::size_t p11(std::size_t n) { return 512 + n; }

/// A paged CMIS 5.0 QSFP-DD (768 bytes: lower, 00h, 01h, 02h, 10h, 11h), single-mode fiber,
/// application 1 = 400GAUI-8 C2M -> 400GBASE-DR4 (8 host lanes, 4 media lanes), every module
/// and lane monitor and flag advertised (page 01h bytes 157-160), Tx bias scale x1, Module Ready.
inline Image cmis_paged() {
  Image im(768);
  im.u8(0, 0x18);
  im.u8(1, 0x50);
  im.u8(2, 0x00);
  im.u8(3, 0x03 << 1);
  im.u8(85, 0x02);
  im.u8(86, 0x11);  // AppSel 1: host 400GAUI-8 C2M
  im.u8(87, 0x1c);  //           media 400GBASE-DR4
  im.u8(88, 0x84);  //           8 host lanes, 4 media lanes
  im.u8(89, 0x01);
  im.u8(90, 0xff);  // end of the list
  im.u8(128, 0x18);
  im.str(129, "NPO TEST", 16);
  im.str(148, "SYNTH-CMIS", 16);
  im.str(166, "SN0001", 16);
  im.str(182, "24010100", 8);
  im.u8(p01(151), 0x10);  // Rx power: average
  im.u8(p01(157), 0x0f);  // Tx fault, LOS, CDR LOL, adaptive EQ fail flags
  im.u8(p01(158), 0x06);  // Rx LOS, CDR LOL flags
  im.u8(p01(159), 0x03);  // temperature and Vcc monitors
  im.u8(p01(160), 0x07);  // Tx bias, Tx power, Rx power monitors; bias scale x1
  return im;
}

/// An SFF-8636 QSFP28 (640 bytes, paged: page 03h present), optical, Tx power monitored,
/// LOS and Tx fault implemented.
inline Image sff8636_paged() {
  Image im(640);
  im.u8(0, 0x11);
  im.u8(1, 0x08);
  im.u8(2, 0x00);
  im.u8(128, 0x11);
  im.u8(147, 0x40);  // 1310 nm DFB
  im.str(148, "NPO TEST", 16);
  im.str(168, "SYNTH-8636", 16);
  im.u8(195, 0x0a);  // Tx fault, Tx LOS implemented
  im.str(196, "SN0002", 16);
  im.str(212, "24010100", 8);
  im.u8(220, 0x0c);  // Rx average, Tx power supported
  return im;
}

/// An SFF-8472 SFP+ with A0h and A2h (512 bytes), internally calibrated, average Rx power,
/// alarm/warning flags and soft TX_FAULT/RX_LOS monitoring implemented.
inline Image sff8472_ddm() {
  Image im(512);
  im.u8(0, 0x03);
  im.u8(1, 0x04);
  im.u8(2, 0x07);
  im.str(20, "NPO TEST", 16);
  im.str(40, "SYNTH-8472", 16);
  im.str(56, "A", 4);
  im.str(68, "SN0003", 16);
  im.str(84, "24010100", 8);
  im.u8(92, 0x68);
  im.u8(93, 0xf0);
  im.u8(94, 0x08);
  return im;
}

}  // namespace optics_test
