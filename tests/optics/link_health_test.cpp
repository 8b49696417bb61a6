// SPDX-License-Identifier: Apache-2.0
// Lane health verdicts, port states and the flap damper on synthetic counter series: pure
// logic, no emulator. Limits from registers.md §7.3 and link_health.hpp.
#include "npo/hal/link_health.hpp"

#include <span>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "npo/hal/link_training.hpp"

namespace {

using npo::LaneCounters;
using npo::LaneHealth;
using npo::LaneHealthTracker;
using npo::PortState;

/// Counters after `cw` codewords whose symbol errors give `ber` (one bit per symbol error),
/// added to `base`.
LaneCounters advance(const LaneCounters& base, std::uint64_t cw, double ber, std::uint64_t unc = 0,
                     std::uint64_t tail12 = 0) {
  LaneCounters c = base;
  const auto se = static_cast<std::uint64_t>(ber * 5440.0 * static_cast<double>(cw) + 0.5);
  c.codewords += cw;
  c.symbol_errors += se;
  c.uncorrectable += unc;
  c.fec_bins[12] += tail12;
  c.fec_bins[1] += se;  // rough: spread does not matter to the rules under test
  c.fec_bins[0] += cw - std::min(cw, se + unc + tail12);
  c.signal = true;
  c.cdr_lock = true;
  return c;
}

bool has_reason(const std::vector<std::string>& rs, const std::string& needle) {
  for (const auto& r : rs) {
    if (r.find(needle) != std::string::npos) return true;
  }
  return false;
}

constexpr std::uint64_t kCw = 100'000'000;  // ~5 s of a 106.25 Gb/s lane

TEST(PreFecBer, FormulaOfRegistersMd73) {
  LaneCounters a, b;
  b.codewords = 1'000'000;
  b.symbol_errors = 544;
  b.uncorrectable = 2;
  // (544 + 16 * 2) / (5440 * 1e6) = 576 / 5.44e9
  ASSERT_TRUE(npo::pre_fec_ber(a, b).has_value());
  EXPECT_DOUBLE_EQ(*npo::pre_fec_ber(a, b), 576.0 / 5.44e9);
  EXPECT_FALSE(npo::pre_fec_ber(b, b).has_value());  // no codewords: undefined, not 0
  // A cleared counter (went backwards) counts from 0.
  LaneCounters c;
  c.codewords = 10;
  c.symbol_errors = 0;
  EXPECT_DOUBLE_EQ(*npo::pre_fec_ber(b, c), 0.0);
}

TEST(LaneHealth, KP4LimitIsFailingAndWarningIsDegraded) {
  npo::HealthLimits lim;
  EXPECT_DOUBLE_EQ(lim.ber_failing, 2.4e-4);
  EXPECT_DOUBLE_EQ(lim.ber_warning, 1e-5);
  LaneCounters z;
  auto a = npo::assess_lane(z, advance(z, kCw, 3e-4), true, {}, nullptr, std::nullopt, false, lim);
  EXPECT_EQ(a.level, LaneHealth::kFailing);
  ASSERT_TRUE(a.ber.has_value());
  EXPECT_NEAR(*a.ber, 3e-4, 1e-9);
  EXPECT_TRUE(has_reason(a.reasons, "above the KP4 limit 2.4e-04")) << a.reasons.front();
  EXPECT_TRUE(has_reason(a.reasons, "3.00e-04"));
  a = npo::assess_lane(z, advance(z, kCw, 2.3e-4), true, {}, nullptr, std::nullopt, false, lim);
  EXPECT_EQ(a.level, LaneHealth::kDegraded);  // below the KP4 limit, above the warning
  EXPECT_TRUE(has_reason(a.reasons, "above the warning level 1.0e-05"));
  a = npo::assess_lane(z, advance(z, kCw, 5e-6), true, {}, nullptr, std::nullopt, false, lim);
  EXPECT_EQ(a.level, LaneHealth::kGood);
  EXPECT_TRUE(a.reasons.empty());
}

TEST(LaneHealth, HundredTimesWorseThanBaselineIsDegraded) {
  npo::HealthLimits lim;
  lim.worsen_intervals = 1;
  LaneHealthTracker t(lim);
  LaneCounters c0, c1 = advance(c0, kCw, 1e-8);
  auto r = t.update(c0, c1, true);
  EXPECT_EQ(r.verdict, LaneHealth::kGood);
  ASSERT_TRUE(t.baseline().has_value());
  EXPECT_NEAR(*t.baseline(), 1e-8, 1e-10);
  // The lane goes down, then comes back at 2e-6: below the warning level but 200x baseline.
  r = t.update(c1, c1, false);
  EXPECT_EQ(r.verdict, LaneHealth::kDown);
  LaneCounters c2 = advance(c1, kCw, 2e-6);
  r = t.update(c1, c2, true);
  EXPECT_EQ(r.verdict, LaneHealth::kDegraded);
  EXPECT_TRUE(has_reason(r.reasons, "came back 200x worse")) << r.reasons.front();
  EXPECT_TRUE(has_reason(r.reasons, "baseline 1.00e-08"));
  // 50x is not enough.
  LaneHealthTracker t2(lim);
  t2.set_baseline(1e-8);
  LaneCounters d1 = advance(c0, kCw, 5e-7);
  EXPECT_EQ(t2.update(c0, d1, true).verdict, LaneHealth::kGood);
}

TEST(LaneHealth, BaselineFloorAndMinimumErrorCount) {
  npo::HealthLimits lim;
  LaneCounters z;
  // Baseline 0 (a clean lane) is floored at 1e-9: 5e-8 is only 50x the floor.
  auto a = npo::assess_lane(z, advance(z, kCw, 5e-8), true, {}, nullptr, 0.0, false, lim);
  EXPECT_EQ(a.level, LaneHealth::kGood);
  // Too few errors to tell (1 error in 1000 codewords gives BER 1.8e-7 but proves little).
  LaneCounters few = z;
  few.codewords = 1000;
  few.symbol_errors = 1;
  a = npo::assess_lane(z, few, true, {}, nullptr, 1e-12, false, lim);
  EXPECT_EQ(a.level, LaneHealth::kGood);
}

TEST(LaneHealth, FecTailAndUncorrectableAreFailing) {
  npo::HealthLimits lim;
  LaneCounters z;
  auto a = npo::assess_lane(z, advance(z, kCw, 1e-7, 0, 3), true, {}, nullptr, std::nullopt, false, lim);
  EXPECT_EQ(a.level, LaneHealth::kFailing);
  EXPECT_EQ(a.tail_codewords, 3u);
  EXPECT_TRUE(has_reason(a.reasons, "FEC tail: 3 codewords with >= 12 symbol errors"));
  a = npo::assess_lane(z, advance(z, kCw, 1e-7, 1), true, {}, nullptr, std::nullopt, false, lim);
  EXPECT_EQ(a.level, LaneHealth::kFailing);
  EXPECT_TRUE(has_reason(a.reasons, "1 uncorrectable codewords"));
  // Bins below 12 are not the tail.
  LaneCounters b = advance(z, kCw, 1e-7);
  b.fec_bins[11] += 50;
  a = npo::assess_lane(z, b, true, {}, nullptr, std::nullopt, false, lim);
  EXPECT_EQ(a.level, LaneHealth::kGood);
}

TEST(LaneHealth, DdmAlarmsWarningsLosAndTxFault) {
  npo::HealthLimits lim;
  npo::xcvr::Thresholds th;
  th.rx_power_mw =
      npo::xcvr::ThresholdSet{.high_alarm = 3.0, .low_alarm = 0.05, .high_warning = 2.0, .low_warning = 0.1};
  LaneCounters z, c = advance(z, kCw, 1e-8);
  c.rx_power_mw = 0.03;
  auto a = npo::assess_lane(z, c, true, {}, &th, std::nullopt, false, lim);
  EXPECT_EQ(a.level, LaneHealth::kFailing);
  EXPECT_TRUE(has_reason(a.reasons, "rx power 0.0300 mW below low alarm 0.0500 mW"));
  c.rx_power_mw = 0.08;
  a = npo::assess_lane(z, c, true, {}, &th, std::nullopt, false, lim);
  EXPECT_EQ(a.level, LaneHealth::kDegraded);
  EXPECT_TRUE(has_reason(a.reasons, "below low warning 0.1000 mW"));
  c.rx_power_mw = 0.5;
  a = npo::assess_lane(z, c, true, {.rx_los = true, .tx_fault = false}, &th, std::nullopt, false, lim);
  EXPECT_EQ(a.level, LaneHealth::kFailing);
  EXPECT_TRUE(has_reason(a.reasons, "Rx LOS"));
  a = npo::assess_lane(z, c, true, {.rx_los = false, .tx_fault = true}, &th, std::nullopt, false, lim);
  EXPECT_TRUE(has_reason(a.reasons, "Tx fault"));
  a = npo::assess_lane(z, c, false, {}, &th, std::nullopt, false, lim);
  EXPECT_EQ(a.level, LaneHealth::kDown);
}

TEST(LaneHealth, HysteresisToWorsenAndToRecover) {
  npo::HealthLimits lim;  // K = 2 to worsen, M = 3 to recover
  EXPECT_EQ(lim.worsen_intervals, 2u);
  EXPECT_EQ(lim.recover_intervals, 3u);
  LaneHealthTracker t(lim);
  LaneCounters c = advance(LaneCounters{}, kCw, 1e-8), prev;
  EXPECT_EQ(t.update(prev, c, true).verdict, LaneHealth::kGood);
  auto step = [&](double ber, std::uint64_t unc = 0) {
    prev = c;
    c = advance(c, kCw, ber, unc);
    return t.update(prev, c, true);
  };
  // One bad interval is not enough.
  auto r = step(3e-4);
  EXPECT_EQ(r.raw, LaneHealth::kFailing);
  EXPECT_EQ(r.verdict, LaneHealth::kGood);
  EXPECT_EQ(r.pending, 1u);
  EXPECT_TRUE(has_reason(r.reasons, "verdict stays GOOD (needs 2)"));
  // A good interval in between resets the run.
  EXPECT_EQ(step(1e-8).verdict, LaneHealth::kGood);
  EXPECT_EQ(step(3e-4).verdict, LaneHealth::kGood);
  r = step(3e-4);
  EXPECT_EQ(r.verdict, LaneHealth::kFailing);
  // Recovery needs 3 consecutive better intervals; the level reported is the worst of them.
  EXPECT_EQ(step(1e-8).verdict, LaneHealth::kFailing);
  EXPECT_EQ(step(2e-5).verdict, LaneHealth::kFailing);
  r = step(1e-8);
  EXPECT_EQ(r.verdict, LaneHealth::kDegraded);
  EXPECT_TRUE(has_reason(r.reasons, "GOOD for"));
  // GOOD needs 3 consecutive GOOD intervals, and the one that settled DEGRADED was one.
  r = step(1e-8);
  EXPECT_EQ(r.verdict, LaneHealth::kDegraded);
  EXPECT_EQ(r.pending, 2u);
  EXPECT_NE(r.verdict_reason.find("(GOOD for 2 of 3 intervals)"), std::string::npos) << r.verdict_reason;
  EXPECT_EQ(step(1e-8).verdict, LaneHealth::kGood);
  // A mixed worsening run (DEGRADED then FAILING) reports the level that persisted.
  step(2e-5);
  r = step(3e-4);
  EXPECT_EQ(r.verdict, LaneHealth::kDegraded);
  // Trial finding 16: this read "(FAILING for 0 of 2 intervals)"; the FAILING interval counts.
  EXPECT_NE(r.verdict_reason.find("(FAILING for 1 of 2 intervals)"), std::string::npos) << r.verdict_reason;
  // Intervals without traffic keep the verdict and do not count.
  prev = c;
  r = t.update(prev, c, true);
  EXPECT_EQ(r.verdict, LaneHealth::kDegraded);
  EXPECT_TRUE(has_reason(r.reasons, "no codewords"));
  // DOWN is immediate.
  EXPECT_EQ(t.update(c, c, false).verdict, LaneHealth::kDown);
}

TEST(LaneHealth, GoodVerdictStillSaysWhy) {
  LaneHealthTracker t;
  LaneCounters z, c = advance(z, kCw, 2e-8);
  auto r = t.update(z, c, true);
  ASSERT_EQ(r.reasons.size(), 1u);
  EXPECT_EQ(r.reasons[0], "pre-FEC BER 2.00e-08 within limits");
}

// ---- Port states ---------------------------------------------------------------------

npo::PortStatus up_port(unsigned lanes_in_use = 8, std::uint8_t enable = 0xff) {
  npo::PortStatus ps;
  ps.enabled = true;
  ps.module_present = true;
  ps.state = npo::LinkState::kUp;
  ps.link_up = true;
  ps.lane_count = lanes_in_use;
  ps.lane_enable = enable;
  ps.lanes_up = enable;
  return ps;
}

TEST(PortState, ReasonsForEachState) {
  auto h = npo::assess_port(up_port(), {}, 8, "", nullptr);
  EXPECT_EQ(h.state, PortState::kHealthy);
  EXPECT_EQ(h.reason, "up 8/8 lanes");

  npo::PortTraining tr;
  tr.dropped_lanes = 1u << 3;
  h = npo::assess_port(up_port(7, 0xf7), {}, 8, "", &tr);
  EXPECT_EQ(h.state, PortState::kDegraded);
  EXPECT_EQ(h.reason, "up 7/8 lanes: lane 3 dropped (no CDR lock)");

  auto down = up_port();
  down.state = npo::LinkState::kFault;
  tr.code = npo::TrainCode::kTimeoutFecLock;
  h = npo::assess_port(down, {}, 8, "", &tr);
  EXPECT_EQ(h.state, PortState::kFailed);
  EXPECT_EQ(h.reason, "training failed: TIMEOUT_FEC_LOCK");

  npo::FlapDamper d;
  for (int i = 0; i < 5; ++i) d.on_down(1'000'000'000ULL * static_cast<unsigned>(i));
  h = npo::assess_port(up_port(), {}, 8, d.reason(), nullptr);
  EXPECT_EQ(h.state, PortState::kDisabled);
  EXPECT_EQ(h.reason, "held down: 5 flaps in 60 s");

  auto nomod = up_port();
  nomod.module_present = false;
  nomod.state = npo::LinkState::kModuleWait;
  EXPECT_EQ(npo::assess_port(nomod, {}, 8, "", nullptr).reason,
            "no module (or its cable ends at a switch port with no cross-connect yet)");
  // Not enabled either (a fresh pool: every port cabled to a switch port without a cross-connect).
  auto off = nomod;
  off.enabled = false;
  EXPECT_EQ(npo::assess_port(off, {}, 8, "", nullptr).reason,
            "disabled by host; no module (or its cable ends at a switch port with no cross-connect yet)");
  EXPECT_EQ(npo::assess_port(nomod, {}, 8, "", nullptr).state, PortState::kDisabled);

  // A lane the partner negotiated away (LANE_MAP has no logical lane on physical lane 3) is
  // dark but not part of the link: the port is DEGRADED (7/8), not FAILED.
  auto narrow = up_port();
  narrow.lane_map = {0, 1, 2, 4, 5, 6, 7, npo::kUnusedLane};  // logical 0..6 on physical 0,1,2,4..7; 7 unused
  narrow.lane_count = 7;
  npo::LaneHealthReport dark;
  dark.lane = 3;
  dark.verdict = LaneHealth::kDown;
  dark.reasons = {"no signal (Rx LOS)"};
  const auto nh = npo::assess_port(narrow, std::span(&dark, 1), 8, "", nullptr);
  EXPECT_EQ(nh.state, PortState::kDegraded) << nh.reason;
  EXPECT_EQ(nh.reason, "up 7/8 lanes: lane 3 not in use (the far end dropped it; no signal here either)");
  dark.verdict = LaneHealth::kGood;  // lit here: only the far end's choice
  EXPECT_EQ(npo::assess_port(narrow, std::span(&dark, 1), 8, "", nullptr).reason,
            "up 7/8 lanes: lane 3 not in use (the far end dropped it)");

  npo::LaneHealthReport bad;
  bad.lane = 2;
  bad.verdict = LaneHealth::kFailing;
  bad.reasons = {"pre-FEC BER 3.00e-04 above the KP4 limit 2.4e-04"};
  std::vector<npo::LaneHealthReport> lanes{bad};
  h = npo::assess_port(up_port(), lanes, 8, "", nullptr);
  EXPECT_EQ(h.state, PortState::kFailed);
  EXPECT_EQ(h.reason, "up 8/8 lanes: lane 2 FAILING: pre-FEC BER 3.00e-04 above the KP4 limit 2.4e-04");
  lanes[0].verdict = LaneHealth::kDegraded;
  EXPECT_EQ(npo::assess_port(up_port(), lanes, 8, "", nullptr).state, PortState::kDegraded);
}

// Trial finding 16: a BER ramp on every lane of a port gave one reason cell with "lane N
// FAILING: pre-FEC BER ... above the KP4 limit" eight times (~700 characters). Lanes with the
// same verdict and the same kind of reason read as one detail naming the worst lane.
TEST(PortState, LanesFailingAlikeReadAsOneDetailNamingTheWorst) {
  std::vector<npo::LaneHealthReport> lanes;
  for (unsigned l = 0; l < 8; ++l) {
    npo::LaneHealthReport r;
    r.lane = l;
    r.verdict = LaneHealth::kFailing;
    r.ber = l == 3 ? 9.96e-4 : 5e-4 + l * 1e-5;
    r.reasons = {fmt::format("pre-FEC BER {:.2e} above the KP4 limit 2.4e-04", *r.ber)};
    lanes.push_back(r);
  }
  auto h = npo::assess_port(up_port(), lanes, 8, "", nullptr);
  EXPECT_EQ(h.state, PortState::kFailed);
  EXPECT_EQ(h.reason,
            "up 8/8 lanes: lanes 0-7 FAILING: pre-FEC BER 9.96e-04 above the KP4 limit 2.4e-04 (worst: lane 3)");

  // Different verdicts or kinds stay apart; runs of lanes are joined, gaps listed.
  lanes[1].verdict = LaneHealth::kDegraded;
  lanes[1].reasons = {"pre-FEC BER 5.00e-05 above the warning level 1.0e-05"};
  lanes[6].verdict = LaneHealth::kGood;
  h = npo::assess_port(up_port(), lanes, 8, "", nullptr);
  EXPECT_EQ(h.reason,
            "up 8/8 lanes: lanes 0, 2-5, 7 FAILING: pre-FEC BER 9.96e-04 above the KP4 limit 2.4e-04 (worst: lane 3); "
            "lane 1 DEGRADED: pre-FEC BER 5.00e-05 above the warning level 1.0e-05");
}

// Issue 18: a port was DEGRADED while its reason said "above the KP4 limit" (FAILED by the
// legend): the lane's verdict (held DEGRADED by hysteresis) and the reason (the interval's
// FAILING finding) came from different verdicts. Now the port's reason is the verdict's.
TEST(PortState, StateAndReasonComeFromOneVerdict) {
  LaneHealthTracker t;  // K = 2 to worsen
  LaneCounters prev, c = advance(LaneCounters{}, kCw, 1e-8);
  t.update(prev, c, true);
  auto step = [&](double ber) {
    prev = c;
    c = advance(c, kCw, ber);
    auto r = t.update(prev, c, true);
    r.lane = 2;
    return r;
  };
  step(5e-5);
  auto r = step(5e-5);
  ASSERT_EQ(r.verdict, LaneHealth::kDegraded);
  EXPECT_NE(r.verdict_reason.find("above the warning level"), std::string::npos) << r.verdict_reason;
  // One interval over the KP4 limit: raw FAILING, the verdict stays DEGRADED for now.
  r = step(3e-4);
  ASSERT_EQ(r.raw, LaneHealth::kFailing);
  ASSERT_EQ(r.verdict, LaneHealth::kDegraded);
  EXPECT_TRUE(has_reason(r.reasons, "KP4 limit"));  // the interval's own finding is kept for `health`
  EXPECT_EQ(r.verdict_reason.find("KP4"), std::string::npos) << r.verdict_reason;
  EXPECT_NE(r.verdict_reason.find("FAILING for 1 of 2 intervals"), std::string::npos) << r.verdict_reason;
  const auto h = npo::assess_port(up_port(), std::span(&r, 1), 8, "", nullptr);
  EXPECT_EQ(h.state, PortState::kDegraded);
  EXPECT_EQ(h.reason.find("KP4"), std::string::npos) << h.reason;
  EXPECT_NE(h.reason.find("lane 2 DEGRADED: pre-FEC BER 5.00e-05 above the warning level"), std::string::npos)
      << h.reason;
  // The second interval over the limit makes it FAILING: state and reason agree again.
  r = step(3e-4);
  ASSERT_EQ(r.verdict, LaneHealth::kFailing);
  const auto f = npo::assess_port(up_port(), std::span(&r, 1), 8, "", nullptr);
  EXPECT_EQ(f.state, PortState::kFailed);
  EXPECT_NE(f.reason.find("lane 2 FAILING: pre-FEC BER 3.00e-04 above the KP4 limit"), std::string::npos) << f.reason;
}

// Issue 18: after a training_timeout a port printed "FAILED ... up 8/8 lanes: lane 0 DOWN: no
// CDR lock" with link_state up. A port the card calls Up with no lane in use locked is down.
TEST(PortState, UpWithoutCdrLockIsDown) {
  auto ps = up_port();
  ps.lanes_up = 0;
  auto h = npo::assess_port(ps, {}, 8, "", nullptr);
  EXPECT_EQ(h.state, PortState::kFailed);
  EXPECT_FALSE(h.link_up);
  EXPECT_EQ(h.lane_count, 0u);
  EXPECT_EQ(h.reason, "down: no CDR lock on lanes 0, 1, 2, 3, 4, 5, 6, 7 in use (the card still says Up)");
  // One lane without lock: up on 7, FAILED naming the lane, never "up 8/8".
  ps.lanes_up = 0xf7;
  h = npo::assess_port(ps, {}, 8, "", nullptr);
  EXPECT_EQ(h.state, PortState::kFailed);
  EXPECT_TRUE(h.link_up);
  EXPECT_EQ(h.reason, "up 7/8 lanes: lane 3 DOWN: no CDR lock");
  EXPECT_TRUE(npo::assess_port(up_port(), {}, 8, "", nullptr).link_up);
}

// Issue 18: a port in Fault said "training failed: card in Fault" -- it is the port, and the
// card's TRAIN_RESULT says why and whether a narrower retrain can work.
TEST(PortState, FaultNamesThePortTheCodeAndTheLanes) {
  auto ps = up_port();
  ps.state = npo::LinkState::kFault;
  ps.train_result = {.code = 5, .state = npo::LinkState::kTraining, .failed_lanes = 1u << 3, .attempt = 3};
  auto h = npo::assess_port(ps, {}, 8, "", nullptr);
  EXPECT_EQ(h.state, PortState::kFailed);
  EXPECT_FALSE(h.link_up);
  EXPECT_EQ(h.reason.find("card in Fault"), std::string::npos);
  EXPECT_NE(h.reason.find("port in Fault after 3 attempts: TIMEOUT_CDR_LOCK, lane 3 without CDR lock"),
            std::string::npos)
      << h.reason;
  EXPECT_NE(h.reason.find("runs on the other 7/8 lanes"), std::string::npos) << h.reason;
  ps.train_result.failed_lanes = 0xff;
  EXPECT_NE(npo::assess_port(ps, {}, 8, "", nullptr).reason.find("no lane locks"), std::string::npos);
}

// Issue 18: a removed module made its port vanish (DISABLED "no module", listed only with
// --all). A port that had a module and lost it is FAILED "module removed".
TEST(PortState, ARemovedModuleIsFailedNotAbsent) {
  auto ps = up_port();
  ps.module_present = false;
  ps.state = npo::LinkState::kModuleWait;
  ps.up_count = 1;  // it was up: a module was there
  auto h = npo::assess_port(ps, {}, 8, "", nullptr);
  EXPECT_EQ(h.state, PortState::kFailed);
  EXPECT_TRUE(h.module_lost);
  EXPECT_EQ(h.reason, "module removed");
  ps.up_count = 0;
  ps.events.module_change = true;  // removed before it ever came up
  EXPECT_TRUE(npo::assess_port(ps, {}, 8, "", nullptr).module_lost);
  ps.events.module_change = false;
  EXPECT_EQ(npo::assess_port(ps, {}, 8, "", nullptr).state, PortState::kDisabled);  // never had one
  EXPECT_TRUE(npo::assess_port(ps, {}, 8, "", nullptr, {.had_module = true}).module_lost);
}

TEST(FlapDamper, FiveDownsInSixtySecondsHoldDownUntilReleased) {
  npo::FlapDamper d;  // defaults: 5 downs in 60 s
  constexpr std::uint64_t s = 1'000'000'000ULL;
  EXPECT_EQ(d.policy().max_downs, 5u);
  EXPECT_EQ(d.policy().window_ns, 60 * s);
  // Four downs, then the window slides past the first ones: never held.
  for (std::uint64_t t : {0 * s, 10 * s, 20 * s, 30 * s}) EXPECT_FALSE(d.on_down(t));
  EXPECT_FALSE(d.on_down(61 * s));  // the down at 0 s left the window: 4 in window
  EXPECT_EQ(d.downs_in_window(61 * s), 4u);
  EXPECT_FALSE(d.held_down());
  EXPECT_TRUE(d.on_down(62 * s));  // 10, 20, 30, 61, 62: five within 60 s
  EXPECT_TRUE(d.held_down());
  EXPECT_EQ(d.reason(), "held down: 5 flaps in 60 s");
  EXPECT_FALSE(d.on_down(63 * s));  // already held: no second trigger
  d.release();
  EXPECT_FALSE(d.held_down());
  EXPECT_TRUE(d.reason().empty());
  EXPECT_EQ(d.downs_in_window(63 * s), 0u);
  // A burst counted at once (a FLAP_COUNT delta between two snapshots).
  EXPECT_TRUE(d.on_down(100 * s, 7));
  EXPECT_EQ(d.reason(), "held down: 7 flaps in 60 s");
  npo::FlapDamper custom({.max_downs = 2, .window_ns = 1 * s});
  EXPECT_FALSE(custom.on_down(0));
  EXPECT_FALSE(custom.on_down(2 * s));
  EXPECT_TRUE(custom.on_down(2 * s + 1));
}

TEST(TrainCodes, StableNamesAndCmisDurations) {
  EXPECT_EQ(npo::train_code_name(npo::TrainCode::kOk), "OK");
  EXPECT_EQ(npo::train_code_name(npo::TrainCode::kNoModule), "NO_MODULE");
  EXPECT_EQ(npo::train_code_name(npo::TrainCode::kTimeoutModuleReady), "TIMEOUT_MODULE_READY");
  EXPECT_EQ(npo::train_code_name(npo::TrainCode::kTimeoutDatapathInit), "TIMEOUT_DATAPATH_INIT");
  EXPECT_EQ(npo::train_code_name(npo::TrainCode::kTimeoutCdrLock), "TIMEOUT_CDR_LOCK");
  EXPECT_EQ(npo::train_code_name(npo::TrainCode::kTimeoutNeighbor), "TIMEOUT_NEIGHBOR");
  EXPECT_EQ(npo::train_code_name(npo::TrainCode::kTimeoutFecLock), "TIMEOUT_FEC_LOCK");
  EXPECT_EQ(npo::train_code_name(npo::TrainCode::kDisabledFlapping), "DISABLED_FLAPPING");
  EXPECT_EQ(npo::train_code_name(npo::TrainCode::kCardRemoved), "CARD_REMOVED");
  // CMIS 5.2 Table 8-43: upper bounds of the advertised ranges.
  EXPECT_EQ(npo::cmis_duration_ns(0), 1'000'000u);
  EXPECT_EQ(npo::cmis_duration_ns(5), 500'000'000u);
  EXPECT_EQ(npo::cmis_duration_ns(7), 5'000'000'000u);
  EXPECT_EQ(npo::cmis_duration_ns(9), 60'000'000'000u);
  EXPECT_EQ(npo::cmis_duration_ns(12), 3'000'000'000'000u);
  EXPECT_FALSE(npo::cmis_duration_ns(13).has_value());
  EXPECT_FALSE(npo::cmis_duration_ns(14).has_value());
  // Published defaults (registers.md §7.2).
  npo::TrainingPolicy p;
  EXPECT_EQ(p.module_ready_ns, 5'000'000'000u);
  EXPECT_EQ(p.datapath_init_ns, 2'000'000'000u);
  EXPECT_EQ(p.train_timeout_ms, 500u);
  EXPECT_EQ(p.fec_lock_ns, 100'000'000u);
  EXPECT_EQ(p.card_attempts, 3u);
  EXPECT_EQ(p.min_lanes, 4u);
}

}  // namespace
