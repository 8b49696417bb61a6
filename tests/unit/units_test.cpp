// SPDX-License-Identifier: Apache-2.0
// npo::parse_bytes: the one byte-size grammar of tools, URIs and topology files.
#include "npo/hal/units.hpp"

#include <gtest/gtest.h>

namespace {

using npo::Code;
using npo::parse_bytes;

TEST(ParseBytes, BinaryMultipliersAndSpellings) {
  EXPECT_EQ(parse_bytes("0").value(), 0u);
  EXPECT_EQ(parse_bytes("64").value(), 64u);
  EXPECT_EQ(parse_bytes("4K").value(), 4096u);
  EXPECT_EQ(parse_bytes("4k").value(), 4096u);
  EXPECT_EQ(parse_bytes("64M").value(), 64u << 20);
  EXPECT_EQ(parse_bytes("64MiB").value(), 64u << 20);
  EXPECT_EQ(parse_bytes("64MB").value(), 64u << 20);
  EXPECT_EQ(parse_bytes("1G").value(), 1u << 30);
  EXPECT_EQ(parse_bytes("0x1000").value(), 4096u);
  EXPECT_EQ(parse_bytes("16777215G").value(), 16777215ULL << 30);  // 2^54 - 2^30: fits
}

TEST(ParseBytes, RefusesWhatIsNotASize) {
  for (const char* bad : {"", "M", "-1", "-1M", " 64M", "64M ", "1.5M", "64T", "64 M", "0x", "MB", "B", "64KMB"}) {
    const auto r = parse_bytes(bad);
    ASSERT_FALSE(r.has_value()) << "'" << bad << "'";
    EXPECT_EQ(r.error().code(), Code::kInvalidArgument) << "'" << bad << "'";
    EXPECT_NE(r.error().message().find(std::string("'") + bad + "'"), std::string::npos) << r.error().message();
  }
  for (const char* big : {"18446744073709551616", "17179869184G", "99999999999999999999K"}) {
    const auto r = parse_bytes(big);
    ASSERT_FALSE(r.has_value()) << big;
    EXPECT_EQ(r.error().code(), Code::kOutOfRange) << big;
  }
  EXPECT_EQ(parse_bytes("18446744073709551615").value(), ~0ULL);
}

}  // namespace
