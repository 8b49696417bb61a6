// SPDX-License-Identifier: Apache-2.0
// The training supervisor, LinkMonitor and link faults on the emulator's virtual clock
// (registers.md §7.2, §7.3). Fault tests need the emulator's physical optics model and skip
// with a reason until it is there.
#include "npo/hal/link_training.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "npo/hal/backend/backend.hpp"
#include "npo/hal/bring_up.hpp"
#include "npo/hal/link_health.hpp"
#include "npo/hal/link_monitor.hpp"
#include "npo/hal/port.hpp"
#include "npo/hal/system.hpp"
#include "npo/hal/topology.hpp"
#include "npo/hal/transceiver.hpp"
#include "optics_emu_rig.hpp"

namespace {

using npo::TrainCode;
using npo::TrainStage;
using optics_test::EmuRig;
namespace emu = npo::emu;

constexpr std::uint64_t kMs = 1'000'000;

std::size_t stage(TrainStage s) { return static_cast<std::size_t>(s); }

// The one bring-up call: every cabled port Up, the full mesh discovered, routes programmed.
TEST(BringUpFabric, Mesh8CompleteWithRoutesProgrammed) {
  EmuRig rig("mesh8?clock=virtual&hbm=1M");
  ASSERT_TRUE(rig.ok());
  EXPECT_TRUE(rig.sys->clock().is_virtual());
  const std::uint64_t t0 = rig.sys->clock().now_ns();
  auto f = npo::bring_up_fabric(*rig.sys);
  ASSERT_TRUE(f.has_value()) << f.error().to_string();
  EXPECT_GT(rig.sys->clock().now_ns(), t0);  // training waited on the virtual clock
  EXPECT_EQ(f->links.ports_with_module, 56u);
  EXPECT_EQ(f->links.up, 56u);
  EXPECT_EQ(f->links.failed, 0u);
  EXPECT_EQ(f->topology.cards.size(), 8u);
  EXPECT_EQ(f->topology.links.size(), 28u);
  EXPECT_EQ(f->routes.diameter(), 1);
  EXPECT_EQ(f->unreachable_pairs, 0u);
  EXPECT_TRUE(f->complete());
  // A second call finds everything Up and changes nothing.
  auto again = npo::bring_up_fabric(*rig.sys);
  ASSERT_TRUE(again.has_value()) << again.error().to_string();
  EXPECT_EQ(again->links.up, 56u);
  EXPECT_TRUE(again->complete());
  // Decoded port fields instead of register words.
  auto ps = npo::read_port(rig.sys->device(0), 0);
  ASSERT_TRUE(ps.has_value());
  EXPECT_TRUE(ps->enabled);
  EXPECT_FALSE(ps->loopback);
  EXPECT_FALSE(ps->prbs_generating);
  EXPECT_EQ(ps->lane_map, (std::array<std::uint8_t, 8>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_TRUE(ps->events.link_up);
}

// A module latches Rx LOS and CDR LOL (CMIS 5.2 §8.9.3, page 11h bytes 147/148, clear on
// read) on lanes whose data path is active while the far end is dark: here card 0 port 0 is
// enabled alone and its monitors read, so the latches are set before the bring-up. Once the
// bring-up has the link Up they describe nothing on the link, and the first read after it
// (what npo-link ddm --train shows) finds them clear. A lane lost afterwards latches again.
TEST(BringUpFabric, FlagsLatchedWhileALinkCameUpAreClearedOnceItIsUp) {
  EmuRig rig("mesh8?clock=virtual&hbm=1M");
  ASSERT_TRUE(rig.ok());
  auto& d0 = rig.sys->device(0);
  ASSERT_TRUE(npo::enable_port(d0, 0, true).has_value());
  auto clock = rig.sys->clock();
  clock.sleep_until(clock.now_ns() + 200 * kMs);  // module ready (5..10 ms) and data path init (5..10 ms)
  std::array<std::byte, 2> flags{};
  std::array<std::byte, 16> rx{};
  ASSERT_TRUE(npo::read_transceiver(d0, 0, 0, 0x11, 186, rx).has_value());  // a monitor read refreshes the module
  ASSERT_TRUE(npo::read_transceiver(d0, 0, 0, 0x11, 147, flags).has_value());
  EXPECT_EQ(flags[0], std::byte{0xff}) << "Rx LOS on all 8 lanes while card 1 is dark";
  EXPECT_EQ(flags[1], std::byte{0xff}) << "Rx CDR LOL on all 8 lanes";
  ASSERT_TRUE(npo::read_transceiver(d0, 0, 0, 0x11, 186, rx).has_value());  // latched again (still dark)
  auto f = npo::bring_up_fabric(*rig.sys);
  ASSERT_TRUE(f.has_value()) << f.error().to_string();
  ASSERT_EQ(f->links.up, 56u);
  for (std::size_t c = 0; c < 8; ++c) {
    for (unsigned p = 0; p < 7; ++p) {
      ASSERT_TRUE(npo::read_transceiver(rig.sys->device(c), p, 0, 0x11, 147, flags).has_value());
      EXPECT_EQ(flags[0], std::byte{0}) << "card " << c << " port " << p << " Rx LOS";
      EXPECT_EQ(flags[1], std::byte{0}) << "card " << c << " port " << p << " Rx CDR LOL";
    }
  }
  // Cleared, not masked: a lane that loses light after the bring-up latches Rx LOS again.
  ASSERT_TRUE(rig.emu->inject(
      {.at_ns = rig.emu->now_ns(), .kind = emu::FaultKind::kLaneLoss, .card = 0, .port = 0, .lane = 3}));
  clock.sleep_until(clock.now_ns() + 5 * kMs);
  ASSERT_TRUE(npo::read_transceiver(d0, 0, 0, 0x11, 186, rx).has_value());
  ASSERT_TRUE(npo::read_transceiver(d0, 0, 0, 0x11, 147, flags).has_value());
  EXPECT_EQ(std::to_integer<unsigned>(flags[0]), 0x08u) << "Rx LOS on lane 3 (CMIS lane 4) only";
}

TEST(TrainingSupervisor, Mesh8AllPortsUpWithStageTimes) {
  EmuRig rig("mesh8?clock=virtual&hbm=1M");
  ASSERT_TRUE(rig.ok());
  auto up = npo::bring_up_links(*rig.sys, 10'000 * kMs);
  ASSERT_TRUE(up.has_value()) << up.error().to_string();
  EXPECT_EQ(up->ports_with_module, 56u);  // 8 cards x 7 cabled ports
  EXPECT_EQ(up->up, 56u);
  EXPECT_EQ(up->failed, 0u);
  EXPECT_EQ(up->degraded, 0u);
  ASSERT_EQ(up->ports.size(), 64u);  // every port of every card, port 7 without a module
  // Published worst case from ENABLE with a ready module: 2000 + 3 x (500 + 100) ms (§7.2).
  EXPECT_LE(up->elapsed_ns, 5'000 * kMs + 3'800 * kMs);
  for (const auto& r : up->ports) {
    if (r.port == 7) {
      EXPECT_EQ(r.code, TrainCode::kNoModule);
      EXPECT_EQ(r.stage, TrainStage::kDetect);
      continue;
    }
    ASSERT_EQ(r.code, TrainCode::kOk) << "card " << r.card << " port " << r.port << ": " << r.detail;
    EXPECT_EQ(r.stage, TrainStage::kDone);
    EXPECT_EQ(r.lanes_up, 8u);
    EXPECT_EQ(r.lanes_total, 8u);
    EXPECT_EQ(r.dropped_lanes, 0u);
    EXPECT_EQ(r.detail, "up 8/8 lanes");
    // mesh8 wiring: card a port (b-1) <-> card b port a for a < b (fabric ID = index + 1).
    ASSERT_TRUE(r.neighbor_fabric_id.has_value());
    const std::uint32_t peer = *r.neighbor_fabric_id - 1;
    EXPECT_EQ(r.port, peer > r.card ? peer - 1 : peer) << "card " << r.card;
    EXPECT_EQ(*r.neighbor_port, r.card > peer ? r.card - 1 : r.card);
    // Per-stage times are recorded and add up to the total.
    std::uint64_t sum = 0;
    for (auto ns : r.stage_ns) sum += ns;
    EXPECT_EQ(sum, r.total_ns);
    EXPECT_GT(r.total_ns, 0u);
    EXPECT_GT(r.stage_ns[stage(TrainStage::kCdrLock)] + r.stage_ns[stage(TrainStage::kDataPathInit)] +
                  r.stage_ns[stage(TrainStage::kModuleReady)],
              0u);
    // Timeouts: the module's advertisement (page 01h bytes 167 / 144, CMIS 5.2 Table 8-43)
    // when it has page 01h, else the published t_module / t_datapath.
    std::array<std::byte, 24> p01{};
    if (npo::read_transceiver(rig.sys->device(r.card), r.port, 0, 1, 144, p01)) {
      EXPECT_EQ(r.module_ready_timeout_ns, npo::cmis_duration_ns(static_cast<std::uint8_t>(p01[23]) & 0xf).value());
      EXPECT_EQ(r.datapath_init_timeout_ns, npo::cmis_duration_ns(static_cast<std::uint8_t>(p01[0]) & 0xf).value());
    } else {
      EXPECT_EQ(r.module_ready_timeout_ns, 5'000 * kMs);
      EXPECT_EQ(r.datapath_init_timeout_ns, 2'000 * kMs);
    }
  }
  // A second bring-up of links already up finds them up without retraining.
  auto again = npo::bring_up_links(*rig.sys, 10'000 * kMs);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->up, 56u);
}

TEST(TrainingSupervisor, HeldDownPortsAreNotTouched) {
  EmuRig rig("mesh8?clock=virtual&hbm=1M");
  ASSERT_TRUE(rig.ok());
  const npo::PortRef held{0, 0};
  // Card 0 port 1 <-> card 2 port 0 (mesh8): both ends trained, card 0 port 0 held down.
  std::vector<npo::PortRef> ports{{0, 0}, {0, 1}, {2, 0}};
  auto r = npo::train_ports(*rig.sys, ports, {}, 10'000 * kMs, false, std::span(&held, 1));
  ASSERT_TRUE(r.has_value());
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[2].code, TrainCode::kOk);
  EXPECT_EQ((*r)[0].code, TrainCode::kDisabledFlapping);
  EXPECT_EQ((*r)[1].code, TrainCode::kOk);
  auto ps = npo::read_port(rig.sys->device(0), 0);
  ASSERT_TRUE(ps.has_value());
  EXPECT_FALSE(ps->enabled);  // left disabled
  EXPECT_FALSE(npo::train_ports(*rig.sys, std::vector<npo::PortRef>{{9, 0}}).has_value());
  EXPECT_EQ(npo::train_ports(*rig.sys, std::vector<npo::PortRef>{{0, 16}}).error().code(), npo::Code::kOutOfRange);
}

TEST(TrainingSupervisor, UncabledCardsEndWithNoModule) {
  EmuRig rig("3?clock=virtual&hbm=1M");
  ASSERT_TRUE(rig.ok());
  auto up = npo::bring_up_links(*rig.sys, 1'000 * kMs);
  ASSERT_TRUE(up.has_value());
  EXPECT_EQ(up->ports_with_module, 0u);
  for (const auto& r : up->ports) EXPECT_EQ(r.code, TrainCode::kNoModule);
}

/// 1024 cards, each cabled to its ring neighbour (port 0 <-> port 1) and to the card 32 on
/// (port 2 <-> port 3): 4096 ports trained concurrently by one loop on the virtual clock.
TEST(TrainingSupervisor, ThousandCardsBringUpConcurrently) {
  emu::SystemConfig cfg;
  cfg.name = "ring1024";
  cfg.num_cards = 1024;
  cfg.card.hbm_bytes = 1u << 20;
  cfg.clock = emu::ClockMode::kVirtual;
  for (std::uint32_t i = 0; i < cfg.num_cards; ++i) {
    cfg.cables.push_back({.card_a = i, .port_a = 0, .card_b = (i + 1) % cfg.num_cards, .port_b = 1, .channel = {}});
    cfg.cables.push_back({.card_a = i, .port_a = 2, .card_b = (i + 32) % cfg.num_cards, .port_b = 3, .channel = {}});
  }
  EmuRig rig(cfg);
  ASSERT_TRUE(rig.ok());
  const auto w0 = std::chrono::steady_clock::now();
  auto up = npo::bring_up_links(*rig.sys, 20'000 * kMs);
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
  ASSERT_TRUE(up.has_value()) << up.error().to_string();
  EXPECT_EQ(up->ports_with_module, 4096u);
  EXPECT_EQ(up->up, 4096u);
  EXPECT_EQ(up->failed, 0u);
  std::printf("1024 cards / 4096 cabled ports: bring-up %.3f s wall, %.1f ms emulated\n", wall_s,
              static_cast<double>(up->elapsed_ns) / 1e6);
  // One monitor snapshot of every port and lane.
  npo::LinkMonitor mon(*rig.sys);
  const auto s0 = std::chrono::steady_clock::now();
  auto snap = mon.snapshot();
  const double snap_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s0).count();
  ASSERT_TRUE(snap.has_value()) << snap.error().to_string();
  EXPECT_EQ(snap->cards.size(), 1024u);
  std::printf("LinkMonitor snapshot of 1024 cards: %.1f ms (stats DMA on card 0: %s)\n", snap_ms,
              mon.uses_stats_dma(0) ? "yes" : "no");
}

TEST(TrainingSupervisor, OneEndedLinkTimesOutInCdrLockAfterTheRetryBudget) {
  EmuRig rig("mesh8?clock=virtual&hbm=1M");
  ASSERT_TRUE(rig.ok());
  npo::TrainingPolicy pol;
  pol.host_retries = 1;
  // Only card 0 port 0 trains; its partner (card 1 port 0) stays disabled.
  std::vector<npo::PortRef> one{{0, 0}};
  auto r = npo::train_ports(*rig.sys, one, pol, 60'000 * kMs);
  ASSERT_TRUE(r.has_value());
  const auto& t = (*r)[0];
  EXPECT_EQ(t.code, TrainCode::kTimeoutCdrLock) << t.detail;
  EXPECT_EQ(t.stage, TrainStage::kCdrLock);
  EXPECT_EQ(t.host_retries, 1u);
  // Two bring-ups (first try + one host retry), each the card's 3 attempts of TRAIN_TIMEOUT
  // (500 ms, registers.md §7.2) before Fault.
  EXPECT_GE(t.total_ns, 2 * 3 * 500 * kMs);
  EXPECT_LE(t.total_ns, 2 * (5'000 + 2'000 + 3 * 600 + 100) * kMs);
  EXPECT_GE(t.stage_ns[stage(TrainStage::kCdrLock)], 2 * 3 * 500 * kMs - 100 * kMs);
  EXPECT_NE(t.detail.find("TIMEOUT_CDR_LOCK"), std::string::npos);
}

TEST(LinkMonitorEmu, SnapshotCarriesTheRegistersAndPortStates) {
  EmuRig rig("mesh8?clock=virtual&hbm=1M");
  ASSERT_TRUE(rig.ok());
  auto up = npo::bring_up_links(*rig.sys, 10'000 * kMs);
  ASSERT_TRUE(up.has_value());
  npo::LinkMonitor mon(*rig.sys);
  mon.note_training(up->ports);
  auto s = mon.snapshot();
  ASSERT_TRUE(s.has_value()) << s.error().to_string();
  ASSERT_EQ(s->cards.size(), 8u);
  EXPECT_EQ(s->interval_ns, 0u);
  for (const auto& c : s->cards) {
    ASSERT_EQ(c.ports.size(), 8u);
    ASSERT_EQ(c.health.size(), 8u);
    for (std::size_t p = 0; p < 7; ++p) {
      EXPECT_EQ(c.health[p].state, npo::PortState::kHealthy) << c.health[p].reason;
      EXPECT_EQ(c.health[p].reason, "up 8/8 lanes");
      EXPECT_EQ(c.health[p].lanes.size(), 8u);
      EXPECT_DOUBLE_EQ(c.ports[p].speed_gbps(), 800.0);
      // The snapshot carries what read_port reads.
      auto rp = npo::read_port(rig.sys->device(c.card), static_cast<unsigned>(p));
      ASSERT_TRUE(rp.has_value());
      EXPECT_EQ(rp->state, c.ports[p].state);
      EXPECT_EQ(rp->neighbor_fabric_id, c.ports[p].neighbor_fabric_id);
      EXPECT_EQ(rp->lanes[3].codewords, c.ports[p].lanes[3].codewords);
    }
    EXPECT_EQ(c.health[7].state, npo::PortState::kDisabled);  // enabled, nothing plugged in
    EXPECT_EQ(c.health[7].reason, "no module (or its cable ends at a switch port with no cross-connect yet)");
  }
  ASSERT_TRUE(npo::enable_port(rig.sys->device(2), 4, false).has_value());
  mon.sleep_ns(100 * kMs);
  s = mon.snapshot();
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->interval_ns, 100 * kMs);
  EXPECT_EQ(s->cards[2].health[4].state, npo::PortState::kDisabled);
  EXPECT_EQ(s->cards[2].health[4].reason, "disabled by host");
}

TEST(LinkMonitorEmu, StatsDmaAndRegisterReadsAgree) {
  EmuRig rig("mesh8?clock=virtual&hbm=1M");
  ASSERT_TRUE(rig.ok());
  ASSERT_TRUE(npo::bring_up_links(*rig.sys, 10'000 * kMs).has_value());
  rig.advance_ms(50);  // some traffic on the lanes
  npo::LinkMonitor dma(*rig.sys);
  npo::LinkMonitor regs(*rig.sys, {.limits = {}, .flap = {}, .enforce_flap_policy = true, .use_stats_dma = false});
  // Both at the same instant of the virtual clock: the counters must agree exactly.
  auto a = dma.snapshot();
  auto b = regs.snapshot();
  ASSERT_TRUE(a.has_value() && b.has_value());
  ASSERT_TRUE(dma.uses_stats_dma(0)) << "the emulator must answer STATS_CTRL (registers.md §7.5)";
  for (std::size_t c = 0; c < 8; ++c) {
    EXPECT_TRUE(a->cards[c].via_stats_dma);
    EXPECT_FALSE(b->cards[c].via_stats_dma);
    for (std::size_t p = 0; p < 8; ++p) {
      const auto& x = a->cards[c].ports[p];
      const auto& y = b->cards[c].ports[p];
      EXPECT_EQ(x.state, y.state);
      EXPECT_EQ(x.lanes_up, y.lanes_up);
      EXPECT_EQ(x.neighbor_fabric_id, y.neighbor_fabric_id);
      EXPECT_EQ(x.flap_count, y.flap_count);
      EXPECT_EQ(x.lane_enable, y.lane_enable);
      EXPECT_EQ(x.train_result, y.train_result);
      for (std::size_t l = 0; l < 8; ++l) {
        EXPECT_EQ(x.lanes[l].codewords, y.lanes[l].codewords) << c << "/" << p << "/" << l;
        EXPECT_EQ(x.lanes[l].symbol_errors, y.lanes[l].symbol_errors);
        EXPECT_EQ(x.lanes[l].fec_bins, y.lanes[l].fec_bins);
        EXPECT_DOUBLE_EQ(x.lanes[l].rx_power_mw, y.lanes[l].rx_power_mw);
      }
    }
  }
}

TEST(LinkMonitorEmu, FlappingPortIsHeldDownUntilReEnabled) {
  EmuRig rig("mesh8?clock=virtual&hbm=1M");
  ASSERT_TRUE(rig.ok());
  ASSERT_TRUE(npo::bring_up_links(*rig.sys, 10'000 * kMs).has_value());
  npo::LinkMonitor mon(*rig.sys);
  ASSERT_TRUE(mon.snapshot().has_value());
  // A retrain from Up counts as a flap (registers.md §7.2); five within 60 s trip the policy.
  npo::PortHealth h;
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(npo::retrain_port(rig.sys->device(0), 5).has_value());
    mon.sleep_ns(200 * kMs);
    auto s = mon.snapshot();
    ASSERT_TRUE(s.has_value());
    h = s->cards[0].health[5];
    if (i < 4) {
      EXPECT_NE(h.state, npo::PortState::kDisabled) << i << ": " << h.reason;
    }
  }
  EXPECT_EQ(h.state, npo::PortState::kDisabled);
  EXPECT_EQ(h.reason, "held down: 5 flaps in 60 s");
  auto ps = npo::read_port(rig.sys->device(0), 5);
  ASSERT_TRUE(ps.has_value());
  EXPECT_FALSE(ps->enabled);  // the monitor took it down
  EXPECT_EQ(ps->state, npo::LinkState::kDisabled);
  ASSERT_TRUE(mon.enable_port(0, 5).has_value());
  // The far end (card 6 port 0) gave up meanwhile (Fault after 3 attempts): the supervisor
  // brings both ends back.
  std::vector<npo::PortRef> ends{{0, 5}, {6, 0}};
  auto tr = npo::train_ports(*rig.sys, ends, {}, 10'000 * kMs);
  ASSERT_TRUE(tr.has_value());
  EXPECT_EQ((*tr)[0].code, TrainCode::kOk) << (*tr)[0].detail;
  EXPECT_EQ((*tr)[1].code, TrainCode::kOk) << (*tr)[1].detail;
  auto s = mon.snapshot();
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->cards[0].ports[5].state, npo::LinkState::kUp);
  EXPECT_EQ(s->cards[0].health[5].state, npo::PortState::kHealthy) << s->cards[0].health[5].reason;
}

TEST(LinkMonitorEmu, FlapsAreEventsAndTwoInFiveMinutesMakeAPortDegraded) {
  // Trial finding 7: a flap storm was invisible but for a counter. Each FLAP_COUNT step is a
  // "flap" event; 2 flaps within 300 s make an Up port DEGRADED naming the count; the state
  // clears when the window has fewer than 2 left. A fresh monitor reports the flaps since the
  // card's reset as history (the card keeps no times).
  EmuRig rig("mesh8?clock=virtual&hbm=1M");
  ASSERT_TRUE(rig.ok());
  ASSERT_TRUE(npo::bring_up_links(*rig.sys, 10'000 * kMs).has_value());
  npo::LinkMonitor mon(*rig.sys, {.limits = {}, .flap = {}, .enforce_flap_policy = false});
  ASSERT_TRUE(mon.snapshot().has_value());
  auto flap = [&]() -> npo::LinkSnapshot {
    EXPECT_TRUE(npo::retrain_port(rig.sys->device(0), 5).has_value());
    mon.sleep_ns(500 * kMs);
    auto s = mon.snapshot();
    EXPECT_TRUE(s.has_value());
    return s ? *s : npo::LinkSnapshot{};
  };
  auto find = [](const npo::LinkSnapshot& s, std::uint32_t card, unsigned port, const std::string& what) {
    for (const auto& e : s.events) {
      if (e.card == card && e.port == port && e.what == what) return e;
    }
    return npo::LinkEvent{};
  };
  auto s = flap();
  ASSERT_EQ(s.cards.size(), 8u);
  EXPECT_EQ(s.cards[0].health[5].state, npo::PortState::kHealthy) << s.cards[0].health[5].reason;  // one flap
  auto e = find(s, 0, 5, "flap");
  EXPECT_EQ(e.from, "0");
  EXPECT_EQ(e.to, "1");
  EXPECT_NE(e.reason.find("link went down and retrained 1 time since the last snapshot; 1 in the last 300 s"),
            std::string::npos)
      << e.reason;
  EXPECT_EQ(find(s, 6, 0, "flap").to, "1");  // the far end (card 6 port 0) flapped with it
  s = flap();
  const auto& h = s.cards[0].health[5];
  EXPECT_EQ(h.state, npo::PortState::kDegraded) << h.reason;
  EXPECT_EQ(h.reason, "up 8/8 lanes: 2 flaps in the last 300 s");
  EXPECT_TRUE(h.link_up);
  e = find(s, 0, 5, "port");
  EXPECT_EQ(e.from, "HEALTHY");
  EXPECT_EQ(e.to, "DEGRADED");
  EXPECT_EQ(find(s, 0, 5, "flap").to, "2");
  EXPECT_EQ(s.cards[6].health[0].state, npo::PortState::kDegraded) << s.cards[6].health[0].reason;
  // History for a monitor that starts now: the counts since reset.
  npo::LinkMonitor fresh(*rig.sys);
  auto f = fresh.snapshot();
  ASSERT_TRUE(f.has_value());
  e = find(*f, 0, 5, "flap");
  EXPECT_EQ(e.from, "-");
  EXPECT_EQ(e.to, "2");
  EXPECT_EQ(e.reason, "2 flaps since the card's reset (before this monitor: times unknown)");
  // 300 s without a flap: HEALTHY again.
  mon.sleep_ns(301'000 * kMs);
  s = *mon.snapshot();
  EXPECT_EQ(s.cards[0].health[5].state, npo::PortState::kHealthy) << s.cards[0].health[5].reason;
}

// ---- Link faults (need the emulator's physical optics model) -----------------------------

struct Mesh {
  EmuRig rig{"mesh8?clock=virtual&hbm=1M"};
  npo::Clock clock() { return rig.sys->clock(); }
  void sleep_ms(std::uint64_t ms) { clock().sleep_until(clock().now_ns() + ms * kMs); }
  bool up() {
    auto r = npo::bring_up_links(*rig.sys, 10'000 * kMs);
    return r && r->up == 56u;
  }
};

TEST(LinkFaults, BerRampGivesDegradedThenFailingWithReasons) {
  Mesh m;
  ASSERT_TRUE(m.rig.ok() && m.up());
  ASSERT_TRUE(optics_test::has_lane_model(m.rig)) << optics_test::kNoModel;
  npo::LinkMonitor mon(*m.rig.sys);
  ASSERT_TRUE(mon.snapshot().has_value());
  m.sleep_ms(100);
  ASSERT_TRUE(mon.snapshot().has_value());  // baseline interval
  ASSERT_TRUE(m.rig.emu->inject({.at_ns = m.rig.emu->now_ns(),
                                 .kind = emu::FaultKind::kBerRamp,
                                 .card = 0,
                                 .port = 0,
                                 .lane = 2,
                                 .value = 1e-3,
                                 .duration_ns = 4'000 * kMs}));
  std::vector<npo::LaneHealth> seen;
  std::string degraded_reason, failing_reason;
  for (int i = 0; i < 60; ++i) {
    m.sleep_ms(100);
    auto s = mon.snapshot();
    ASSERT_TRUE(s.has_value());
    const auto& h = s->cards[0].health[0];
    for (const auto& l : h.lanes) {
      if (l.lane != 2) continue;
      if (seen.empty() || seen.back() != l.verdict) seen.push_back(l.verdict);
      if (l.verdict == npo::LaneHealth::kDegraded && degraded_reason.empty()) degraded_reason = l.reasons.front();
      if (l.verdict == npo::LaneHealth::kFailing && failing_reason.empty()) failing_reason = l.reasons.front();
    }
    if (!seen.empty() && seen.back() == npo::LaneHealth::kFailing) break;
  }
  ASSERT_GE(seen.size(), 2u);
  const auto deg = std::find(seen.begin(), seen.end(), npo::LaneHealth::kDegraded);
  const auto fail = std::find(seen.begin(), seen.end(), npo::LaneHealth::kFailing);
  ASSERT_NE(deg, seen.end());
  ASSERT_NE(fail, seen.end());
  EXPECT_LT(deg, fail);
  EXPECT_NE(degraded_reason.find("pre-FEC BER"), std::string::npos) << degraded_reason;
  EXPECT_TRUE(failing_reason.find("KP4 limit 2.4e-04") != std::string::npos ||
              failing_reason.find("FEC tail") != std::string::npos ||
              failing_reason.find("uncorrectable") != std::string::npos)
      << failing_reason;
}

TEST(LinkFaults, RegisterReadsOfLiveCountersNeverShowAPartAboveItsTotal) {
  // Trial finding 18: a FEC bin above CORRECTED in `npo-link fec --watch`. The card does not
  // snapshot a lane's counters (registers.md §7.3) and, on the real-time clock, they grow
  // between two register reads; read_port reads the parts before their totals.
  EmuRig rig("mesh8?hbm=1M");  // real-time clock: codewords arrive between reads
  ASSERT_TRUE(rig.ok());
  auto up = npo::bring_up_links(*rig.sys, 10'000 * kMs);
  ASSERT_TRUE(up && up->up == 56u);
  ASSERT_TRUE(optics_test::has_lane_model(rig)) << optics_test::kNoModel;
  ASSERT_TRUE(rig.emu->inject({.at_ns = rig.emu->now_ns(),
                               .kind = emu::FaultKind::kBerRamp,
                               .card = 0,
                               .port = 0,
                               .value = 2e-3,
                               .duration_ns = 1 * kMs}));
  std::uint64_t grew = 0;
  std::uint64_t last_corrected = 0;
  for (int i = 0; i < 300; ++i) {
    auto ps = npo::read_port(rig.sys->device(0), 0);
    ASSERT_TRUE(ps.has_value()) << ps.error().to_string();
    for (const auto& l : ps->lanes) {
      std::uint64_t parts = l.uncorrectable, bins_corrected = 0, weighted = 0;
      for (unsigned n = 0; n < l.fec_bins.size(); ++n) {
        parts += l.fec_bins[n];
        if (n > 0) bins_corrected += l.fec_bins[n];
        weighted += n * l.fec_bins[n];
      }
      ASSERT_LE(bins_corrected, l.corrected) << "read " << i;
      ASSERT_LE(parts, l.codewords) << "read " << i;
      ASSERT_LE(weighted, l.symbol_errors) << "read " << i;
      ASSERT_LE(l.prbs_errors, l.prbs_bits) << "read " << i;
    }
    if (ps->lanes.at(0).corrected > last_corrected) ++grew;
    last_corrected = ps->lanes.at(0).corrected;
  }
  EXPECT_GT(grew, 100u) << "the counters must be moving for the reads to race them";
}

TEST(LinkFaults, OneShotSampleReportsALaneThatIsDegradedNow) {
  // Trial finding 3: after 30 s of clean link a lane ramps to 1e-4. Its average since link-up
  // stays under the 1e-5 warning level, so a monitor whose first snapshot judges the counters
  // since clear starts GOOD, and one more interval cannot worsen it (hysteresis needs 2).
  // LinkMonitor::sample takes those counters as history and samples 2 intervals: DEGRADED,
  // with the BER of the last interval.
  Mesh m;
  ASSERT_TRUE(m.rig.ok() && m.up());
  ASSERT_TRUE(optics_test::has_lane_model(m.rig)) << optics_test::kNoModel;
  m.sleep_ms(30'000);
  ASSERT_TRUE(m.rig.emu->inject({.at_ns = m.rig.emu->now_ns(),
                                 .kind = emu::FaultKind::kBerRamp,
                                 .card = 5,
                                 .port = 2,
                                 .value = 1e-4,
                                 .duration_ns = 500 * kMs}));
  m.sleep_ms(1'000);
  {
    // The old one-shot: two snapshots 1 s apart.
    npo::LinkMonitor old(*m.rig.sys);
    auto s0 = old.snapshot();
    ASSERT_TRUE(s0.has_value());
    ASSERT_FALSE(s0->cards[5].health[2].lanes.empty());
    EXPECT_LT(*s0->cards[5].health[2].lanes[0].ber, 1e-5);  // the average since link-up
    old.sleep_ns(1'000 * kMs);
    auto s1 = old.snapshot();
    ASSERT_TRUE(s1.has_value());
    EXPECT_EQ(s1->cards[5].health[2].state, npo::PortState::kHealthy);
  }
  npo::LinkMonitor mon(*m.rig.sys);
  auto s = mon.sample(500 * kMs);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->interval_ns, 500 * kMs);
  const auto& h = s->cards[5].health[2];
  EXPECT_EQ(h.state, npo::PortState::kDegraded) << h.reason;
  ASSERT_EQ(h.lanes.size(), 8u);
  for (const auto& l : h.lanes) {
    EXPECT_EQ(l.verdict, npo::LaneHealth::kDegraded) << l.lane;
    ASSERT_TRUE(l.ber.has_value());
    EXPECT_GT(*l.ber, 7e-5) << l.lane;  // the last interval's, not the average since link-up
    EXPECT_LT(*l.ber, 1.5e-4) << l.lane;
    ASSERT_TRUE(l.baseline_ber.has_value());
    EXPECT_LT(*l.baseline_ber, 1e-5);  // the counters since clear became the baseline
  }
  // Lane verdict events of the sampling are in the returned snapshot.
  bool lane_event = false;
  for (const auto& e : s->events) {
    if (e.card == 5 && e.port == 2 && e.what == "lane" && e.to == "DEGRADED") lane_event = true;
  }
  EXPECT_TRUE(lane_event);
  // A clean port stays HEALTHY; the far end (card 2 port 4) sees the same ramp.
  EXPECT_EQ(s->cards[0].health[0].state, npo::PortState::kHealthy) << s->cards[0].health[0].reason;
  EXPECT_EQ(s->cards[2].health[4].state, npo::PortState::kDegraded) << s->cards[2].health[4].reason;
}

TEST(LinkFaults, LaneLossDegradesToSevenLanesNamingTheLane) {
  Mesh m;
  ASSERT_TRUE(m.rig.ok() && m.up());
  ASSERT_TRUE(optics_test::has_lane_model(m.rig)) << optics_test::kNoModel;
  ASSERT_TRUE(m.rig.emu->inject(
      {.at_ns = m.rig.emu->now_ns(), .kind = emu::FaultKind::kLaneLoss, .card = 0, .port = 0, .lane = 3}));
  m.sleep_ms(20);
  // Card 0 port 0 <-> card 1 port 0 in mesh8.
  std::vector<npo::PortRef> ends{{0, 0}, {1, 0}};
  auto r = npo::train_ports(*m.rig.sys, ends, {}, 20'000 * kMs, true);
  ASSERT_TRUE(r.has_value());
  const auto& a = (*r)[0];
  EXPECT_EQ(a.code, TrainCode::kOk) << a.detail;
  EXPECT_EQ(a.lanes_up, 7u);
  EXPECT_EQ(a.dropped_lanes | (*r)[1].dropped_lanes, 1u << 3);
  bool cdr_failure = false;
  for (const auto& at : a.attempts) cdr_failure = cdr_failure || at.code == TrainCode::kTimeoutCdrLock;
  EXPECT_TRUE(cdr_failure);
  if (a.dropped_lanes != 0) {
    EXPECT_EQ(a.detail, "up 7/8 lanes: lane 3 dropped (no CDR lock)");
  }
  npo::LinkMonitor mon(*m.rig.sys);
  mon.note_training(*r);
  auto s = mon.snapshot();
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->cards[0].health[0].state, npo::PortState::kDegraded);
  EXPECT_EQ(s->cards[0].ports[0].lane_enable & (1u << 3), 0u);
}

TEST(LinkFaults, LaneLossDuringBringUpLeavesBothEndsUpNarrowerAndAgreeing) {
  // A lane goes dark while mesh8 trains (the README's scenario): one end's supervisor
  // degrades the link, the partner retrains with it, and bring_up_links returns only when
  // both ends hold Up on the same 7 lanes; both report DEGRADED and the topology says 7.
  optics_test::EmuRig rig("mesh8?clock=virtual&hbm=1M");
  ASSERT_TRUE(rig.ok());
  ASSERT_TRUE(rig.emu->load_scenario_text("faults: [{at_ms: 60, kind: lane_loss, card: 2, port: 0, lane: 3}]"));
  auto up = npo::bring_up_links(*rig.sys);
  ASSERT_TRUE(up.has_value());
  EXPECT_EQ(up->up, 56u);
  EXPECT_EQ(up->failed, 0u);
  EXPECT_EQ(up->degraded, 1u);
  // Card 2 port 0 <-> card 0 port 1 in mesh8.
  for (const auto& [card, port] : {std::pair{2u, 0u}, std::pair{0u, 1u}}) {
    auto ps = npo::read_port(rig.sys->device(card), port);
    ASSERT_TRUE(ps.has_value());
    EXPECT_EQ(ps->state, npo::LinkState::kUp) << card << ":" << port;
    EXPECT_EQ(ps->lane_count, 7u) << card << ":" << port;
    EXPECT_EQ(npo::lanes_in_use(*ps), 0xf7u) << card << ":" << port;
  }
  npo::LinkMonitor mon(*rig.sys);
  mon.note_training(up->ports);
  auto s = mon.snapshot();
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->cards[2].health[0].state, npo::PortState::kDegraded) << s->cards[2].health[0].reason;
  EXPECT_EQ(s->cards[0].health[1].state, npo::PortState::kDegraded) << s->cards[0].health[1].reason;
  auto topo = npo::discover_topology(*rig.sys);
  ASSERT_TRUE(topo.has_value());
  unsigned up_links = 0, narrow = 0;
  for (const auto& l : topo->links) {
    up_links += l.up ? 1 : 0;
    narrow += l.up && l.lanes == 7 ? 1 : 0;
  }
  EXPECT_EQ(up_links, 28u);
  EXPECT_EQ(narrow, 1u);
}

// Issue 19: a flap_storm with count 2^32-1 scheduled every flap at once when it fired (the
// emulator looped 4 billion times, memory grew by GBs; advance() and the destructor never
// returned). Each flap now schedules the next: this advance returns, and 1 s of emulated
// time 50 ms apart holds at most 21 drops.
TEST(LinkFaults, HugeFlapStormCountIsScheduledOneFlapAtATime) {
  EmuRig rig("mesh8?clock=virtual&hbm=1M");
  ASSERT_TRUE(rig.ok());
  auto up = npo::bring_up_links(*rig.sys);
  ASSERT_TRUE(up.has_value());
  ASSERT_EQ(up->up, 56u);
  ASSERT_TRUE(
      rig.emu->load_scenario_text("faults: [{at_ns: " + std::to_string(rig.emu->now_ns()) +
                                  ", kind: flap_storm, card: 0, port: 1, count: 4294967295, duration_ms: 50}]"));
  rig.advance_ms(1000);
  unsigned drops = 0;
  for (const auto& line : rig.emu->event_log()) drops += line.find("link drop (flap_storm)") != std::string::npos;
  EXPECT_GE(drops, 1u);
  EXPECT_LE(drops, 21u);
}

// Issue 19: a card removed under a LinkMonitor: the next snapshot comes back at once (no
// hang on the stats DMA the card will never write) and names the removed card, either as
// its error or (issue 18) by showing the live cards without it.
TEST(LinkFaults, SurpriseRemovalUnderALinkMonitorNamesTheCard) {
  EmuRig rig("mesh8?clock=virtual&hbm=1M");
  ASSERT_TRUE(rig.ok());
  auto up = npo::bring_up_links(*rig.sys);
  ASSERT_TRUE(up.has_value());
  npo::LinkMonitor mon(*rig.sys);
  ASSERT_TRUE(mon.snapshot().has_value());
  ASSERT_TRUE(rig.emu->inject({.at_ns = rig.emu->now_ns(), .kind = emu::FaultKind::kSurpriseRemoval, .card = 2}));
  rig.advance_ms(1);
  const auto t0 = std::chrono::steady_clock::now();
  auto s = mon.snapshot();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  if (!s) {
    EXPECT_EQ(s.error().code(), npo::Code::kUnavailable) << s.error().to_string();
    EXPECT_NE(s.error().to_string().find("card=2"), std::string::npos) << s.error().to_string();
  } else {
    EXPECT_GE(s->cards.size(), 7u);
  }
  // Bringing the links up again refuses at once, naming the card.
  auto again = npo::bring_up_links(*rig.sys);
  ASSERT_FALSE(again.has_value());
  EXPECT_EQ(again.error().code(), npo::Code::kUnavailable);
  EXPECT_NE(again.error().to_string().find("card=2"), std::string::npos) << again.error().to_string();
}

// Issue 19: a lane_loss whose duration is the largest 64-bit time wrapped (now + duration)
// and never took effect; it now lasts "forever".
TEST(LinkFaults, LaneLossWithTheLargestDurationTakesEffect) {
  EmuRig rig("mesh8?clock=virtual&hbm=1M");
  ASSERT_TRUE(rig.ok());
  auto up = npo::bring_up_links(*rig.sys);
  ASSERT_TRUE(up.has_value());
  ASSERT_EQ(up->up, 56u);
  ASSERT_TRUE(
      rig.emu->load_scenario_text("faults: [{at_ns: " + std::to_string(rig.emu->now_ns()) +
                                  ", kind: lane_loss, card: 0, port: 0, lane: 3, duration_ns: 18446744073709551615}]"));
  for (int i = 0; i < 2; ++i) {
    rig.advance_ms(500);
    auto ps = npo::read_port(rig.sys->device(0), 0);
    ASSERT_TRUE(ps.has_value());
    ASSERT_EQ(ps->lanes.size(), 8u);
    EXPECT_FALSE(ps->lanes[3].signal) << "after " << (i + 1) * 500 << " ms";
    EXPECT_TRUE(ps->lanes[2].signal);
  }
}

TEST(LinkFaults, FlapStormHoldsThePortDown) {
  Mesh m;
  ASSERT_TRUE(m.rig.ok() && m.up());
  ASSERT_TRUE(optics_test::has_lane_model(m.rig)) << optics_test::kNoModel;
  npo::LinkMonitor mon(*m.rig.sys);
  ASSERT_TRUE(mon.snapshot().has_value());
  ASSERT_TRUE(m.rig.emu->inject({.at_ns = m.rig.emu->now_ns(),
                                 .kind = emu::FaultKind::kFlapStorm,
                                 .card = 0,
                                 .port = 1,
                                 .count = 8,
                                 .duration_ns = 50 * kMs}));
  npo::PortHealth last;
  for (int i = 0; i < 30; ++i) {
    m.sleep_ms(100);
    auto s = mon.snapshot();
    ASSERT_TRUE(s.has_value());
    last = s->cards[0].health[1];
    if (last.state == npo::PortState::kDisabled) break;
  }
  EXPECT_EQ(last.state, npo::PortState::kDisabled);
  EXPECT_NE(last.reason.find("held down: "), std::string::npos) << last.reason;
  EXPECT_NE(last.reason.find("flaps in 60 s"), std::string::npos) << last.reason;
  // Re-enabled by the host (and the far end, card 2 port 0, retrained), the port comes back.
  ASSERT_TRUE(mon.enable_port(0, 1).has_value());
  std::vector<npo::PortRef> ends{{0, 1}, {2, 0}};
  auto tr = npo::train_ports(*m.rig.sys, ends, {}, 20'000 * kMs);
  ASSERT_TRUE(tr.has_value());
  EXPECT_EQ((*tr)[0].code, TrainCode::kOk) << (*tr)[0].detail;
  auto s = mon.snapshot();
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->cards[0].ports[1].state, npo::LinkState::kUp);
}

TEST(LinkFaults, ModuleRemovalIsNoModuleThenBackUp) {
  Mesh m;
  ASSERT_TRUE(m.rig.ok() && m.up());
  ASSERT_TRUE(optics_test::has_lane_model(m.rig)) << optics_test::kNoModel;
  ASSERT_TRUE(m.rig.emu->inject({.at_ns = m.rig.emu->now_ns(),
                                 .kind = emu::FaultKind::kModuleRemoval,
                                 .card = 0,
                                 .port = 2,
                                 .duration_ns = 500 * kMs}));
  m.sleep_ms(1);
  std::vector<npo::PortRef> port{{0, 2}};
  auto r = npo::train_ports(*m.rig.sys, port, {}, 10'000 * kMs);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ((*r)[0].code, TrainCode::kNoModule) << (*r)[0].detail;
  m.sleep_ms(600);  // re-inserted
  r = npo::train_ports(*m.rig.sys, port, {}, 10'000 * kMs);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ((*r)[0].code, TrainCode::kOk) << (*r)[0].detail;
}

TEST(LinkFaults, TrainingTimeoutIsCdrLockThenOkWithinTheBudget) {
  Mesh m;
  ASSERT_TRUE(m.rig.ok() && m.up());
  ASSERT_TRUE(optics_test::has_lane_model(m.rig)) << optics_test::kNoModel;
  ASSERT_TRUE(m.rig.emu->inject(
      {.at_ns = m.rig.emu->now_ns(), .kind = emu::FaultKind::kTrainingTimeout, .card = 0, .port = 3, .count = 2}));
  // Card 0 port 3 <-> card 4 port 0.
  std::vector<npo::PortRef> ends{{0, 3}, {4, 0}};
  auto r = npo::train_ports(*m.rig.sys, ends, {}, 20'000 * kMs, true);
  ASSERT_TRUE(r.has_value());
  const auto& a = (*r)[0];
  EXPECT_EQ(a.code, TrainCode::kOk) << a.detail;
  ASSERT_FALSE(a.attempts.empty());
  EXPECT_EQ(a.attempts.front().code, TrainCode::kTimeoutCdrLock);
  EXPECT_EQ(a.attempts.back().code, TrainCode::kOk);
  EXPECT_EQ(a.lanes_up, 8u);  // every lane failed alike: no degrade
}

// Issue 18: a training_timeout injected on a live link made the port report no CDR lock on
// every lane while the card kept it Up ("FAILED ... up 8/8 lanes: lane 0 DOWN", JSON
// link_state up) and the far end said HEALTHY. The fault is one of the next training: the
// live link keeps its lock, both ends stay HEALTHY, and the next training fails as asked.
TEST(LinkFaults, TrainingTimeoutOnALiveLinkLeavesItUpWithLock) {
  Mesh m;
  ASSERT_TRUE(m.rig.ok() && m.up());
  ASSERT_TRUE(optics_test::has_lane_model(m.rig)) << optics_test::kNoModel;
  ASSERT_TRUE(m.rig.emu->inject(
      {.at_ns = m.rig.emu->now_ns(), .kind = emu::FaultKind::kTrainingTimeout, .card = 0, .port = 3, .count = 1}));
  npo::LinkMonitor mon(*m.rig.sys);
  for (int i = 0; i < 3; ++i) {
    m.sleep_ms(100);
    auto ps = npo::read_port(m.rig.sys->device(0), 3);
    ASSERT_TRUE(ps.has_value());
    EXPECT_EQ(ps->state, npo::LinkState::kUp);
    EXPECT_EQ(ps->lanes_up, 0xffu);
    auto s = mon.snapshot();
    ASSERT_TRUE(s.has_value());
    // Card 0 port 3 <-> card 4 port 0.
    for (const auto& [card, port] : {std::pair{0u, 3u}, std::pair{4u, 0u}}) {
      const auto& h = s->cards[card].health[port];
      EXPECT_EQ(h.state, npo::PortState::kHealthy) << card << ":" << port << " " << h.reason;
      EXPECT_TRUE(h.link_up);
    }
  }
  std::vector<npo::PortRef> ends{{0, 3}, {4, 0}};
  auto r = npo::train_ports(*m.rig.sys, ends, {}, 20'000 * kMs, true);
  ASSERT_TRUE(r.has_value());
  ASSERT_FALSE((*r)[0].attempts.empty());
  EXPECT_EQ((*r)[0].attempts.front().code, TrainCode::kTimeoutCdrLock);
  EXPECT_EQ((*r)[0].code, TrainCode::kOk);
}

// Issue 18: a lane_loss on a live link left the port at "training failed: card in Fault"
// forever. The card retrains on its own, fails on the dark lane and gives up (Fault, as the
// spec says: the port needs host action); the port's reason says so and that a retrain runs
// narrower, and the host retrain (train_ports, `npo-link train`) brings it up on 7/8 lanes.
TEST(LinkFaults, LaneLossOnALiveLinkSaysWhyAndRetrainsNarrower) {
  Mesh m;
  ASSERT_TRUE(m.rig.ok() && m.up());
  ASSERT_TRUE(optics_test::has_lane_model(m.rig)) << optics_test::kNoModel;
  npo::LinkMonitor mon(*m.rig.sys);
  ASSERT_TRUE(mon.snapshot().has_value());
  ASSERT_TRUE(m.rig.emu->inject(
      {.at_ns = m.rig.emu->now_ns(), .kind = emu::FaultKind::kLaneLoss, .card = 0, .port = 0, .lane = 3}));
  npo::PortHealth h;
  npo::PortStatus ps;
  for (int i = 0; i < 60; ++i) {
    m.sleep_ms(100);
    auto s = mon.snapshot();
    ASSERT_TRUE(s.has_value());
    h = s->cards[0].health[0];
    ps = s->cards[0].ports[0];
    if (ps.state == npo::LinkState::kFault) break;
  }
  ASSERT_EQ(ps.state, npo::LinkState::kFault);
  EXPECT_EQ(h.state, npo::PortState::kFailed);
  EXPECT_FALSE(h.link_up);
  EXPECT_EQ(h.reason.find("card in Fault"), std::string::npos) << h.reason;
  EXPECT_NE(h.reason.find("port in Fault after 3 attempts: TIMEOUT_CDR_LOCK, lane 3 without CDR lock"),
            std::string::npos)
      << h.reason;
  EXPECT_NE(h.reason.find("runs on the other 7/8 lanes"), std::string::npos) << h.reason;
  // Card 0 port 0 <-> card 1 port 0.
  std::vector<npo::PortRef> ends{{0, 0}, {1, 0}};
  auto r = npo::train_ports(*m.rig.sys, ends, {}, 20'000 * kMs, true);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ((*r)[0].code, TrainCode::kOk) << (*r)[0].detail;
  EXPECT_EQ((*r)[0].lanes_up, 7u);
  mon.note_training(*r);
  auto s = mon.snapshot();
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->cards[0].health[0].state, npo::PortState::kDegraded) << s->cards[0].health[0].reason;
  EXPECT_TRUE(s->cards[0].health[0].link_up);
}

// Issue 18: a removed module made its port vanish; issue 19 item 8: one removed card made the
// whole snapshot fail ("card removed [card=2]"). The snapshot marks the card, reads the
// others, reports the removed module as FAILED, and records both as events.
TEST(LinkMonitorEmu, RemovedModuleAndRemovedCardAreReportedNotFatal) {
  Mesh m;
  ASSERT_TRUE(m.rig.ok() && m.up());
  npo::LinkMonitor mon(*m.rig.sys);
  ASSERT_TRUE(mon.snapshot().has_value());
  ASSERT_TRUE(
      m.rig.emu->inject({.at_ns = m.rig.emu->now_ns(), .kind = emu::FaultKind::kModuleRemoval, .card = 1, .port = 5}));
  ASSERT_TRUE(m.rig.emu->inject({.at_ns = m.rig.emu->now_ns(), .kind = emu::FaultKind::kSurpriseRemoval, .card = 2}));
  m.sleep_ms(50);
  auto s = mon.snapshot();
  ASSERT_TRUE(s.has_value()) << s.error().to_string();
  ASSERT_EQ(s->cards.size(), 8u);
  EXPECT_TRUE(s->cards[2].removed);
  EXPECT_TRUE(s->cards[2].ports.empty());
  for (unsigned c : {0u, 1u, 3u, 7u}) {
    EXPECT_FALSE(s->cards[c].removed);
    EXPECT_EQ(s->cards[c].ports.size(), 8u);
  }
  const auto& lost = s->cards[1].health[5];
  EXPECT_EQ(lost.state, npo::PortState::kFailed);
  EXPECT_TRUE(lost.module_lost);
  EXPECT_EQ(lost.reason, "module removed");
  // Card 0 port 1 <-> card 2 port 0: its far end is gone, so it is not up.
  EXPECT_EQ(s->cards[0].health[1].state, npo::PortState::kFailed) << s->cards[0].health[1].reason;
  EXPECT_FALSE(s->cards[0].health[1].link_up);
  bool card_event = false, module_event = false;
  for (const auto& e : s->events) {
    card_event = card_event || (e.what == "card" && e.card == 2 && e.to == "removed");
    module_event = module_event || (e.what == "module" && e.card == 1 && e.port == 5u && e.to == "removed");
  }
  EXPECT_TRUE(card_event);
  EXPECT_TRUE(module_event);
}

// Issue 18: "a link is up only when both ends are, with lock". Right after the host disables
// one end (before the other end's 10 ms link-loss debounce), the other end's card still says
// Up; the monitor reports it down (no lock, or its far end not up), never "up 8/8 lanes".
TEST(LinkMonitorEmu, AnUpPortWhoseFarEndIsDownIsNotUp) {
  Mesh m;
  ASSERT_TRUE(m.rig.ok() && m.up());
  npo::LinkMonitor mon(*m.rig.sys);
  ASSERT_TRUE(mon.snapshot().has_value());
  // Card 0 port 0 <-> card 1 port 0: take card 1's end down; no emulated time passes.
  ASSERT_TRUE(npo::enable_port(m.rig.sys->device(1), 0, false).has_value());
  auto s = mon.snapshot();
  ASSERT_TRUE(s.has_value());
  ASSERT_EQ(s->cards[0].ports[0].state, npo::LinkState::kUp);  // the card has not noticed yet
  const auto& h = s->cards[0].health[0];
  EXPECT_EQ(h.state, npo::PortState::kFailed) << h.reason;
  EXPECT_FALSE(h.link_up);
  EXPECT_EQ(h.reason.rfind("down: ", 0), 0u) << h.reason;
  EXPECT_EQ(h.reason.find("up 8/8"), std::string::npos) << h.reason;
  EXPECT_EQ(s->cards[1].health[0].state, npo::PortState::kDisabled);
}

}  // namespace
