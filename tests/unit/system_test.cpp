// SPDX-License-Identifier: Apache-2.0
// System::open end to end on the emulator: identity read through config space, BAR0 and the
// firmware mailbox; values checked against the card's spec (firmware-iface).
#include <gtest/gtest.h>

#include "npo/fw/pci.hpp"
#include "npo/fw/regs.hpp"
#include "npo/hal/hal.hpp"

namespace {

using npo::Code;

TEST(System, OpensMesh8WithIdentityFromTheCards) {
  auto sys = npo::System::open("emu:mesh8?hbm=2M");
  ASSERT_TRUE(sys.has_value()) << sys.error().to_string();
  auto& s = **sys;
  EXPECT_EQ(s.backend_name(), "emulator");
  ASSERT_EQ(s.device_count(), 8u);
  std::set<std::uint64_t> serials;
  for (std::size_t i = 0; i < s.device_count(); ++i) {
    const auto& d = s.device(i).info();
    EXPECT_EQ(d.index, i);
    EXPECT_EQ(d.vendor_id, npo::fw::pci::kVendorId);
    EXPECT_EQ(d.device_id, npo::fw::pci::kDeviceId);
    EXPECT_EQ(d.hbm_bytes, 2u << 20);
    EXPECT_EQ(d.fabric_id, i + 1);
    EXPECT_EQ(d.num_engines, npo::fw::regs::kNumEngines);
    EXPECT_EQ(d.queues_per_engine, npo::fw::regs::kQueuesPerEngine);
    EXPECT_EQ(d.num_ports, 8u);
    EXPECT_EQ(d.lanes_per_port, 8u);
    EXPECT_EQ(d.firmware.firmware, "1.2.0");
    EXPECT_EQ(d.firmware.interface, npo::fw::regs::kInterfaceVersion);
    EXPECT_EQ(d.pcie.gts, 32.0);
    EXPECT_EQ(d.pcie.width, 16u);
    ASSERT_EQ(d.bars.size(), 3u);
    EXPECT_EQ(d.bars[0].size, npo::fw::pci::kBar0Size);
    EXPECT_EQ(d.bars[1].index, 2u);
    EXPECT_EQ(d.bars[1].size, 2u << 20);
    EXPECT_TRUE(d.bars[1].prefetchable);
    EXPECT_EQ(d.bars[2].size, npo::fw::pci::kBar4Size);
    serials.insert(d.serial);
  }
  EXPECT_EQ(serials.size(), 8u);
  EXPECT_EQ(s.device(0).info().bdf, "0000:01:00.0");
  EXPECT_EQ(s.device(0).info().numa_node, 0);
  EXPECT_EQ(s.device(7).info().numa_node, 1);
  EXPECT_EQ(s.device_by_fabric_id(3).value()->info().index, 2u);
  EXPECT_EQ(s.device_by_fabric_id(99).error().code(), Code::kNotFound);
}

TEST(System, MailboxCallsAndFirmwareLog) {
  auto sys = npo::System::open("emu:2?hbm=1M");
  ASSERT_TRUE(sys.has_value()) << sys.error().to_string();
  auto& dev = (*sys)->device(1);
  auto hb1 = dev.heartbeat();
  auto hb2 = dev.heartbeat();
  ASSERT_TRUE(hb1.has_value()) << hb1.error().to_string();
  ASSERT_TRUE(hb2.has_value());
  EXPECT_EQ(hb2->count, hb1->count + 1);
  EXPECT_GE(hb2->uptime_ns, hb1->uptime_ns);
  auto v = dev.firmware_versions();
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->firmware, "1.2.0");
  EXPECT_EQ(v->firmware_raw, 0x010200u);
  auto log = dev.error_log();
  ASSERT_TRUE(log.has_value());
  EXPECT_TRUE(log->empty());
}

TEST(System, TransceiverPagesThroughTheMailbox) {
  auto sys = npo::System::open("emu:mesh8?hbm=1M");
  ASSERT_TRUE(sys.has_value());
  auto& dev = (*sys)->device(0);
  std::array<std::byte, 16> name{};
  ASSERT_TRUE(npo::read_transceiver(dev, 0, 0, 0, 129, name).has_value());  // CMIS 5.2 §8.3: vendor name 129..144
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(name.data()), 7), "NPO-EMU");
  std::array<std::byte, 1> id{};
  ASSERT_TRUE(npo::read_transceiver(dev, 0, 0, 0, 0, id).has_value());
  EXPECT_EQ(static_cast<unsigned>(id[0]), 0x18u);  // SFF-8024: QSFP-DD
  std::array<std::byte, 4> p{};
  EXPECT_EQ(npo::read_transceiver(dev, 7, 0, 0, 128, p).error().code(), Code::kNotFound);  // port 7 has no cable
  EXPECT_EQ(npo::read_transceiver(dev, 0, 0, 0x13, 128, p).error().code(),
            Code::kUnimplemented);  // page 13h (diagnostics) not advertised
  EXPECT_EQ(npo::read_transceiver(dev, 9, 0, 0, 0, p).error().code(), Code::kOutOfRange);
  std::array<std::byte, 130> big{};
  EXPECT_EQ(npo::read_transceiver(dev, 0, 0, 0, 0, big).error().code(), Code::kOutOfRange);
  std::array<std::byte, 1> w{std::byte{0x10}};
  EXPECT_EQ(npo::write_transceiver(dev, 0, 0, 0, 3, w).error().code(), Code::kPermissionDenied);  // module state is RO
  ASSERT_TRUE(npo::write_transceiver(dev, 0, 0, 0, 26, w).has_value());
  ASSERT_TRUE(npo::read_transceiver(dev, 0, 0, 0, 26, id).has_value());
  EXPECT_EQ(id[0], std::byte{0x10});
}

TEST(System, PortSnapshotBeforeTraining) {
  auto sys = npo::System::open("emu:mesh8?hbm=1M");
  ASSERT_TRUE(sys.has_value());
  auto ps = npo::read_port((*sys)->device(0), 0);
  ASSERT_TRUE(ps.has_value());
  EXPECT_EQ(ps->state, npo::LinkState::kDisabled);
  EXPECT_TRUE(ps->module_present);
  EXPECT_FALSE(ps->link_up);
  EXPECT_EQ(ps->lanes.size(), 8u);
  EXPECT_FALSE(ps->lanes[0].pre_fec_ber.has_value());  // no codewords yet: no BER, not 0
  EXPECT_FALSE(npo::read_port((*sys)->device(0), 7)->module_present);
  EXPECT_EQ(npo::read_port((*sys)->device(0), 8).error().code(), Code::kOutOfRange);
}

TEST(System, BadUrisAndVfioWithoutVfio) {
  auto bad = npo::System::open("emu:mesh9");
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().code(), Code::kInvalidArgument);
  EXPECT_NE(bad.error().message().find("emu:mesh8"), std::string::npos);
  auto vb = npo::System::open("vfio:zz:00.0");
  EXPECT_EQ(vb.error().code(), Code::kInvalidArgument);
}

TEST(System, DeviceResetWaitsForReady) {
  auto sys = npo::System::open("emu:1?hbm=1M");
  ASSERT_TRUE(sys.has_value());
  auto& dev = (*sys)->device(0);
  ASSERT_TRUE(dev.reset().has_value());
  auto hb = dev.heartbeat();  // the mailbox works again after the reset
  ASSERT_TRUE(hb.has_value()) << hb.error().to_string();
  EXPECT_EQ(hb->count, 1u);
}

}  // namespace

namespace {

TEST(Topology, DiscoveredFromTrainingMatchesTheMesh) {
  auto sys = npo::System::open("emu:mesh8?hbm=1M");
  ASSERT_TRUE(sys.has_value());
  auto up = npo::bring_up_links(**sys, 5'000'000'000ULL);
  ASSERT_TRUE(up.has_value());
  EXPECT_EQ(up->ports_with_module, 56u);  // 8 cards x 7 cabled ports
  EXPECT_EQ(up->up, 56u);
  EXPECT_EQ(up->failed, 0u);
  auto t = npo::discover_topology(**sys);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->cards.size(), 8u);
  ASSERT_EQ(t->links.size(), 28u);  // each pair once
  for (const auto& l : t->links) {
    EXPECT_TRUE(l.up);
    EXPECT_EQ(l.lanes, 8u);
    EXPECT_LT(l.a_fabric_id, l.b_fabric_id);
    // mesh8 wiring: card a (fabric a+1) port b-1 <-> card b port a, for a < b
    EXPECT_EQ(l.a_port, l.b_fabric_id - 2) << l.a_fabric_id << "-" << l.b_fabric_id;
    EXPECT_EQ(l.b_port, l.a_fabric_id - 1);
  }
  for (std::uint32_t a = 1; a <= 8; ++a) {
    for (std::uint32_t b = 1; b <= 8; ++b) EXPECT_EQ(t->hops(a, b), a == b ? 0 : 1);
  }
  EXPECT_EQ(t->hops(1, 99), -1);
  // Take the 1-2 link down at both ends: 1 and 2 are now 2 hops apart.
  ASSERT_TRUE(npo::enable_port((*sys)->device(0), 0, false));
  ASSERT_TRUE(npo::enable_port((*sys)->device(1), 0, false));
  t = npo::discover_topology(**sys);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->links.size(), 27u);
  EXPECT_EQ(t->hops(1, 2), 2);
  EXPECT_EQ(t->direct_links(1, 2), 0u);
  EXPECT_EQ(t->hop_matrix()[0][1], 2);
}

TEST(Topology, UncabledCardsAreIslands) {
  auto sys = npo::System::open("emu:3?hbm=1M");
  ASSERT_TRUE(sys.has_value());
  auto up = npo::bring_up_links(**sys, 1'000'000'000ULL);
  ASSERT_TRUE(up.has_value());
  EXPECT_EQ(up->ports_with_module, 0u);
  auto t = npo::discover_topology(**sys);
  ASSERT_TRUE(t.has_value());
  EXPECT_TRUE(t->links.empty());
  EXPECT_EQ(t->hops(1, 2), -1);
  EXPECT_EQ(t->hops(3, 3), 0);
}

TEST(LinkMonitor, OneSnapshotCoversEveryPortAndLane) {
  auto sys = npo::System::open("emu:mesh8?hbm=1M");
  ASSERT_TRUE(sys.has_value());
  ASSERT_TRUE(npo::bring_up_links(**sys, 5'000'000'000ULL).has_value());
  npo::LinkMonitor mon(**sys);
  auto s = mon.snapshot();
  ASSERT_TRUE(s.has_value());
  ASSERT_EQ(s->cards.size(), 8u);
  for (const auto& c : s->cards) {
    ASSERT_EQ(c.ports.size(), 8u);
    for (const auto& p : c.ports) {
      EXPECT_EQ(p.lanes.size(), 8u);
      if (p.port < 7) {
        EXPECT_EQ(p.state, npo::LinkState::kUp) << "card " << c.card << " port " << p.port;
        EXPECT_TRUE(p.neighbor_fabric_id.has_value());
        EXPECT_EQ(p.lane_rate_mbd, 53125u);  // 106.25 Gb/s PAM4 lanes
        EXPECT_TRUE(p.pam4);
      } else {
        EXPECT_FALSE(p.module_present);
        EXPECT_NE(p.state, npo::LinkState::kUp);
      }
    }
  }
}

}  // namespace
