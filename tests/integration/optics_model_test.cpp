// SPDX-License-Identifier: Apache-2.0
// The emulator's optics model (docs/emulator.md "Channel model", registers.md §7): PAM4 BER
// from SNR, RS(544,514) counter statistics, lane negotiation, TRAIN_RESULT codes, link
// faults, PRBS, the stats DMA block, CMIS pages through the mailbox, and replay.
#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>

#include <fmt/format.h>

#include "card.hpp"
#include "harness.hpp"
#include "npo/fw/stats.hpp"
#include "npo/hal/xcvr_decode.hpp"
#include "optics.hpp"

namespace npo::itest {
namespace {

using pr::LinkState;
using pr::TrainResult;
namespace ln = pr::lane;
namespace optics = npo::emu::optics;

// ---- Channel model unit checks --------------------------------------------------------------

TEST(OpticsModel, PreFecBerAtKnownSnr) {
  // SER = 1.5 Q(sqrt(SNR/5)), BER = SER/2: the KP4 limit 2.4e-4 sits at ~17.6 dB.
  const double kp4 = optics::ber_from_snr_db(17.6);
  EXPECT_NEAR(kp4, 2.4e-4, 0.15 * 2.4e-4);
  EXPECT_LT(optics::ber_from_snr_db(24.0), 1e-7);
  EXPECT_GT(optics::ber_from_snr_db(24.0), 0.0);
  // Healthy operating point of the default channel (≈21.5 dB) lands in 1e-8..1e-6.
  EXPECT_GT(optics::ber_from_snr_db(21.5), 1e-8);
  EXPECT_LT(optics::ber_from_snr_db(21.5), 1e-6);
  for (double s = 5; s < 30; s += 0.5) EXPECT_GT(optics::ber_from_snr_db(s), optics::ber_from_snr_db(s + 0.5));
  // Q(0) = 1/2, Q(3) = 1.35e-3 (tabulated).
  EXPECT_DOUBLE_EQ(optics::q_function(0.0), 0.5);
  EXPECT_NEAR(optics::q_function(3.0), 1.3499e-3, 1e-6);
  // Receiver SNR falls 2 dB per dB of power lost below the reference.
  EXPECT_DOUBLE_EQ(optics::snr_db(optics::kRefRxPowerDbm, 0, 0, 0), optics::kBaseSnrDb);
  EXPECT_DOUBLE_EQ(optics::snr_db(optics::kRefRxPowerDbm - 3, 0, 0, 0), optics::kBaseSnrDb - 6);
  EXPECT_DOUBLE_EQ(optics::snr_db(optics::kRefRxPowerDbm + 3, 0.25, 1.0, 0.5), optics::kBaseSnrDb - 1.25);
}

void expect_identities(const optics::FecCounters& c) {
  std::uint64_t sum = 0, corrected = 0, symbols = 0;
  for (unsigned n = 0; n < regs::kFecBins; ++n) {
    sum += c.bins[n];
    if (n > 0) {
      corrected += c.bins[n];
      symbols += n * c.bins[n];
    }
  }
  EXPECT_EQ(c.codewords, sum + c.uncorrectable);
  EXPECT_EQ(c.corrected, corrected);
  EXPECT_EQ(c.symbol_errors, symbols);
}

TEST(OpticsModel, FecBinsFollowBinomialAtRaisedBer) {
  const double ber = 1e-3;  // p ≈ 0.01 per symbol: mean 5.4 symbol errors per codeword
  optics::Rng rng(42);
  optics::FecCounters c;
  const std::uint64_t chunk = 50'000, chunks = 40;
  for (std::uint64_t i = 0; i < chunks; ++i) optics::add_codewords(c, chunk, ber, rng);
  expect_identities(c);
  const double n = static_cast<double>(chunk * chunks);
  ASSERT_EQ(c.codewords, chunk * chunks);
  const auto pmf = optics::codeword_error_pmf(optics::symbol_error_probability(ber));
  double total = 0;
  for (double v : pmf) total += v;
  EXPECT_NEAR(total, 1.0, 1e-9);
  for (unsigned k = 1; k < regs::kFecBins; ++k) {
    const double mean = n * pmf[k];
    if (mean < 100) continue;
    EXPECT_NEAR(static_cast<double>(c.bins[k]), mean, 6 * std::sqrt(mean)) << "bin " << k;
  }
  const double umean = n * pmf[regs::kFecBins];
  EXPECT_NEAR(static_cast<double>(c.uncorrectable), umean, 6 * std::sqrt(umean) + 3);
  // Spec estimator (registers.md §7.3) recovers the BER.
  const double est = (static_cast<double>(c.symbol_errors) + 16.0 * static_cast<double>(c.uncorrectable)) /
                     (5440.0 * static_cast<double>(c.codewords));
  EXPECT_NEAR(est, ber, 0.06 * ber);
}

TEST(OpticsModel, HealthyLaneUpdateIsCheap) {
  optics::Rng rng(7);
  optics::FecCounters c;
  const double ber = optics::ber_from_snr_db(21.5);
  const auto t0 = std::chrono::steady_clock::now();
  const int kIters = 200'000;
  for (int i = 0; i < kIters; ++i) optics::add_codewords(c, 19'531'250, ber, rng);  // one second per update
  const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / kIters;
  std::printf("add_codewords at BER %.2e: %.0f ns per lane update\n", ber, ns);
  expect_identities(c);
  EXPECT_LT(ns, 3000.0) << "generous bound for sanitizer builds; the target is ~300 ns";
}

// ---- Emulated links -----------------------------------------------------------------------

emu::SystemConfig mesh8(std::uint64_t seed = 1) {
  auto c = emu::parse_uri(fmt::format("mesh8?clock=virtual&seed={}", seed));
  EXPECT_TRUE(c.has_value());
  return c.value_or(emu::SystemConfig{});
}

struct Mesh {
  explicit Mesh(Rig& r) : rig(r) {
    for (unsigned c = 0; c < 8; ++c) {
      be::Device* d = rig.open(c);
      if (d == nullptr) return;
      devs.push_back(d);
      bars.push_back(&Rig::bar0(*d));
    }
  }
  [[nodiscard]] bool ok() const { return bars.size() == 8; }
  std::uint32_t reg(unsigned c, unsigned p, std::uint32_t r) const { return bars[c]->read32(regs::port_reg(p, r)); }
  void wreg(unsigned c, unsigned p, std::uint32_t r, std::uint32_t v) const {
    bars[c]->write32(regs::port_reg(p, r), v);
  }
  std::uint64_t lane64(unsigned c, unsigned p, unsigned l, std::uint32_t r) const {
    return bars[c]->read64(regs::lane_reg(p, l, r));
  }
  std::uint32_t lane32(unsigned c, unsigned p, unsigned l, std::uint32_t r) const {
    return bars[c]->read32(regs::lane_reg(p, l, r));
  }
  LinkState state(unsigned c, unsigned p) const {
    return static_cast<LinkState>(pr::kStatusState.get(reg(c, p, pr::kStatus)));
  }
  void enable_all() const {
    for (unsigned c = 0; c < 8; ++c)
      for (unsigned p = 0; p < 8; ++p) wreg(c, p, pr::kCtrl, pr::kCtrlEnable.mask());
  }
  void enable(unsigned c, unsigned p, std::uint32_t extra = 0) const {
    wreg(c, p, pr::kCtrl, pr::kCtrlEnable.mask() | extra);
  }
  TrainResult result_code(unsigned c, unsigned p) const {
    return static_cast<TrainResult>(pr::kTrainResultCode.get(reg(c, p, pr::kTrainResult)));
  }
  /// Pre-FEC BER estimate of registers.md §7.3 over the lane's counters so far.
  double ber(unsigned c, unsigned p, unsigned l) const {
    const double cw = static_cast<double>(lane64(c, p, l, ln::kCodewords));
    const double se = static_cast<double>(lane64(c, p, l, ln::kSymbolErrors));
    const double u = static_cast<double>(lane64(c, p, l, ln::kUncorrectable));
    return cw == 0 ? -1.0 : (se + 16 * u) / (5440.0 * cw);
  }
  void expect_identities(unsigned c, unsigned p, unsigned l) const {
    std::uint64_t sum = 0, corr = 0, sym = 0;
    for (unsigned n = 0; n < regs::kFecBins; ++n) {
      const std::uint64_t b = lane64(c, p, l, ln::kFecBin0 + 8 * n);
      sum += b;
      if (n > 0) {
        corr += b;
        sym += n * b;
      }
    }
    EXPECT_EQ(lane64(c, p, l, ln::kCodewords), sum + lane64(c, p, l, ln::kUncorrectable));
    EXPECT_EQ(lane64(c, p, l, ln::kCorrected), corr);
    EXPECT_EQ(lane64(c, p, l, ln::kSymbolErrors), sym);
  }
  Rig& rig;
  std::vector<be::Device*> devs;
  std::vector<be::Mmio*> bars;
};

/// Peer of (card, port) in emu:mesh8 (port 7 has no cable).
std::pair<unsigned, unsigned> mesh8_peer(unsigned card, unsigned port) {
  if (port < card) return {port, card - 1};
  return {port + 1, card};
}

TEST(OpticsLinks, HealthyMesh8AllPortsUpWithEightCleanLanes) {
  Rig rig(mesh8());
  ASSERT_TRUE(rig.ok());
  Mesh m(rig);
  ASSERT_TRUE(m.ok());
  m.enable_all();
  rig.advance(100 * kMs);
  unsigned up = 0;
  for (unsigned c = 0; c < 8; ++c) {
    for (unsigned p = 0; p < 7; ++p) {
      SCOPED_TRACE(testing::Message() << "card " << c << " port " << p);
      const std::uint32_t st = m.reg(c, p, pr::kStatus);
      if (pr::kStatusLinkUp.get(st)) ++up;
      EXPECT_EQ(pr::kStatusLaneCount.get(st), 8u);
      EXPECT_EQ(pr::kStatusLanesUp.get(st), 0xffu);
      EXPECT_EQ(m.reg(c, p, pr::kLaneMap), 0x76543210u);
      EXPECT_EQ(m.result_code(c, p), TrainResult::kOk);
      EXPECT_EQ(pr::kTrainResultAttempt.get(m.reg(c, p, pr::kTrainResult)), 1u);
      EXPECT_EQ(m.reg(c, p, pr::kUpCount), 1u);
      EXPECT_GT(m.reg(c, p, pr::kCoeffUpdates), 8u) << "every lane walked from the preset to its optimum";
      const auto temp = static_cast<std::int32_t>(m.reg(c, p, pr::kModuleTemp)) / 256.0;
      EXPECT_GT(temp, 20.0);
      EXPECT_LT(temp, 60.0);
      EXPECT_NEAR(m.reg(c, p, pr::kModuleVcc) / 1e4, 3.3, 0.02);
    }
    EXPECT_EQ(pr::kStatusModulePresent.get(m.reg(c, 7, pr::kStatus)), 0u);
  }
  EXPECT_EQ(up, 56u);
  rig.advance(1'000 * kMs);
  for (unsigned c = 0; c < 8; ++c) {
    for (unsigned p = 0; p < 7; ++p) {
      for (unsigned l = 0; l < 8; ++l) {
        SCOPED_TRACE(testing::Message() << "card " << c << " port " << p << " lane " << l);
        const double ber = m.ber(c, p, l);
        EXPECT_GT(ber, 0.0);
        EXPECT_LT(ber, 1e-6);
        EXPECT_GT(m.lane64(c, p, l, ln::kCodewords), 19'000'000u) << "~1 s of codewords";
        EXPECT_EQ(m.lane64(c, p, l, ln::kUncorrectable), 0u);
        m.expect_identities(c, p, l);
        const double snr = static_cast<std::int32_t>(m.lane32(c, p, l, ln::kSnr)) / 256.0;
        EXPECT_GT(snr, 20.3);
        EXPECT_LT(snr, 23.5);
        const std::uint32_t eq = m.lane32(c, p, l, ln::kTxEq);
        const int pre = static_cast<std::int8_t>(ln::kTxEqPre.get(eq));
        const int post = static_cast<std::int8_t>(ln::kTxEqPost.get(eq));
        EXPECT_LE(std::abs(pre) + static_cast<int>(ln::kTxEqMain.get(eq)) + std::abs(post), 64);
        EXPECT_LT(pre, 0);
        const double rx_dbm = 10 * std::log10(m.lane32(c, p, l, ln::kRxPower) * 1e-4);
        const double tx_dbm = 10 * std::log10(m.lane32(c, p, l, ln::kTxPower) * 1e-4);
        EXPECT_NEAR(tx_dbm - rx_dbm, 3.0, 1.5) << "default channel loss 3 dB (between two modules)";
        EXPECT_GT(m.lane32(c, p, l, ln::kTxBias), 5'000u);
        const std::uint32_t ls = m.lane32(c, p, l, ln::kLaneStatus);
        EXPECT_EQ(ln::kLaneStatusSignal.get(ls), 1u);
        EXPECT_EQ(ln::kLaneStatusCdrLock.get(ls), 1u);
      }
    }
  }
}

TEST(OpticsLinks, LaneEnableNegotiatesSevenLanes) {
  Rig rig(mesh8());
  ASSERT_TRUE(rig.ok());
  Mesh m(rig);
  ASSERT_TRUE(m.ok());
  m.wreg(0, 0, pr::kLaneEnable, 0x7f);
  EXPECT_EQ(m.reg(0, 0, pr::kLaneEnable), 0x7fu);
  EXPECT_EQ(m.reg(1, 0, pr::kLaneEnable), 0xffu) << "reset value";
  m.enable(0, 0);
  m.enable(1, 0);
  rig.advance(100 * kMs);
  for (auto [c, p] : {std::pair{0u, 0u}, std::pair{1u, 0u}}) {
    SCOPED_TRACE(testing::Message() << "card " << c);
    EXPECT_EQ(m.state(c, p), LinkState::kUp);
    EXPECT_EQ(pr::kStatusLaneCount.get(m.reg(c, p, pr::kStatus)), 7u);
    EXPECT_EQ(m.reg(c, p, pr::kLaneMap), 0xf6543210u);
  }
  rig.advance(100 * kMs);
  EXPECT_EQ(m.lane64(1, 0, 7, ln::kCodewords), 0u) << "lane 7 is not in use";
  EXPECT_GT(m.lane64(1, 0, 6, ln::kCodewords), 0u);
}

TEST(OpticsLinks, BerRampReachesItsValueOnBothEnds) {
  Rig rig(mesh8());
  ASSERT_TRUE(rig.ok());
  Mesh m(rig);
  ASSERT_TRUE(m.ok());
  m.enable(0, 0);
  m.enable(1, 0);
  rig.advance(100 * kMs);
  ASSERT_EQ(m.state(0, 0), LinkState::kUp);
  emu::Fault f;
  f.at_ns = rig.emulator().now_ns();
  f.kind = emu::FaultKind::kBerRamp;
  f.card = 0;
  f.port = 0;
  f.value = 1e-4;
  f.duration_ns = 200 * kMs;
  ASSERT_TRUE(rig.emulator().inject(f).has_value());
  rig.advance(100 * kMs);
  const double mid = m.ber(0, 0, 2);
  rig.advance(150 * kMs);
  for (unsigned l = 0; l < 8; ++l) m.wreg(0, 0, regs::kLaneBase + l * regs::kLaneStride + ln::kClear, 1);
  for (unsigned l = 0; l < 8; ++l) m.wreg(1, 0, regs::kLaneBase + l * regs::kLaneStride + ln::kClear, 1);
  EXPECT_EQ(m.lane64(0, 0, 0, ln::kCodewords), 0u) << "CLEAR zeroes the counters";
  rig.advance(500 * kMs);
  for (unsigned c : {0u, 1u}) {
    for (unsigned l = 0; l < 8; ++l) {
      SCOPED_TRACE(testing::Message() << "card " << c << " lane " << l);
      EXPECT_NEAR(m.ber(c, 0, l), 1e-4, 0.1e-4);
      m.expect_identities(c, 0, l);
    }
    EXPECT_EQ(m.state(c, 0), LinkState::kUp) << "1e-4 is within the FEC's reach";
  }
  EXPECT_GT(mid, 1e-7) << "half way up the ramp";
  EXPECT_LT(mid, 1e-4);
  // A ramp past the alignment-marker limit takes the link down; retraining fails at FecLock.
  f.at_ns = rig.emulator().now_ns();
  f.value = 0.05;
  f.duration_ns = 10 * kMs;
  ASSERT_TRUE(rig.emulator().inject(f).has_value());
  rig.advance(40 * kMs);
  EXPECT_NE(m.state(0, 0), LinkState::kUp);
  EXPECT_NE(m.state(1, 0), LinkState::kUp);
  EXPECT_EQ(m.reg(0, 0, pr::kFlapCount), 1u);
  rig.advance(1'000 * kMs);
  EXPECT_EQ(m.state(0, 0), LinkState::kFault);
  EXPECT_EQ(m.result_code(0, 0), TrainResult::kFecLockTimeout);
  EXPECT_EQ(pr::kTrainResultAttempt.get(m.reg(0, 0, pr::kTrainResult)), 3u);
  // TELEMETRY reports the worst lane: BER 0.05 -> round(-log10(0.05) * 1000) = 1301.
}

TEST(OpticsLinks, LaneLossDropsTheLinkAndRetrainNamesTheLane) {
  Rig rig(mesh8());
  ASSERT_TRUE(rig.ok());
  Mesh m(rig);
  ASSERT_TRUE(m.ok());
  m.enable(0, 0);
  m.enable(1, 0);
  rig.advance(100 * kMs);
  ASSERT_EQ(m.state(1, 0), LinkState::kUp);
  ASSERT_TRUE(
      rig.emulator()
          .load_scenario_text(fmt::format("faults:\n  - {{at_ns: {}, kind: lane_loss, card: 0, port: 0, lane: 3}}\n",
                                          rig.emulator().now_ns() + 1 * kMs))
          .has_value());
  rig.advance(5 * kMs);
  EXPECT_EQ(ln::kLaneStatusSignal.get(m.lane32(0, 0, 3, ln::kLaneStatus)), 0u);
  EXPECT_EQ(ln::kLaneStatusSignal.get(m.lane32(1, 0, 3, ln::kLaneStatus)), 0u) << "both ends go dark";
  EXPECT_EQ(m.state(0, 0), LinkState::kUp) << "within the 10 ms debounce";
  rig.advance(20 * kMs);
  for (unsigned c : {0u, 1u}) {
    EXPECT_NE(m.state(c, 0), LinkState::kUp);
    EXPECT_EQ(m.reg(c, 0, pr::kFlapCount), 1u);
    EXPECT_NE(m.reg(c, 0, pr::kEventStatus) & pr::kEventLinkDown.mask(), 0u);
    EXPECT_EQ(pr::kStatusLanesUp.get(m.reg(c, 0, pr::kStatus)), 0xf7u);
  }
  // First retraining attempt (500 ms) fails on lane 3 at both ends; TRAIN_RESULT keeps that
  // outcome while attempt 2 runs.
  rig.advance(500 * kMs);
  for (unsigned c : {0u, 1u}) {
    SCOPED_TRACE(testing::Message() << "card " << c);
    EXPECT_EQ(m.state(c, 0), LinkState::kTraining);
    const std::uint32_t tr = m.reg(c, 0, pr::kTrainResult);
    EXPECT_EQ(static_cast<TrainResult>(pr::kTrainResultCode.get(tr)), TrainResult::kCdrLockTimeout);
    EXPECT_EQ(pr::kTrainResultLanes.get(tr), 0x08u) << "lane 3";
    EXPECT_EQ(pr::kTrainResultState.get(tr), static_cast<unsigned>(LinkState::kTraining));
    EXPECT_EQ(pr::kTrainResultAttempt.get(tr), 1u);
    EXPECT_NE(m.reg(c, 0, pr::kEventStatus) & pr::kEventTrainFail.mask(), 0u);
  }
  rig.advance(1'500 * kMs);
  for (unsigned c : {0u, 1u}) {
    SCOPED_TRACE(testing::Message() << "card " << c);
    EXPECT_EQ(m.state(c, 0), LinkState::kFault);
    const std::uint32_t tr = m.reg(c, 0, pr::kTrainResult);
    EXPECT_EQ(static_cast<TrainResult>(pr::kTrainResultCode.get(tr)), TrainResult::kCdrLockTimeout);
    EXPECT_NE(pr::kTrainResultLanes.get(tr) & 0x08u, 0u) << "lane 3 (the far end may already be dark)";
    EXPECT_EQ(pr::kTrainResultAttempt.get(tr), 3u);
  }
  // Degrade around the dead lane: LANE_ENABLE without lane 3 and a retrain bring it back.
  m.wreg(0, 0, pr::kLaneEnable, 0xf7);
  m.enable(0, 0, pr::kCtrlTrain.mask());
  m.enable(1, 0, pr::kCtrlTrain.mask());
  rig.advance(100 * kMs);
  EXPECT_EQ(m.state(0, 0), LinkState::kUp);
  EXPECT_EQ(m.state(1, 0), LinkState::kUp);
  EXPECT_EQ(pr::kStatusLaneCount.get(m.reg(1, 0, pr::kStatus)), 7u);
}

TEST(OpticsLinks, TrainingTimeoutFaultFailsThenSucceeds) {
  Rig rig(mesh8());
  ASSERT_TRUE(rig.ok());
  Mesh m(rig);
  ASSERT_TRUE(m.ok());
  emu::Fault f;
  f.kind = emu::FaultKind::kTrainingTimeout;
  f.card = 0;
  f.port = 0;
  f.count = 2;
  ASSERT_TRUE(rig.emulator().inject(f).has_value());
  rig.advance(1 * kMs);
  m.enable(0, 0);
  m.enable(1, 0);
  rig.advance(600 * kMs);
  EXPECT_EQ(m.state(0, 0), LinkState::kTraining);
  EXPECT_NE(m.reg(0, 0, pr::kEventStatus) & pr::kEventTrainFail.mask(), 0u);
  rig.advance(1'000 * kMs);
  EXPECT_EQ(m.state(0, 0), LinkState::kUp);
  EXPECT_EQ(m.state(1, 0), LinkState::kUp);
  EXPECT_EQ(m.reg(0, 0, pr::kTrainCount), 3u);
  EXPECT_EQ(pr::kTrainResultAttempt.get(m.reg(0, 0, pr::kTrainResult)), 3u);
  EXPECT_EQ(m.result_code(0, 0), TrainResult::kOk);
  const auto log = rig.emulator().event_log();
  const auto has = [&](std::string_view s) {
    return std::any_of(log.begin(), log.end(), [&](const std::string& l) { return l.find(s) != std::string::npos; });
  };
  EXPECT_TRUE(has("card=0 port=0 training attempt 1 failed code=5 lanes=0xff"));
  EXPECT_TRUE(has("card=0 port=0 training attempt 2 failed code=5"));
  EXPECT_TRUE(has("card=1 port=0 training attempt 1 failed code=6")) << "the partner locked but saw no neighbour";
}

TEST(OpticsLinks, ModuleRemovalAndReinsertion) {
  Rig rig(mesh8());
  ASSERT_TRUE(rig.ok());
  Mesh m(rig);
  ASSERT_TRUE(m.ok());
  m.enable(0, 0);
  m.enable(1, 0);
  rig.advance(100 * kMs);
  ASSERT_EQ(m.state(0, 0), LinkState::kUp);
  m.wreg(0, 0, pr::kEventStatus, 0xffffffffu);
  emu::Fault f;
  f.at_ns = rig.emulator().now_ns();
  f.kind = emu::FaultKind::kModuleRemoval;
  f.card = 0;
  f.port = 0;
  f.duration_ns = 200 * kMs;
  ASSERT_TRUE(rig.emulator().inject(f).has_value());
  rig.advance(20 * kMs);
  const std::uint32_t st = m.reg(0, 0, pr::kStatus);
  EXPECT_EQ(pr::kStatusModulePresent.get(st), 0u);
  EXPECT_EQ(static_cast<LinkState>(pr::kStatusState.get(st)), LinkState::kModuleWait);
  EXPECT_NE(m.reg(0, 0, pr::kEventStatus) & pr::kEventModuleChange.mask(), 0u);
  EXPECT_EQ(m.result_code(0, 0), TrainResult::kNoModule);
  EXPECT_NE(m.state(1, 0), LinkState::kUp) << "the far end lost light";
  rig.advance(300 * kMs);
  EXPECT_EQ(m.state(0, 0), LinkState::kUp);
  EXPECT_EQ(m.state(1, 0), LinkState::kUp);
  EXPECT_EQ(m.reg(0, 0, pr::kUpCount), 2u);
  EXPECT_EQ(m.reg(0, 0, pr::kFlapCount), 1u);
}

TEST(OpticsLinks, FlapStormCountsEveryDrop) {
  Rig rig(mesh8());
  ASSERT_TRUE(rig.ok());
  Mesh m(rig);
  ASSERT_TRUE(m.ok());
  m.enable(2, 3);
  m.enable(4, 2);  // card 2 port 3 <-> card 4 port 2
  rig.advance(100 * kMs);
  ASSERT_EQ(m.state(2, 3), LinkState::kUp);
  ASSERT_EQ(mesh8_peer(2, 3), (std::pair{4u, 2u}));
  ASSERT_TRUE(
      rig.emulator()
          .load_scenario_text(fmt::format(
              R"({{"faults": [{{"at_ns": {}, "kind": "flap_storm", "card": 2, "port": 3, "count": 4, "duration_ms": 60}}]}})",
              rig.emulator().now_ns()))
          .has_value());
  rig.advance(400 * kMs);
  EXPECT_EQ(m.reg(2, 3, pr::kFlapCount), 4u);
  EXPECT_EQ(m.reg(4, 2, pr::kFlapCount), 4u);
  EXPECT_EQ(m.reg(2, 3, pr::kUpCount), 5u);
  EXPECT_EQ(m.state(2, 3), LinkState::kUp);
  EXPECT_EQ(m.state(4, 2), LinkState::kUp);
}

TEST(OpticsLinks, NearEndLoopbackTrainsAgainstItself) {
  Rig rig(mesh8());
  ASSERT_TRUE(rig.ok());
  Mesh m(rig);
  ASSERT_TRUE(m.ok());
  m.enable(5, 2, pr::kCtrlLoopback.mask());  // the far end (card 3 port 4) stays disabled
  m.enable(5, 7, pr::kCtrlLoopback.mask());  // no module: waits in ModuleWait
  rig.advance(100 * kMs);
  EXPECT_EQ(m.state(5, 2), LinkState::kUp);
  const std::uint64_t nb = m.bars[5]->read64(regs::port_reg(2, pr::kNeighbor));
  EXPECT_EQ(pr::kNeighborFabricId.get(nb), 6u) << "itself";
  EXPECT_EQ(pr::kNeighborPort.get(nb), 2u);
  EXPECT_EQ(m.state(5, 7), LinkState::kModuleWait);
  rig.advance(100 * kMs);
  EXPECT_GT(m.lane64(5, 2, 0, ln::kCodewords), 0u);
  EXPECT_EQ(m.lane64(5, 2, 0, ln::kUncorrectable), 0u);
  EXPECT_EQ(m.state(3, 4), LinkState::kDisabled);
}

TEST(OpticsLinks, ScenarioValidationOfLinkFaults) {
  Rig rig(mesh8());
  ASSERT_TRUE(rig.ok());
  auto& e = rig.emulator();
  EXPECT_FALSE(e.load_scenario_text("faults:\n  - {at_ms: 1, kind: lane_loss, card: 0, port: 0}\n").has_value());
  EXPECT_FALSE(
      e.load_scenario_text("faults:\n  - {at_ms: 1, kind: ber_ramp, card: 0, port: 0, value: 0.7}\n").has_value());
  EXPECT_FALSE(e.load_scenario_text("faults:\n  - {at_ms: 1, kind: ber_ramp, card: 0, port: 0}\n").has_value());
  EXPECT_FALSE(e.load_scenario_text("faults:\n  - {at_ms: 1, kind: flap_storm, card: 0}\n").has_value());
  EXPECT_FALSE(
      e.load_scenario_text("faults:\n  - {at_ms: 1, kind: lane_loss, card: 0, port: 0, lane: 8}\n").has_value());
  EXPECT_TRUE(e.load_scenario_text("faults:\n  - {at_ms: 1, kind: ber_ramp, card: 0, port: 0, value: 1e-5, "
                                   "duration_us: 500}\n")
                  .has_value());
}

// ---- PRBS -----------------------------------------------------------------------------------

TEST(OpticsPrbs, GeneratorCheckerLockMismatchAndRaisedBer) {
  Rig rig(mesh8());
  ASSERT_TRUE(rig.ok());
  Mesh m(rig);
  ASSERT_TRUE(m.ok());
  const std::uint32_t prbs31 = pr::kCtrlPrbsPattern.make(5) | pr::kCtrlPrbsGen.mask() | pr::kCtrlPrbsCheck.mask();
  const std::uint32_t prbs15 = pr::kCtrlPrbsPattern.make(3) | pr::kCtrlPrbsGen.mask() | pr::kCtrlPrbsCheck.mask();
  // The matched pair trains first (Tx equalisation tuned), then switches to PRBS.
  m.enable(0, 0);
  m.enable(1, 0);
  rig.advance(100 * kMs);
  ASSERT_EQ(m.state(0, 0), LinkState::kUp);
  m.enable(0, 0, prbs31);
  m.enable(1, 0, prbs31);  // matched pair
  EXPECT_EQ(m.reg(0, 0, pr::kFlapCount), 1u) << "PRBS takes the link out of Up";
  m.enable(0, 1, prbs31);
  m.enable(2, 0, prbs15);                             // card 0 port 1 <-> card 2 port 0: mismatched patterns
  m.enable(3, 0, prbs31 | pr::kCtrlPrbsSide.mask());  // host side, no partner needed
  rig.advance(50 * kMs);
  EXPECT_EQ(m.state(0, 0), LinkState::kDataPathInit) << "PRBS holds the port after DataPathInit";
  rig.advance(100 * kMs);
  for (unsigned c : {0u, 1u}) {
    for (unsigned l = 0; l < 8; ++l) {
      SCOPED_TRACE(testing::Message() << "card " << c << " lane " << l);
      EXPECT_EQ(ln::kLaneStatusPrbsLock.get(m.lane32(c, 0, l, ln::kLaneStatus)), 1u);
      const double bits = static_cast<double>(m.lane64(c, 0, l, ln::kPrbsBits));
      EXPECT_GT(bits, 5e9);
      EXPECT_LT(static_cast<double>(m.lane64(c, 0, l, ln::kPrbsErrors)) / bits, 1e-6);
    }
  }
  for (unsigned c : {0u, 2u}) {
    const unsigned p = c == 0 ? 1 : 0;
    for (unsigned l = 0; l < 8; ++l) {
      EXPECT_EQ(ln::kLaneStatusPrbsLock.get(m.lane32(c, p, l, ln::kLaneStatus)), 0u);
      EXPECT_EQ(m.lane64(c, p, l, ln::kPrbsBits), 0u);
    }
  }
  for (unsigned l = 0; l < 8; ++l) {
    EXPECT_EQ(ln::kLaneStatusPrbsLock.get(m.lane32(3, 0, l, ln::kLaneStatus)), 1u);
    EXPECT_LT(m.lane64(3, 0, l, ln::kPrbsErrors), 100u) << "host side: BER ~1e-12";
  }
  // Raised BER on the fibre: the checker counts errors at that ratio.
  emu::Fault f;
  f.at_ns = rig.emulator().now_ns();
  f.kind = emu::FaultKind::kBerRamp;
  f.card = 0;
  f.port = 0;
  f.value = 1e-3;
  ASSERT_TRUE(rig.emulator().inject(f).has_value());
  rig.advance(1 * kMs);
  const std::uint64_t b0 = m.lane64(1, 0, 4, ln::kPrbsBits), e0 = m.lane64(1, 0, 4, ln::kPrbsErrors);
  rig.advance(20 * kMs);
  const double db = static_cast<double>(m.lane64(1, 0, 4, ln::kPrbsBits) - b0);
  const double de = static_cast<double>(m.lane64(1, 0, 4, ln::kPrbsErrors) - e0);
  EXPECT_EQ(ln::kLaneStatusPrbsLock.get(m.lane32(1, 0, 4, ln::kLaneStatus)), 1u);
  EXPECT_NEAR(de / db, 1e-3, 0.2e-3);
  // Stopping PRBS resumes training: the pair comes up.
  m.enable(0, 0);
  m.enable(1, 0);
  rig.advance(100 * kMs);
  EXPECT_EQ(m.state(0, 0), LinkState::kUp);
}

// ---- Stats DMA ------------------------------------------------------------------------------

TEST(OpticsStats, BlockEqualsRegisterReads) {
  Rig rig(mesh8());
  ASSERT_TRUE(rig.ok());
  Mesh m(rig);
  ASSERT_TRUE(m.ok());
  m.enable_all();
  rig.advance(300 * kMs);
  namespace st = fw::stats;
  constexpr std::uint64_t kIova = 0x40000000;
  HostBuffer& buf = rig.alloc_mapped(*m.devs[3], st::block_bytes(regs::kMaxPorts), kIova);
  be::Mmio& b = *m.bars[3];
  b.write64(g::kStatsAddr, kIova);
  EXPECT_EQ(b.read64(g::kStatsAddr), kIova);
  b.write32(g::kStatsCtrl, 77);
  EXPECT_EQ(b.read32(g::kStatsSeq), 77u);
  st::StatsHeader h{};
  std::memcpy(&h, buf.data(), sizeof h);
  EXPECT_EQ(h.magic, st::kMagic);
  EXPECT_EQ(h.version, st::kVersion);
  EXPECT_EQ(h.seq, 77u);
  EXPECT_EQ(h.num_ports, 8u);
  EXPECT_EQ(h.lanes_per_port, 8u);
  EXPECT_EQ(h.fabric_id, 4u);
  EXPECT_EQ(h.timestamp_ns, b.read64(g::kTimestamp));
  for (unsigned p = 0; p < 8; ++p) {
    st::PortRecord r{};
    std::memcpy(&r, buf.data() + st::kHeaderBytes + p * st::kPortRecordBytes, sizeof r);
    SCOPED_TRACE(testing::Message() << "port " << p);
    EXPECT_EQ(r.status, m.reg(3, p, pr::kStatus));
    EXPECT_EQ(r.ctrl, m.reg(3, p, pr::kCtrl));
    EXPECT_EQ(r.lane_map, m.reg(3, p, pr::kLaneMap));
    EXPECT_EQ(r.train_result, m.reg(3, p, pr::kTrainResult));
    EXPECT_EQ(r.up_count, m.reg(3, p, pr::kUpCount));
    EXPECT_EQ(r.coeff_updates, m.reg(3, p, pr::kCoeffUpdates));
    EXPECT_EQ(r.module_temp, m.reg(3, p, pr::kModuleTemp));
    EXPECT_EQ(r.module_vcc, m.reg(3, p, pr::kModuleVcc));
    EXPECT_EQ(r.neighbor, m.bars[3]->read64(regs::port_reg(p, pr::kNeighbor)));
    for (unsigned l = 0; l < 8; ++l) {
      const auto& o = r.lanes[l];
      EXPECT_EQ(o.codewords, m.lane64(3, p, l, ln::kCodewords));
      EXPECT_EQ(o.symbol_errors, m.lane64(3, p, l, ln::kSymbolErrors));
      EXPECT_EQ(o.corrected, m.lane64(3, p, l, ln::kCorrected));
      EXPECT_EQ(o.fec_bins[1], m.lane64(3, p, l, ln::kFecBin0 + 8));
      EXPECT_EQ(o.snr, m.lane32(3, p, l, ln::kSnr));
      EXPECT_EQ(o.tx_eq, m.lane32(3, p, l, ln::kTxEq));
      EXPECT_EQ(o.lane_status, m.lane32(3, p, l, ln::kLaneStatus));
      EXPECT_EQ(o.rx_power, m.lane32(3, p, l, ln::kRxPower));
      EXPECT_EQ(o.tx_power, m.lane32(3, p, l, ln::kTxPower));
      EXPECT_EQ(o.tx_bias, m.lane32(3, p, l, ln::kTxBias));
      if (p < 7) {
        EXPECT_GT(o.codewords, 0u);
      }
    }
  }
  // An unmapped address: an IOMMU fault, STATS_SEQ keeps the last good sequence.
  const std::uint32_t faults = b.read32(g::kFaultCount);
  b.write64(g::kStatsAddr, 0x7000000000);
  b.write32(g::kStatsCtrl, 78);
  EXPECT_EQ(b.read32(g::kStatsSeq), 77u);
  EXPECT_EQ(b.read32(g::kFaultCount), faults + 1);
  EXPECT_NE(b.read32(g::kErrStatus) & g::kErrIommuFault.mask(), 0u);
}

// ---- CMIS through the mailbox --------------------------------------------------------------

std::optional<std::vector<std::byte>> xcvr_read(be::Mmio& b, unsigned port, unsigned page, unsigned off, unsigned len,
                                                std::uint32_t seq) {
  std::vector<std::byte> req(8, std::byte{0});
  req[0] = static_cast<std::byte>(port);
  req[2] = static_cast<std::byte>(page);
  req[3] = static_cast<std::byte>(off);
  req[4] = static_cast<std::byte>(len);
  const auto msg = mbox_request(static_cast<std::uint16_t>(mb::Command::kXcvrRead), seq, req);
  auto r = mbox_exchange(b, msg, static_cast<std::uint32_t>(msg.size()));
  if (!r || r->fw_status() != mb::Status::kOk) return std::nullopt;
  return std::vector<std::byte>(r->payload().begin(), r->payload().end());
}

mb::Status xcvr_write(be::Mmio& b, unsigned port, unsigned page, unsigned off, std::vector<std::byte> data,
                      std::uint32_t seq) {
  std::vector<std::byte> req(8, std::byte{0});
  req[0] = static_cast<std::byte>(port);
  req[2] = static_cast<std::byte>(page);
  req[3] = static_cast<std::byte>(off);
  req[4] = static_cast<std::byte>(data.size());
  req.insert(req.end(), data.begin(), data.end());
  const auto msg = mbox_request(static_cast<std::uint16_t>(mb::Command::kXcvrWrite), seq, req);
  auto r = mbox_exchange(b, msg, static_cast<std::uint32_t>(msg.size()));
  return r ? r->fw_status() : mb::Status::kInternal;
}

TEST(OpticsCmis, PagesDecodeAndDataPathActivates) {
  Rig rig(mesh8());
  ASSERT_TRUE(rig.ok());
  Mesh m(rig);
  ASSERT_TRUE(m.ok());
  be::Mmio& b = *m.bars[0];
  // Before enable: the module sits in ModuleLowPwr.
  auto lo = xcvr_read(b, 0, 0, 0, 128, 1);
  ASSERT_TRUE(lo.has_value());
  EXPECT_EQ((static_cast<unsigned>((*lo)[3]) >> 1) & 7u, 1u) << "ModuleLowPwr";
  m.enable(0, 0);
  m.enable(1, 0);
  rig.advance(5 * kMs);
  lo = xcvr_read(b, 0, 0, 0, 128, 2);
  ASSERT_TRUE(lo.has_value());
  EXPECT_EQ((static_cast<unsigned>((*lo)[3]) >> 1) & 7u, 2u) << "ModulePwrUp";
  rig.advance(200 * kMs);
  ASSERT_EQ(m.state(0, 0), LinkState::kUp);
  // Linear image: lower, 00h, 01h, 02h, 10h, 11h.
  std::vector<std::byte> image;
  lo = xcvr_read(b, 0, 0, 0, 128, 3);
  ASSERT_TRUE(lo.has_value());
  image.insert(image.end(), lo->begin(), lo->end());
  std::uint32_t seq = 10;
  for (unsigned page : {0x00u, 0x01u, 0x02u, 0x10u, 0x11u}) {
    auto up = xcvr_read(b, 0, page, 128, 128, seq++);
    ASSERT_TRUE(up.has_value()) << "page " << page;
    image.insert(image.end(), up->begin(), up->end());
  }
  const auto dm = npo::xcvr::decode_module(image);
  ASSERT_TRUE(dm.has_value()) << dm.error().to_string();
  EXPECT_EQ(dm->spec, npo::xcvr::Spec::kCmis);
  EXPECT_EQ(dm->spec_revision, "5.2");
  EXPECT_EQ(dm->vendor_name, "NPO-EMU");
  ASSERT_TRUE(dm->module_state.has_value());
  EXPECT_EQ(dm->module_state->code, 3u) << "ModuleReady";
  EXPECT_EQ(dm->checksums_valid, std::optional<bool>(true));
  ASSERT_TRUE(dm->temperature_c.has_value());
  EXPECT_GT(*dm->temperature_c, 20.0);
  EXPECT_LT(*dm->temperature_c, 60.0);
  EXPECT_NEAR(static_cast<std::int32_t>(m.reg(0, 0, pr::kModuleTemp)) / 256.0, *dm->temperature_c, 0.05);
  ASSERT_TRUE(dm->supply_voltage_v.has_value());
  EXPECT_NEAR(*dm->supply_voltage_v, 3.3, 0.02);
  ASSERT_FALSE(dm->applications.empty());
  EXPECT_EQ(dm->applications[0].host_interface_id, 0x51);
  EXPECT_EQ(dm->applications[0].media_interface_id, 0x56);
  EXPECT_EQ(dm->media_lane_count, 8u);
  ASSERT_EQ(dm->lanes.size(), 8u);
  for (const auto& l : dm->lanes) {
    SCOPED_TRACE(testing::Message() << "lane " << l.lane);
    ASSERT_TRUE(l.tx_power_dbm.has_value());
    ASSERT_TRUE(l.rx_power_dbm.has_value());
    ASSERT_TRUE(l.tx_bias_ma.has_value());
    EXPECT_GT(*l.tx_power_dbm, -5.0);
    EXPECT_LT(*l.tx_power_dbm, 5.0);
    EXPECT_GT(*l.rx_power_dbm, -5.0);
    EXPECT_LT(*l.rx_power_dbm, 5.0);
    EXPECT_NEAR(*l.tx_bias_ma, m.lane32(0, 0, l.lane - 1, ln::kTxBias) / 1000.0, 0.01);
  }
  ASSERT_TRUE(dm->thresholds.temperature_c.has_value());
  EXPECT_DOUBLE_EQ(dm->thresholds.temperature_c->high_alarm, 75.0);
  // Page 11h DataPathState: every lane DPActivated (4).
  const std::size_t p11 = 128 * 5;
  for (unsigned i = 0; i < 4; ++i) EXPECT_EQ(static_cast<unsigned>(image[p11 + i]), 0x44u);
  // Temperature drifts with emulated time (warm-up).
  rig.advance(60'000 * kMs);
  EXPECT_GT(static_cast<std::int32_t>(m.reg(0, 0, pr::kModuleTemp)) / 256.0, *dm->temperature_c + 3.0);
  // Read-only bytes and the page select bytes are refused; unknown pages unsupported.
  EXPECT_EQ(xcvr_write(b, 0, 0, 14, {std::byte{0}}, 40), mb::Status::kReadOnly);
  EXPECT_EQ(xcvr_write(b, 0, 0, 127, {std::byte{0}}, 41), mb::Status::kBadArgument);
  EXPECT_FALSE(xcvr_read(b, 0, 0x13, 128, 8, 42).has_value());
  // TELEMETRY: module temperature, Vcc and worst-lane BER from the model.
  {
    const auto msg = mbox_request(static_cast<std::uint16_t>(mb::Command::kTelemetry), 50);
    auto r = mbox_exchange(b, msg, static_cast<std::uint32_t>(msg.size()));
    ASSERT_TRUE(r.has_value());
    namespace t = mb::telemetry;
    const auto pl = r->payload();
    const auto temp = fw::load_le<std::int16_t>(pl.data(), t::kPorts + t::kPortModTempQ8);
    EXPECT_NEAR(temp / 256.0, static_cast<std::int32_t>(m.reg(0, 0, pr::kModuleTemp)) / 256.0, 0.01);
    EXPECT_NEAR(fw::load_le<std::uint16_t>(pl.data(), t::kPorts + t::kPortModVcc) / 1e4, 3.3, 0.02);
    const auto max_ber = fw::load_le<std::uint32_t>(pl.data(), t::kPorts + t::kPortMaxBer);
    EXPECT_GT(max_ber, 6000u) << "worst lane better than 1e-6";
    EXPECT_LT(max_ber, 9000u);
    EXPECT_EQ(fw::load_le<std::uint32_t>(pl.data(), t::kPorts + 7 * t::kPortRecord + t::kPortMaxBer), 0u)
        << "port 7: no module";
  }
  // The host asks for low power: the data path goes, the port waits and faults after t_module.
  EXPECT_EQ(xcvr_write(b, 0, 0, 26, {std::byte{0x10}}, 60), mb::Status::kOk);
  rig.advance(1 * kMs);
  EXPECT_EQ(m.state(0, 0), LinkState::kModuleWait);
  rig.advance(5'100 * kMs);
  EXPECT_EQ(m.state(0, 0), LinkState::kFault);
  EXPECT_EQ(m.result_code(0, 0), TrainResult::kModuleNotReady);
}

// ---- Determinism and scale ------------------------------------------------------------------

std::vector<std::string> run_scenario(std::uint64_t seed, std::vector<std::uint64_t>* counters) {
  Rig rig(mesh8(seed));
  if (!rig.ok()) return {};
  Mesh m(rig);
  if (!m.ok()) return {};
  m.enable_all();
  auto r = rig.emulator().load_scenario_text(
      "faults:\n"
      "  - {at_ms: 150, kind: ber_ramp, card: 0, port: 0, value: 2e-4, duration_ms: 100}\n"
      "  - {at_ms: 200, kind: lane_loss, card: 2, port: 2, lane: 5, duration_ms: 300}\n"
      "  - {at_ms: 220, kind: flap_storm, card: 5, port: 1, count: 2, duration_ms: 50}\n"
      "  - {at_ms: 260, kind: module_removal, card: 6, port: 3, duration_ms: 100}\n");
  EXPECT_TRUE(r.has_value());
  for (int i = 0; i < 10; ++i) {
    rig.advance(100 * kMs);
    for (unsigned c = 0; c < 8; c += 3)
      for (unsigned l = 0; l < 8; l += 3) counters->push_back(m.lane64(c, 0, l, ln::kSymbolErrors));
  }
  return rig.emulator().event_log();
}

TEST(OpticsReplay, SameSeedSameEventLogAndCounters) {
  std::vector<std::uint64_t> c1, c2, c3;
  const auto a = run_scenario(11, &c1);
  const auto b = run_scenario(11, &c2);
  (void)run_scenario(12, &c3);
  ASSERT_FALSE(a.empty());
  // Mailbox lines carry wall-clock-independent content only; compare everything.
  EXPECT_EQ(a, b);
  EXPECT_EQ(c1, c2);
  EXPECT_NE(c1, c3) << "another seed draws other errors";
}

TEST(OpticsScale, Cards1024TrainAndSnapshot) {
  emu::SystemConfig cfg;
  cfg.name = "ring1024";
  cfg.num_cards = 1024;
  cfg.card.hbm_bytes = 1u << 20;
  cfg.card.num_ports = 8;
  cfg.clock = emu::ClockMode::kVirtual;
  // Each card: ports 0..2 to the next three cards, ports 3..5 from the previous three.
  for (std::uint32_t a = 0; a < 1024; ++a)
    for (unsigned k = 0; k < 3; ++k) cfg.cables.push_back(emu::Cable{a, k, (a + k + 1) % 1024, 3 + k, {}});
  auto e = emu::Emulator::create(cfg);
  ASSERT_TRUE(e.has_value()) << e.error().to_string();
  auto& emu = **e;
  const auto w0 = std::chrono::steady_clock::now();
  for (std::uint32_t c = 0; c < 1024; ++c)
    for (unsigned p = 0; p < 6; ++p) emu.card(c).bar0_write(regs::port_reg(p, pr::kCtrl), 32, pr::kCtrlEnable.mask());
  ASSERT_TRUE(emu.advance(200 * kMs).has_value());
  const double train_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
  unsigned up = 0;
  for (std::uint32_t c = 0; c < 1024; ++c)
    for (unsigned p = 0; p < 6; ++p)
      up +=
          pr::kStatusLinkUp.get(static_cast<std::uint32_t>(emu.card(c).bar0_read(regs::port_reg(p, pr::kStatus), 32)));
  EXPECT_EQ(up, 1024u * 6);
  // Stats snapshot of every card into host memory.
  namespace st = fw::stats;
  const std::size_t bytes = (st::block_bytes(8) + 4095) / 4096 * 4096;
  std::vector<std::unique_ptr<HostBuffer>> bufs;
  for (std::uint32_t c = 0; c < 1024; ++c) {
    bufs.push_back(std::make_unique<HostBuffer>(bytes));
    ASSERT_TRUE(emu.card(c).iommu().map(bufs.back()->data(), 0x100000, bytes, be::DmaAccess::kReadWrite).has_value());
    auto cmd = emu.card(c).cfg_read(pci::cfg::kCommand, 2);
    emu.card(c).cfg_write(pci::cfg::kCommand, 2, cmd | pci::cfg::kCommandMemory | pci::cfg::kCommandBusMaster);
    emu.card(c).bar0_write(g::kStatsAddr, 64, 0x100000);
  }
  double best_ms = 1e9;
  for (int round = 1; round <= 3; ++round) {
    ASSERT_TRUE(emu.advance(1'000 * kMs).has_value());
    const auto t0 = std::chrono::steady_clock::now();
    for (std::uint32_t c = 0; c < 1024; ++c)
      emu.card(c).bar0_write(g::kStatsCtrl, 32, static_cast<std::uint32_t>(round));
    best_ms =
        std::min(best_ms, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    for (std::uint32_t c = 0; c < 1024; c += 97) {
      EXPECT_EQ(emu.card(c).bar0_read(g::kStatsSeq, 32), static_cast<std::uint32_t>(round));
    }
  }
  std::printf(
      "1024 cards x 6 cabled ports: bring-up %.2f s wall for 200 ms virtual; stats snapshot %.1f ms "
      "(%.0f ns per lane)\n",
      train_s, best_ms, best_ms * 1e6 / (1024.0 * 8 * 8));
  // Speed is printed, not asserted: it depends on the machine's load and on sanitizers
  // (720 ms against a 300 ms bound under TSan on a loaded 2-core machine). This test asserts
  // that every link trained and every card's snapshot completed, above.
}

}  // namespace
}  // namespace npo::itest
