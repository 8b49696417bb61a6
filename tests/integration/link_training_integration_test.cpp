// SPDX-License-Identifier: Apache-2.0
// Optical link bring-up through the PORT register blocks on the 8-card full mesh
// (registers.md §7.2): neighbour discovery per the mesh wiring, link loss on the far end,
// and the training retry budget ending in Fault.
#include <algorithm>

#include "harness.hpp"

namespace npo::itest {
namespace {

using pr::LinkState;

emu::SystemConfig mesh8_virtual() {
  auto c = emu::parse_uri("mesh8?clock=virtual");
  EXPECT_TRUE(c.has_value());
  return c.value_or(emu::SystemConfig{});
}

/// Peer of (card, port) in emu:mesh8: card a port b-1 <-> card b port a, for a < b.
/// Port 7 has no cable.
std::optional<std::pair<unsigned, unsigned>> mesh8_peer(unsigned card, unsigned port) {
  if (port >= 7) return std::nullopt;
  if (port < card) return std::pair{port, card - 1};  // we are "b", the peer is a = port
  return std::pair{port + 1, card};                   // we are "a", the peer is b = port + 1
}

struct Mesh {
  explicit Mesh(Rig& rig) {
    for (unsigned c = 0; c < 8; ++c) {
      be::Device* d = rig.open(c);
      if (d == nullptr) return;
      bars.push_back(&Rig::bar0(*d));
    }
  }
  [[nodiscard]] bool ok() const { return bars.size() == 8; }
  std::uint32_t status(unsigned c, unsigned p) const { return bars[c]->read32(regs::port_reg(p, pr::kStatus)); }
  LinkState state(unsigned c, unsigned p) const { return static_cast<LinkState>(pr::kStatusState.get(status(c, p))); }
  std::uint32_t reg(unsigned c, unsigned p, std::uint32_t r) const { return bars[c]->read32(regs::port_reg(p, r)); }
  std::uint64_t neighbor(unsigned c, unsigned p) const { return bars[c]->read64(regs::port_reg(p, pr::kNeighbor)); }
  void ctrl(unsigned c, unsigned p, std::uint32_t v) const { bars[c]->write32(regs::port_reg(p, pr::kCtrl), v); }
  std::vector<be::Mmio*> bars;
};

TEST(LinkTrainingIntegration, Mesh8BringUpNeighboursAndFarEndLoss) {
  Rig rig(mesh8_virtual());
  ASSERT_TRUE(rig.ok());
  Mesh m(rig);
  ASSERT_TRUE(m.ok());
  const unsigned ports = g::kCap0NumPorts.get(m.bars[0]->read32(g::kCap0));
  ASSERT_EQ(ports, 8u);
  for (unsigned c = 0; c < 8; ++c) {
    EXPECT_EQ(m.bars[c]->read32(g::kFabricId), c + 1);
    for (unsigned p = 0; p < ports; ++p) {
      EXPECT_EQ(m.state(c, p), LinkState::kDisabled);
      m.ctrl(c, p, pr::kCtrlEnable.mask());
    }
  }
  rig.advance(100 * kMs);

  for (unsigned c = 0; c < 8; ++c) {
    for (unsigned p = 0; p < ports; ++p) {
      SCOPED_TRACE(testing::Message() << "card " << c << " port " << p);
      const std::uint32_t st = m.status(c, p);
      const auto peer = mesh8_peer(c, p);
      if (!peer) {
        EXPECT_NE(static_cast<LinkState>(pr::kStatusState.get(st)), LinkState::kUp);
        EXPECT_EQ(pr::kStatusLinkUp.get(st), 0u);
        EXPECT_EQ(pr::kStatusModulePresent.get(st), 0u) << "uncabled port";
        EXPECT_EQ(pr::kNeighborValid.get(m.neighbor(c, p)), 0u);
        continue;
      }
      EXPECT_EQ(pr::kStatusState.get(st), static_cast<unsigned>(LinkState::kUp));
      EXPECT_EQ(pr::kStatusLinkUp.get(st), 1u);
      EXPECT_EQ(pr::kStatusFecLock.get(st), 1u);
      EXPECT_EQ(pr::kStatusModulePresent.get(st), 1u);
      EXPECT_EQ(pr::kStatusLanesUp.get(st), 0xffu);
      EXPECT_EQ(pr::kStatusLaneCount.get(st), regs::kLanesPerPort);
      const std::uint64_t nb = m.neighbor(c, p);
      EXPECT_EQ(pr::kNeighborValid.get(nb), 1u);
      EXPECT_EQ(pr::kNeighborFabricId.get(nb), peer->first + 1) << "peer fabric id";
      EXPECT_EQ(pr::kNeighborPort.get(nb), peer->second) << "peer port";
      EXPECT_NE(pr::kSpeedMbdPerLane.get(m.reg(c, p, pr::kSpeed)), 0u);
      EXPECT_NE(m.reg(c, p, pr::kEventStatus) & pr::kEventLinkUp.mask(), 0u);
      EXPECT_EQ(m.reg(c, p, pr::kTrainCount), 1u);
      EXPECT_EQ(m.reg(c, p, pr::kFlapCount), 0u);
    }
  }

  // Disable card 0 port 0; its far end is card 1 port 0.
  for (unsigned p = 0; p < ports; ++p) m.bars[1]->write32(regs::port_reg(p, pr::kEventStatus), 0xffffffffu);
  EXPECT_EQ(m.reg(1, 0, pr::kEventStatus), 0u) << "EVENT_STATUS is RW1C";
  m.ctrl(0, 0, 0);
  EXPECT_EQ(m.state(0, 0), LinkState::kDisabled);
  EXPECT_NE(m.reg(0, 0, pr::kEventStatus) & pr::kEventLinkDown.mask(), 0u);
  EXPECT_EQ(m.reg(0, 0, pr::kFlapCount), 1u);
  rig.advance(20 * kMs);
  const std::uint32_t far = m.status(1, 0);
  EXPECT_NE(static_cast<LinkState>(pr::kStatusState.get(far)), LinkState::kUp) << "the far end must see the loss";
  EXPECT_EQ(pr::kStatusLinkUp.get(far), 0u);
  EXPECT_NE(m.reg(1, 0, pr::kEventStatus) & pr::kEventLinkDown.mask(), 0u);
  EXPECT_EQ(m.reg(1, 0, pr::kFlapCount), 1u);
  EXPECT_EQ(pr::kNeighborValid.get(m.neighbor(1, 0)), 0u);
  // Other links of card 1 are untouched.
  EXPECT_EQ(m.state(1, 1), LinkState::kUp);
  EXPECT_EQ(m.reg(1, 1, pr::kEventStatus) & pr::kEventLinkDown.mask(), 0u);
  // With its peer gone the far end exhausts its retries.
  rig.advance(3'000 * kMs);
  EXPECT_EQ(m.state(1, 0), LinkState::kFault);
  EXPECT_NE(m.reg(1, 0, pr::kEventStatus) & pr::kEventTrainFail.mask(), 0u);

  // Re-enable one end and retrain the faulted one: both come back.
  m.ctrl(0, 0, pr::kCtrlEnable.mask());
  m.ctrl(1, 0, pr::kCtrlEnable.mask() | pr::kCtrlTrain.mask());
  rig.advance(100 * kMs);
  EXPECT_EQ(m.state(0, 0), LinkState::kUp);
  EXPECT_EQ(m.state(1, 0), LinkState::kUp);
  EXPECT_EQ(pr::kNeighborFabricId.get(m.neighbor(0, 0)), 2u);
  EXPECT_EQ(pr::kNeighborFabricId.get(m.neighbor(1, 0)), 1u);
}

TEST(LinkTrainingIntegration, LonePortFaultsAfterRetryBudget) {
  Rig rig(mesh8_virtual());
  ASSERT_TRUE(rig.ok());
  Mesh m(rig);
  ASSERT_TRUE(m.ok());
  // Card 0 port 0 (peer card 1 port 0 stays disabled) with the default 500 ms per attempt;
  // card 4 port 6 (peer card 7 port 4 stays disabled) with TRAIN_TIMEOUT = 100 ms.
  EXPECT_EQ(m.reg(0, 0, pr::kTrainTimeout), 500u);
  m.bars[4]->write32(regs::port_reg(6, pr::kTrainTimeout), 100);
  EXPECT_EQ(m.reg(4, 6, pr::kTrainTimeout), 100u);
  m.ctrl(0, 0, pr::kCtrlEnable.mask());
  m.ctrl(4, 6, pr::kCtrlEnable.mask());

  rig.advance(1'000 * kMs);
  EXPECT_EQ(m.state(0, 0), LinkState::kTraining) << "second attempt in progress";
  EXPECT_EQ(m.reg(0, 0, pr::kTrainCount), 2u);
  EXPECT_NE(m.reg(0, 0, pr::kEventStatus) & pr::kEventTrainFail.mask(), 0u);
  EXPECT_EQ(pr::kStatusLinkUp.get(m.status(0, 0)), 0u);
  EXPECT_EQ(m.state(4, 6), LinkState::kFault) << "3 x 100 ms attempts are over";
  EXPECT_EQ(m.reg(4, 6, pr::kTrainCount), 3u);

  rig.advance(1'000 * kMs);
  EXPECT_EQ(m.state(0, 0), LinkState::kFault);
  EXPECT_EQ(m.reg(0, 0, pr::kTrainCount), 3u) << "3 attempts, then Fault";
  EXPECT_EQ(pr::kStatusLinkUp.get(m.status(0, 0)), 0u);
  EXPECT_EQ(pr::kNeighborValid.get(m.neighbor(0, 0)), 0u);
  EXPECT_EQ(m.state(1, 0), LinkState::kDisabled);
  EXPECT_EQ(m.reg(0, 0, pr::kFlapCount), 0u);
  // Fault is sticky: more time changes nothing.
  rig.advance(2'000 * kMs);
  EXPECT_EQ(m.state(0, 0), LinkState::kFault);
  EXPECT_EQ(m.reg(0, 0, pr::kTrainCount), 3u);
}

}  // namespace
}  // namespace npo::itest
