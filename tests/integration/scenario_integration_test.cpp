// SPDX-License-Identifier: Apache-2.0
// Scripted fault scenarios: replaying the same scenario, seed and register actions gives a
// byte-identical event log; a bad scenario is rejected whole, naming the entry.
#include <algorithm>

#include "card/mailbox.hpp"
#include "harness.hpp"

namespace npo::itest {
namespace {

constexpr std::uint64_t kRingIova = 0x0010'0000;
constexpr std::uint64_t kSrcIova = 0x1000'0000;
constexpr std::uint64_t kDstIova = 0x2000'0000;

bool has_line(const std::vector<std::string>& log, std::string_view needle) {
  return std::any_of(log.begin(), log.end(), [&](const std::string& l) { return l.find(needle) != std::string::npos; });
}

struct SessionResult {
  std::vector<std::string> log;
  std::uint64_t serial0 = 0;
  std::uint64_t serial1 = 0;
};

/// One scripted session: scenario file, link bring-up on two cabled port pairs, DMA before
/// and after faults, mailbox calls, time advanced in steps. Every asynchronous action is
/// waited for before time moves on, so the event log's order is fixed.
SessionResult run_session(std::uint64_t seed) {
  SessionResult out;
  auto cfg = test_config(2, seed);
  cfg.cables = {emu::Cable{0, 0, 1, 0}, emu::Cable{0, 1, 1, 1}};
  Rig rig(cfg);
  if (!rig.ok()) return out;
  auto loaded = rig.emulator().load_scenario_file(NPO_TEST_DATA_DIR "/scenarios/mixed_faults.yaml");
  EXPECT_TRUE(loaded.has_value()) << loaded.error().to_string();
  be::Device* d0 = rig.open(0);
  be::Device* d1 = rig.open(1);
  if (d0 == nullptr || d1 == nullptr) return out;
  auto& b0 = Rig::bar0(*d0);
  auto& b1 = Rig::bar0(*d1);
  out.serial0 = b0.read64(g::kSerial);
  out.serial1 = b1.read64(g::kSerial);
  auto step = [&](std::uint64_t until_ns, std::uint64_t by) {
    while (rig.emulator().now_ns() < until_ns) rig.advance(std::min(by, until_ns - rig.emulator().now_ns()));
  };

  for (unsigned p = 0; p < 2; ++p) {
    b0.write32(regs::port_reg(p, pr::kCtrl), pr::kCtrlEnable.mask());
    b1.write32(regs::port_reg(p, pr::kCtrl), pr::kCtrlEnable.mask());
  }
  auto& src = rig.alloc_mapped(*d0, 4 * kPage, kSrcIova, be::DmaAccess::kRead);
  rig.alloc_mapped(*d0, 4 * kPage, kDstIova, be::DmaAccess::kWrite);
  std::memset(src.data(), 0x42, src.size());
  RingQueue q0(rig, *d0, 0, kRingIova);
  RingQueue q8(rig, *d0, regs::kQueuesPerEngine, kRingIova + 0x10'0000);
  EXPECT_NE(q0.enable() & qr::kStatusEnabled.mask(), 0u);
  EXPECT_NE(q8.enable() & qr::kStatusEnabled.mask(), 0u);

  step(3 * kMs, kMs);  // completion_error armed at 2 ms
  q0.put(copy_desc(kSrcIova, kDstIova, kPage));
  q0.ring();
  auto c = q0.next();
  EXPECT_TRUE(c && c->status() == dma::Status::kEngineError);
  q0.ack();

  step(6 * kMs, kMs);  // mailbox_corrupt armed at 5 ms
  card::MailboxClient mbox(b0, rig.backend().clock(), 0, 5'000'000'000);
  std::array<std::byte, mb::heartbeat::kReqSize> cookie{};
  // ERROR_LOG_CLEAR is not idempotent: a corrupt reply is reported, not retried (mailbox.md
  // §2.5; an idempotent HEARTBEAT would be retried and succeed).
  auto r = mbox.call(mb::Command::kErrorLogClear, {});
  EXPECT_TRUE(!r && r.error().code() == Code::kDataLoss);
  r = mbox.call(mb::Command::kHeartbeat, cookie);
  EXPECT_TRUE(r.has_value());

  step(25 * kMs, kMs);  // engine 1 hung since 20 ms: this op never completes
  q8.put(copy_desc(kSrcIova, kDstIova + kPage, kPage));
  q8.ring();

  // iommu_fault armed at 30 ms: the next data access of the card faults (injected faults
  // spare ring fetches), so this op completes with IOMMU_FAULT at its source IOVA and the
  // queue carries on (registers.md §5.7).
  step(35 * kMs, 2 * kMs);
  q0.put(copy_desc(kSrcIova, kDstIova + 2 * kPage, kPage));
  q0.ring();
  auto f = q0.next();
  EXPECT_TRUE(f && f->status() == dma::Status::kIommuFault);
  EXPECT_TRUE(f && f->info() == kSrcIova);
  q0.ack();
  EXPECT_EQ(b0.read32(q0.reg(qr::kStatus)) & qr::kStatusHalted.mask(), 0u);
  EXPECT_NE(b0.read32(g::kErrStatus) & g::kErrIommuFault.mask(), 0u);

  step(100 * kMs, 5 * kMs);  // links up at ~37 ms, watchdog at 70 ms
  EXPECT_NE(pr::kStatusLinkUp.get(b0.read32(regs::port_reg(0, pr::kStatus))), 0u);
  EXPECT_NE(b0.read32(g::kErrStatus) & g::kErrEngineHang.mask(), 0u);
  EXPECT_FALSE(q8.peek().has_value());
  out.log = rig.emulator().event_log();
  return out;
}

TEST(ScenarioIntegration, ReplayIsByteIdenticalAndSeedChangesSerials) {
  const SessionResult a = run_session(42);
  const SessionResult b = run_session(42);
  ASSERT_GE(a.log.size(), 10u) << "the log must be non-trivial";
  EXPECT_EQ(a.log, b.log) << "same scenario, seed and actions must give the same event log";
  // The log covers every fault, the reactions to them, and link training.
  for (const char* needle :
       {"fault completion_error engine=0 queue=0", "fault mailbox_corrupt", "fault engine_hang engine=1",
        "fault iommu_fault", "mailbox reply corrupted", "iommu_fault iova=", "watchdog engine_hang queue=8",
        "card=0 port=0 up neighbor=2:0", "card=1 port=1 up neighbor=1:1", "t=2000000 card=0 fault completion_error"}) {
    EXPECT_TRUE(has_line(a.log, needle)) << "missing: " << needle;
  }
  EXPECT_EQ(a.serial0, b.serial0);
  EXPECT_EQ(a.serial1, b.serial1);
  EXPECT_NE(a.serial0, a.serial1) << "cards get distinct serials";

  const SessionResult c = run_session(43);
  EXPECT_NE(c.serial0, a.serial0) << "a different seed gives different serials";
  EXPECT_NE(c.serial1, a.serial1);
}

TEST(ScenarioIntegration, BadEntryRejectsWholeScenario) {
  struct Case {
    const char* what;
    const char* text;
    const char* needle;  // must appear in the error message
  };
  const Case cases[] = {
      {"unknown kind",
       "faults:\n  - {at_ms: 1, kind: mailbox_timeout, card: 0}\n  - {at_ms: 2, kind: meteor_strike, card: 0}\n",
       "meteor_strike"},
      {"card out of range",
       "faults:\n  - {at_ms: 1, kind: mailbox_timeout, card: 0}\n  - {at_ms: 2, kind: mailbox_corrupt, card: 7}\n",
       "card 7"},
      {"unknown field",
       "faults:\n  - {at_ms: 1, kind: mailbox_timeout, card: 0}\n  - {at_ms: 2, kind: mailbox_corrupt, card: 1, "
       "colour: red}\n",
       "colour"},
      {"missing engine",
       "faults:\n  - {at_ms: 1, kind: mailbox_timeout, card: 0}\n  - {at_ms: 2, kind: engine_hang, card: 1}\n",
       "engine"},
  };
  for (const auto& tc : cases) {
    SCOPED_TRACE(tc.what);
    Rig rig(test_config(2));
    ASSERT_TRUE(rig.ok());
    auto r = rig.emulator().load_scenario_text(tc.text);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code(), Code::kInvalidArgument);
    EXPECT_NE(r.error().message().find("faults[1]"), std::string::npos) << r.error().message();
    EXPECT_NE(r.error().message().find(tc.needle), std::string::npos) << r.error().message();
    rig.advance(1'000 * kMs);
    const auto log = rig.emulator().event_log();
    EXPECT_TRUE(log.empty()) << "nothing of a rejected scenario may be scheduled; first line: " << log.front();

    // The emulator still accepts a good scenario afterwards (JSON form), and runs exactly it.
    auto ok = rig.emulator().load_scenario_text(R"({"faults": [{"at_ns": 5, "kind": "mailbox_corrupt", "card": 1}]})");
    ASSERT_TRUE(ok.has_value()) << ok.error().to_string();
    rig.advance(1'000);
    const auto after = rig.emulator().event_log();
    ASSERT_EQ(after.size(), 1u);
    EXPECT_NE(after[0].find("card=1 fault mailbox_corrupt"), std::string::npos) << after[0];
  }
}

}  // namespace
}  // namespace npo::itest
