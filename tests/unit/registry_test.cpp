// SPDX-License-Identifier: Apache-2.0
#include "npo/hal/backend/registry.hpp"

#include <gtest/gtest.h>

#include "npo/emu/emulator.hpp"

namespace {

using npo::Code;
using npo::backend::PciAddress;

TEST(PciAddress, ParsesBothFormsAndRejectsJunk) {
  auto a = PciAddress::parse("0000:3b:00.0");
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->bus, 0x3b);
  EXPECT_EQ(a->to_string(), "0000:3b:00.0");
  auto b = PciAddress::parse("af:1f.7");
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->to_string(), "0000:af:1f.7");
  for (const char* bad : {"", "3b:00", "0000:3b:20.0", "0000:3b:00.8", "0000:3b:00.0x", "-1:00.0", " 3b:00.0",
                          "10000:00:00.0", "0000:100:00.0"}) {
    auto r = PciAddress::parse(bad);
    ASSERT_FALSE(r.has_value()) << bad;
    EXPECT_EQ(r.error().code(), Code::kInvalidArgument);
  }
}

TEST(Registry, UnknownSchemeListsEveryAcceptedForm) {
  auto reg = npo::backend::builtin_registry();
  auto r = reg.open("pcie:0000:01:00.0");
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), Code::kInvalidArgument);
  for (const char* form : {"emu:mesh8", "emu:N", "emu:file=PATH", "vfio:all", "vfio:BDF"}) {
    EXPECT_NE(r.error().message().find(form), std::string::npos) << form << " missing from: " << r.error().message();
  }
}

TEST(Registry, DuplicateAndInvalidSchemes) {
  npo::backend::Registry reg;
  auto f = [](std::string_view, std::string_view) -> npo::Result<std::unique_ptr<npo::backend::Backend>> {
    return npo::fail(Code::kUnimplemented, "test");
  };
  ASSERT_TRUE(reg.add("x", {"x:1"}, f).has_value());
  EXPECT_EQ(reg.add("x", {"x:2"}, f).error().code(), Code::kAlreadyExists);
  EXPECT_EQ(reg.add("a:b", {}, f).error().code(), Code::kInvalidArgument);
  EXPECT_EQ(reg.add("", {}, f).error().code(), Code::kInvalidArgument);
  EXPECT_EQ(reg.open("x:1").error().code(), Code::kUnimplemented);  // reaches the factory
}

TEST(EmulatorUri, FormsAndOptions) {
  auto mesh = npo::emu::parse_uri("mesh8");
  ASSERT_TRUE(mesh.has_value());
  EXPECT_EQ(mesh->num_cards, 8u);
  EXPECT_EQ(mesh->cables.size(), 28u);  // every pair of 8 cards: 8*7/2
  auto n = npo::emu::parse_uri("64?clock=virtual&seed=7&hbm=4M&ports=6&workers=2");
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(n->num_cards, 64u);
  EXPECT_EQ(n->clock, npo::emu::ClockMode::kVirtual);
  EXPECT_EQ(n->seed, 7u);
  EXPECT_EQ(n->card.hbm_bytes, 4u << 20);
  EXPECT_EQ(n->card.num_ports, 6u);
  EXPECT_EQ(n->workers, 2u);
  EXPECT_EQ(npo::emu::parse_uri("0").error().code(), Code::kInvalidArgument);
  EXPECT_EQ(npo::emu::parse_uri("1025").error().code(), Code::kInvalidArgument);
  EXPECT_EQ(npo::emu::parse_uri("mesh9").error().code(), Code::kInvalidArgument);
  EXPECT_EQ(npo::emu::parse_uri("8?clock=fast").error().code(), Code::kInvalidArgument);
  EXPECT_EQ(npo::emu::parse_uri("8?colour=red").error().code(), Code::kInvalidArgument);
  EXPECT_EQ(npo::emu::parse_uri("8?clock=virtual&clock=realtime").error().code(), Code::kInvalidArgument);
  EXPECT_EQ(npo::emu::parse_uri("8?hbm=99999999999999999999G").error().code(), Code::kInvalidArgument);
  EXPECT_EQ(npo::emu::parse_uri("file=/nonexistent/t.yaml").error().code(), Code::kNotFound);  // docs/topology.md
}

TEST(EmulatorConfig, RejectsBadSystems) {
  npo::emu::SystemConfig c;
  c.num_cards = 2;
  c.cables.clear();
  c.card.hbm_bytes = 1000;  // not a multiple of 4 KiB
  EXPECT_EQ(npo::emu::Emulator::create(c).error().code(), Code::kInvalidArgument);
  c.card.hbm_bytes = 1 << 20;
  c.cables.push_back({0, 0, 5, 0});  // card 5 does not exist
  EXPECT_EQ(npo::emu::Emulator::create(c).error().code(), Code::kInvalidArgument);
}

}  // namespace
