// SPDX-License-Identifier: Apache-2.0
// The three input formats (raw bytes, `ethtool -m hex on` text, tests/data/eeprom .hex) give
// identical bytes; malformed input gives kInvalidArgument / kDataLoss with a clear message and
// never crashes.
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "optics_test_util.hpp"

namespace {

namespace fs = std::filesystem;
using npo::Code;
using optics_test::as_string;
using optics_test::write_file;

std::vector<std::string> hex_files() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(optics_test::eeprom_dir())) {
    if (e.path().extension() == ".hex") out.push_back(e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

fs::path temp_path(const std::string& name) { return fs::path(::testing::TempDir()) / ("npo_optics_" + name); }

TEST(DumpFormat, EveryTestDumpHasASidecarAndDecodes) {
  const auto files = hex_files();
  EXPECT_EQ(files.size(), 15u);
  for (const auto& f : files) {
    EXPECT_TRUE(fs::exists(optics_test::eeprom_dir() / (fs::path(f).stem().string() + ".md"))) << f;
    const auto bytes = optics_test::load(f);
    EXPECT_TRUE(bytes.size() == 256 || bytes.size() == 512 || bytes.size() == 640) << f << ": " << bytes.size();
    EXPECT_TRUE(npo::xcvr::decode_module(bytes).has_value()) << f;
  }
}

TEST(DumpFormat, ThreeInputFormatsGiveIdenticalBytes) {
  for (const auto& f : hex_files()) {
    const auto from_hex = optics_test::load(f);
    ASSERT_FALSE(from_hex.empty()) << f;
    // raw, as `ethtool -m IF raw on > file` writes it
    const auto raw = temp_path(f + ".bin");
    write_file(raw, as_string(from_hex));
    // `ethtool -m IF hex on` text
    const auto eth = temp_path(f + ".ethtool");
    write_file(eth, optics_test::ethtool_hex(from_hex));
    const auto from_raw = npo::xcvr::load_dump_file(raw);
    const auto from_eth = npo::xcvr::load_dump_file(eth);
    ASSERT_TRUE(from_raw.has_value()) << f << ": " << from_raw.error().to_string();
    ASSERT_TRUE(from_eth.has_value()) << f << ": " << from_eth.error().to_string();
    EXPECT_EQ(*from_raw, from_hex) << f;
    EXPECT_EQ(*from_eth, from_hex) << f;
    fs::remove(raw);
    fs::remove(eth);
  }
}

TEST(DumpFormat, EthtoolHexLineShapes) {
  // "\t0x0000:\t18 52 ..." as in the brief, CRLF line ends, upper-case digits, no header.
  std::string text;
  for (unsigned line = 0; line < 16; ++line) {
    text += fmt::format("\t0x{:04x}:\t", line * 16);
    for (unsigned i = 0; i < 16; ++i) text += fmt::format("{:02X} ", (line * 16 + i) & 0xff);
    text += "\r\n";
  }
  const auto r = npo::xcvr::parse_dump_text(text);
  ASSERT_TRUE(r.has_value()) << r.error().to_string();
  ASSERT_EQ(r->size(), 256u);
  for (std::size_t i = 0; i < 256; ++i) EXPECT_EQ(std::to_integer<std::size_t>((*r)[i]), i);
}

npo::Error err_of(const npo::Result<std::vector<std::byte>>& r) {
  EXPECT_FALSE(r.has_value());
  return r ? npo::Error() : r.error();
}

TEST(DumpFormat, OddHexDigitsIsInvalidArgument) {
  std::string text =
      optics_test::read_text(optics_test::eeprom_dir() / "sff8636_qsfp28_dell_WG8C4_100G-AOC_page00.hex");
  const auto pos = text.find("00000010  ");
  ASSERT_NE(pos, std::string::npos);
  text.replace(pos + 10, 2, "0");  // first byte of the second data line: "0" -> one digit
  const auto e = err_of(npo::xcvr::parse_dump_text(text));
  EXPECT_EQ(e.code(), Code::kInvalidArgument);
  EXPECT_NE(e.message().find("odd number of hex digits"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("line 4"), std::string::npos) << e.message();

  const auto e2 = err_of(npo::xcvr::parse_dump_text("0x0000:  18 5 00\n"));
  EXPECT_EQ(e2.code(), Code::kInvalidArgument);
  const auto e3 = err_of(npo::xcvr::parse_dump_text("0x0000:  18 zz 00\n"));
  EXPECT_EQ(e3.code(), Code::kInvalidArgument);
  EXPECT_NE(e3.message().find("'zz' is not hex"), std::string::npos) << e3.message();
  const auto e4 = err_of(npo::xcvr::parse_dump_text("hello world\n"));
  EXPECT_EQ(e4.code(), Code::kInvalidArgument);
  EXPECT_NE(e4.message().find("line 1"), std::string::npos) << e4.message();
}

TEST(DumpFormat, TruncatedFilesAreDataLoss) {
  const std::string name = "sff8636_qsfp28_fs_QSFP28-IR4-100G_640B.hex";
  const std::string text = optics_test::read_text(optics_test::eeprom_dir() / name);
  // Cut after the first half: ends mid-page.
  std::string cut = text.substr(0, text.find("000000d0", text.find("upper page 00h")));
  auto e = err_of(npo::xcvr::parse_dump_text(cut));
  EXPECT_EQ(e.code(), Code::kDataLoss);
  EXPECT_NE(e.message().find("128-byte pages"), std::string::npos) << e.message();
  // A line missing in the middle: offsets out of step.
  std::string holed = text;
  const auto l = holed.find("00000020  ");
  holed.erase(l, holed.find('\n', l) - l + 1);
  e = err_of(npo::xcvr::parse_dump_text(holed));
  EXPECT_EQ(e.code(), Code::kDataLoss);
  EXPECT_NE(e.message().find("line is missing"), std::string::npos) << e.message();
  // A raw file cut short.
  const auto bytes = optics_test::load(name);
  const auto raw = temp_path("cut.bin");
  write_file(raw, as_string(bytes).substr(0, 300));
  e = err_of(npo::xcvr::load_dump_file(raw));
  EXPECT_EQ(e.code(), Code::kDataLoss);
  EXPECT_NE(e.message().find(raw.string()), std::string::npos) << "names the file: " << e.message();
  fs::remove(raw);
  // Whole pages but too few for the spec, or SFF-8472 with half an A2h.
  std::vector<std::byte> lower(bytes.begin(), bytes.begin() + 128);
  auto d = npo::xcvr::decode_module(lower);
  ASSERT_FALSE(d.has_value());
  EXPECT_EQ(d.error().code(), Code::kDataLoss);
  auto sfp = optics_test::load("sff8472_sfp_oem_SFP-10GB-LR_A0A2.hex");
  sfp.resize(384);
  d = npo::xcvr::decode_module(sfp);
  ASSERT_FALSE(d.has_value());
  EXPECT_EQ(d.error().code(), Code::kDataLoss);
  EXPECT_NE(d.error().message().find("A2h"), std::string::npos) << d.error().message();
  // A partial page handed straight to the decoder.
  auto cmis = optics_test::load("cmis_qsfpdd_cisco_68-103205-02_page00.hex");
  cmis.resize(300);
  d = npo::xcvr::decode_module(cmis);
  ASSERT_FALSE(d.has_value());
  EXPECT_EQ(d.error().code(), Code::kDataLoss);
}

TEST(DumpFormat, UnknownIdentifierIsInvalidArgument) {
  auto bytes = optics_test::load("sff8636_qsfp28_dell_WG8C4_100G-AOC_page00.hex");
  bytes[0] = std::byte{0x42};
  auto d = npo::xcvr::decode_module(bytes);
  ASSERT_FALSE(d.has_value());
  EXPECT_EQ(d.error().code(), Code::kInvalidArgument);
  EXPECT_NE(d.error().message().find("unknown identifier 0x42"), std::string::npos) << d.error().message();
  bytes[0] = std::byte{0x06};  // XFP: known to SFF-8024, not decoded here
  d = npo::xcvr::decode_module(bytes);
  ASSERT_FALSE(d.has_value());
  EXPECT_NE(d.error().message().find("XFP"), std::string::npos) << d.error().message();
  // A specific decoder handed the wrong spec.
  const auto sfp = optics_test::load("sff8472_sfp_oem_SFP-10GB-LR_A0A2.hex");
  d = npo::xcvr::decode_cmis(sfp);
  ASSERT_FALSE(d.has_value());
  EXPECT_EQ(d.error().code(), Code::kInvalidArgument);
}

TEST(DumpFormat, EmptyInputIsInvalidArgument) {
  const auto empty = temp_path("empty.bin");
  write_file(empty, "");
  auto e = err_of(npo::xcvr::load_dump_file(empty));
  EXPECT_EQ(e.code(), Code::kInvalidArgument);
  EXPECT_NE(e.message().find("empty"), std::string::npos) << e.message();
  fs::remove(empty);
  e = err_of(npo::xcvr::parse_dump_text(""));
  EXPECT_EQ(e.code(), Code::kInvalidArgument);
  e = err_of(npo::xcvr::parse_dump_text("# only a comment\n\n"));
  EXPECT_EQ(e.code(), Code::kInvalidArgument);
  const auto d = npo::xcvr::decode_module({});
  ASSERT_FALSE(d.has_value());
  EXPECT_EQ(d.error().code(), Code::kInvalidArgument);
  // A file that does not exist.
  e = err_of(npo::xcvr::load_dump_file(temp_path("does-not-exist.hex")));
  EXPECT_EQ(e.code(), Code::kNotFound);
  EXPECT_EQ(e.sys_errno(), ENOENT);
}

// Mutations of every real dump (bit flips, byte storms, truncation, extension) and random text:
// each call returns a value or an error, never crashes (ASan/UBSan builds check the rest).
TEST(DumpFormat, MalformedInputNeverCrashes) {
  std::mt19937 rng(20240607);
  std::size_t decoded = 0, rejected = 0;
  for (const auto& f : hex_files()) {
    const auto base = optics_test::load(f);
    for (int iter = 0; iter < 300; ++iter) {
      auto b = base;
      switch (iter % 4) {
        case 0:
          for (int k = 0; k < 8; ++k) b[rng() % b.size()] ^= static_cast<std::byte>(1u << (rng() % 8));
          break;
        case 1:
          for (auto& x : b) {
            if (rng() % 4 == 0) x = static_cast<std::byte>(rng());
          }
          break;
        case 2: b.resize(rng() % (b.size() + 1)); break;
        default: b.resize(b.size() + 128 * (1 + rng() % 6), static_cast<std::byte>(rng())); break;
      }
      const auto r = npo::xcvr::decode_module(b);
      (r ? decoded : rejected)++;
      if (r) {
        EXPECT_LE(r->lanes.size(), 8u);
        EXPECT_EQ(r->lanes.size(), r->media_lane_count);
      }
    }
  }
  EXPECT_GT(decoded, 0u);
  EXPECT_GT(rejected, 0u);
  const std::string alphabet = "0123456789abcdefxX:| \t\n#-Offset";
  for (int iter = 0; iter < 2000; ++iter) {
    std::string t;
    const std::size_t n = rng() % 400;
    for (std::size_t i = 0; i < n; ++i) t += alphabet[rng() % alphabet.size()];
    const auto r = npo::xcvr::parse_dump_text(t);
    if (!r) {
      EXPECT_TRUE(r.error().code() == Code::kInvalidArgument || r.error().code() == Code::kDataLoss)
          << r.error().to_string();
    }
  }
}

}  // namespace
