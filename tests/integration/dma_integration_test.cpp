// SPDX-License-Identifier: Apache-2.0
// DMA through registers: rings in IOMMU-mapped host memory, doorbells, phase-bit completion
// polling, IOMMU faults and the fault log, engine hang and recovery, injected completion
// errors and FENCE semantics (docs/spec/dma.md, registers.md §3.4, §5).
#include <algorithm>
#include <random>

#include "harness.hpp"

namespace npo::itest {
namespace {

using namespace std::chrono_literals;

constexpr std::uint64_t kRingIova = 0x0010'0000;
constexpr std::uint64_t kSrcIova = 0x1000'0000;
constexpr std::uint64_t kDstIova = 0x2000'0000;
constexpr std::uint64_t kUnmappedIova = 0x5000'0000;

void fill_random(std::span<std::byte> s, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (std::size_t i = 0; i + 8 <= s.size(); i += 8) fw::store_le<std::uint64_t>(s.data(), i, rng());
}

bool all_bytes(std::span<const std::byte> s, std::byte v) {
  return std::all_of(s.begin(), s.end(), [v](std::byte b) { return b == v; });
}

// ---- 1. host -> HBM -> host --------------------------------------------------------------

TEST(DmaIntegration, CopyHostToHbmToHostRoundTrip) {
  Rig rig(test_config(1));
  ASSERT_TRUE(rig.ok());
  be::Device* dev = rig.open(0);
  ASSERT_NE(dev, nullptr);
  auto& b = Rig::bar0(*dev);
  constexpr std::uint32_t kLen = 1u << 20;
  constexpr std::uint64_t kHbmOff = 0x30'0000;
  auto& src = rig.alloc_mapped(*dev, kLen, kSrcIova, be::DmaAccess::kRead);
  auto& dst = rig.alloc_mapped(*dev, kLen, kDstIova, be::DmaAccess::kWrite);
  fill_random(src.span(), 0x5eed);

  RingQueue q(rig, *dev, 0, kRingIova);
  const std::uint32_t st = q.enable();
  ASSERT_EQ(st & qr::kStatusEnabled.mask(), qr::kStatusEnabled.mask());
  ASSERT_EQ(st & qr::kStatusConfigError.mask(), 0u);
  EXPECT_EQ(b.read32(q.reg(qr::kConfig)), qr::kConfigDepthLog2.make(6));

  EXPECT_EQ(q.put(copy_desc(kSrcIova, kHbmOff, kLen, dma::flags::kDstHbm)), 0u);
  EXPECT_EQ(q.put(copy_desc(kHbmOff, kDstIova, kLen, dma::flags::kSrcHbm)), 1u);
  q.ring();  // one doorbell for the batch
  for (std::uint32_t i = 0; i < 2; ++i) {
    auto c = q.next();
    ASSERT_TRUE(c.has_value()) << "no completion " << i;
    EXPECT_EQ(c->status(), dma::Status::kOk);
    EXPECT_EQ(c->info(), kLen);
    EXPECT_EQ(c->sq_index(), i);
    EXPECT_TRUE(c->phase());
  }
  EXPECT_FALSE(q.peek().has_value()) << "exactly two completions";
  EXPECT_EQ(std::memcmp(dst.data(), src.data(), kLen), 0) << "host -> HBM -> host round trip";
  auto ap = dev->map_aperture(pci::kBarHbm);
  ASSERT_TRUE(ap.has_value());
  ASSERT_GE(ap->size(), kHbmOff + kLen);
  EXPECT_EQ(std::memcmp(ap->data() + kHbmOff, src.data(), kLen), 0) << "HBM through the BAR2 aperture";

  EXPECT_EQ(b.read64(q.reg(qr::kCompleted)), 2u);
  EXPECT_EQ(b.read32(q.reg(qr::kCqTail)), 2u);
  EXPECT_EQ(b.read32(q.reg(qr::kSqHead)), 2u);
  EXPECT_EQ(b.read32(q.reg(qr::kSqTail)), 2u);
  q.ack();
  EXPECT_EQ(b.read32(q.reg(qr::kCqHead)), 2u);
  const std::uint32_t after = b.read32(q.reg(qr::kStatus));
  EXPECT_NE(after & qr::kStatusIdle.mask(), 0u);
  EXPECT_NE(after & qr::kStatusEnabled.mask(), 0u);
  EXPECT_EQ(b.read32(q.reg(qr::kErr)), 0u);
  EXPECT_EQ(b.read32(g::kErrStatus), 0u);
  EXPECT_EQ(b.read32(g::kFaultCount), 0u);
}

// ---- 2. IOMMU faults ---------------------------------------------------------------------

TEST(DmaIntegration, UnmappedSourceFaultsAndIsLogged) {
  Rig rig(test_config(1));
  ASSERT_TRUE(rig.ok());
  be::Device* dev = rig.open(0);
  ASSERT_NE(dev, nullptr);
  auto& b = Rig::bar0(*dev);
  const int irq = rig.route_vector(*dev, pci::kMsixVectorGlobal);
  constexpr unsigned kQ = 1 * regs::kQueuesPerEngine + 2;  // engine 1, queue 2
  auto& dst = rig.alloc_mapped(*dev, 2 * kPage, kDstIova);
  std::memset(dst.data(), 0xa5, dst.size());
  RingQueue q(rig, *dev, kQ, kRingIova);
  ASSERT_NE(q.enable() & qr::kStatusEnabled.mask(), 0u);

  q.put(copy_desc(kUnmappedIova, kDstIova, 2 * kPage));
  q.ring();
  auto c = q.next();
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->status(), dma::Status::kIommuFault);
  EXPECT_EQ(c->info(), kUnmappedIova);
  EXPECT_EQ(c->sq_index(), 0u);
  q.ack();
  EXPECT_TRUE(all_bytes(dst.span(), std::byte{0xa5})) << "destination must be untouched";

  EXPECT_NE(b.read32(g::kErrStatus) & g::kErrIommuFault.mask(), 0u);
  EXPECT_TRUE(wait_until([&] { return eventfd_take(irq) >= 1; })) << "vector 0 on the IOMMU fault";
  EXPECT_NE(b.read32(q.reg(qr::kErr)) & qr::kErrOpFailed.mask(), 0u);
  EXPECT_EQ(b.read32(g::kFaultCount), 1u);
  EXPECT_EQ(b.read64(g::kFaultIova), kUnmappedIova);
  const std::uint32_t info = b.read32(g::kFaultInfo);
  EXPECT_EQ(g::kFaultInfoValid.get(info), 1u);
  EXPECT_EQ(g::kFaultInfoEngine.get(info), 1u);
  EXPECT_EQ(g::kFaultInfoQueue.get(info), 2u);
  EXPECT_EQ(g::kFaultInfoWrite.get(info), 0u) << "the faulting access was a read";
  EXPECT_EQ(g::kFaultInfoPerm.get(info), 0u) << "no mapping (not a permission fault)";
  // FAULT_INFO is read-to-clear: the log is now empty, the counter is not.
  EXPECT_EQ(b.read32(g::kFaultInfo), 0u);
  EXPECT_EQ(b.read64(g::kFaultIova), 0u);
  EXPECT_EQ(b.read32(g::kFaultCount), 1u);
  // ERR_STATUS is RW1C: writing 0 changes nothing, writing the bit clears it.
  b.write32(g::kErrStatus, 0);
  EXPECT_NE(b.read32(g::kErrStatus) & g::kErrIommuFault.mask(), 0u);
  b.write32(g::kErrStatus, g::kErrIommuFault.mask());
  EXPECT_EQ(b.read32(g::kErrStatus) & g::kErrIommuFault.mask(), 0u);

  // A source that is mapped for its first page only: the fault names the first unmapped
  // IOVA and nothing is copied, not even the mapped part.
  auto& half = rig.alloc_mapped(*dev, kPage, kSrcIova, be::DmaAccess::kRead);
  std::memset(half.data(), 0x3c, half.size());
  q.put(copy_desc(kSrcIova, kDstIova, 2 * kPage));
  q.ring();
  c = q.next();
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->status(), dma::Status::kIommuFault);
  EXPECT_EQ(c->info(), kSrcIova + kPage);
  EXPECT_EQ(c->sq_index(), 1u);
  q.ack();
  EXPECT_TRUE(all_bytes(dst.span(), std::byte{0xa5})) << "partial source: destination untouched";
  EXPECT_EQ(b.read32(g::kFaultCount), 2u);
  EXPECT_EQ(b.read64(g::kFaultIova), kSrcIova + kPage);
  EXPECT_EQ(g::kFaultInfoValid.get(b.read32(g::kFaultInfo)), 1u);
}

TEST(DmaIntegration, WriteToReadOnlyMappingIsPermissionFault) {
  Rig rig(test_config(1));
  ASSERT_TRUE(rig.ok());
  be::Device* dev = rig.open(0);
  ASSERT_NE(dev, nullptr);
  auto& b = Rig::bar0(*dev);
  auto& ro = rig.alloc_mapped(*dev, 2 * kPage, kDstIova, be::DmaAccess::kRead);
  std::memset(ro.data(), 0x77, ro.size());
  auto ap = dev->map_aperture(pci::kBarHbm);
  ASSERT_TRUE(ap.has_value());
  std::memset(ap->data(), 0x11, 2 * kPage);

  RingQueue q(rig, *dev, 0, kRingIova);
  ASSERT_NE(q.enable() & qr::kStatusEnabled.mask(), 0u);
  q.put(copy_desc(0, kDstIova, 2 * kPage, dma::flags::kSrcHbm));  // HBM -> read-only host buffer
  q.ring();
  auto c = q.next();
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->status(), dma::Status::kIommuPermission);
  EXPECT_EQ(c->info(), kDstIova);
  EXPECT_TRUE(all_bytes(ro.span(), std::byte{0x77})) << "no byte of the read-only buffer may change";
  EXPECT_NE(b.read32(g::kErrStatus) & g::kErrIommuFault.mask(), 0u);
  EXPECT_EQ(b.read32(g::kFaultCount), 1u);
  EXPECT_EQ(b.read64(g::kFaultIova), kDstIova);
  const std::uint32_t info = b.read32(g::kFaultInfo);
  EXPECT_EQ(g::kFaultInfoValid.get(info), 1u);
  EXPECT_EQ(g::kFaultInfoWrite.get(info), 1u);
  EXPECT_EQ(g::kFaultInfoPerm.get(info), 1u);
  EXPECT_EQ(g::kFaultInfoEngine.get(info), 0u);
  EXPECT_EQ(g::kFaultInfoQueue.get(info), 0u);
}

// ---- 3. engine hang, watchdog and queue reset ---------------------------------------------

TEST(DmaIntegration, EngineHangWatchdogAndQueueResetRecovery) {
  auto cfg = test_config(1);
  ASSERT_EQ(cfg.watchdog_ns, 50 * kMs);
  Rig rig(cfg);
  ASSERT_TRUE(rig.ok());
  be::Device* dev = rig.open(0);
  ASSERT_NE(dev, nullptr);
  auto& b = Rig::bar0(*dev);
  const int irq = rig.route_vector(*dev, pci::kMsixVectorGlobal);
  constexpr std::uint32_t kLen = 8 * kPage;
  auto& src = rig.alloc_mapped(*dev, kLen, kSrcIova, be::DmaAccess::kRead);
  auto& dst = rig.alloc_mapped(*dev, 3 * kLen, kDstIova, be::DmaAccess::kWrite);
  fill_random(src.span(), 77);

  ASSERT_TRUE(rig.emulator().inject({.at_ns = 0, .kind = emu::FaultKind::kEngineHang, .card = 0, .engine = 0}));
  rig.advance(1 * kMs);

  RingQueue q0(rig, *dev, 0, kRingIova);                                   // engine 0 queue 0: hung
  RingQueue q1(rig, *dev, 1, kRingIova + 0x10'0000);                       // engine 0 queue 1: hung too
  RingQueue q8(rig, *dev, regs::kQueuesPerEngine, kRingIova + 0x20'0000);  // engine 1 queue 0
  ASSERT_NE(q0.enable() & qr::kStatusEnabled.mask(), 0u);
  ASSERT_NE(q1.enable() & qr::kStatusEnabled.mask(), 0u);
  ASSERT_NE(q8.enable() & qr::kStatusEnabled.mask(), 0u);
  q0.put(copy_desc(kSrcIova, kDstIova, kLen));
  q0.ring();
  q1.put(copy_desc(kSrcIova, kDstIova + kLen, kLen));
  q1.ring();

  // Engine 1 keeps working while engine 0 hangs.
  q8.put(copy_desc(kSrcIova, kDstIova + 2 * kLen, kLen));
  q8.ring();
  auto c8 = q8.next();
  ASSERT_TRUE(c8.has_value()) << "engine 1 must not be affected by engine 0's hang";
  EXPECT_EQ(c8->status(), dma::Status::kOk);
  EXPECT_EQ(std::memcmp(dst.data() + 2 * kLen, src.data(), kLen), 0);
  q8.ack();

  // Engine 0: nothing completes (bounded negative wait), the queue is not idle.
  EXPECT_FALSE(q0.next(200ms).has_value()) << "a hung engine completed an op";
  EXPECT_FALSE(q1.peek().has_value());
  EXPECT_EQ(b.read32(q0.reg(qr::kSqHead)), 0u);
  EXPECT_EQ(b.read32(q0.reg(qr::kCqTail)), 0u);
  EXPECT_EQ(b.read32(q0.reg(qr::kStatus)) & qr::kStatusIdle.mask(), 0u);
  EXPECT_EQ(b.read32(q1.reg(qr::kStatus)) & qr::kStatusIdle.mask(), 0u);
  EXPECT_EQ(b.read32(g::kErrStatus) & g::kErrEngineHang.mask(), 0u) << "before the watchdog period";
  EXPECT_EQ(eventfd_take(irq), 0u);

  // Past the watchdog period (virtual time): ENGINE_HANG and vector 0.
  rig.advance(cfg.watchdog_ns);
  EXPECT_NE(b.read32(g::kErrStatus) & g::kErrEngineHang.mask(), 0u);
  EXPECT_TRUE(wait_until([&] { return eventfd_take(irq) >= 1; })) << "vector 0 on ENGINE_HANG";
  EXPECT_EQ(b.read32(q0.reg(qr::kSqHead)), 0u) << "the card aborts nothing by itself";

  // Recovery (registers.md §5.9): QUEUE.RESET, clear ENGINE_HANG, zero the CQ, re-enable.
  b.write32(q0.reg(qr::kReset), qr::kResetQueue.mask());
  EXPECT_TRUE(wait_until([&] { return (b.read32(q0.reg(qr::kStatus)) & qr::kStatusEnabled.mask()) == 0; }));
  EXPECT_EQ(b.read32(q0.reg(qr::kSqHead)), 0u);
  EXPECT_EQ(b.read32(q0.reg(qr::kSqTail)), 0u);
  EXPECT_EQ(b.read32(q0.reg(qr::kCqTail)), 0u);
  EXPECT_NE(b.read32(q0.reg(qr::kStatus)) & qr::kStatusIdle.mask(), 0u);
  b.write32(g::kErrStatus, g::kErrEngineHang.mask());
  EXPECT_EQ(b.read32(g::kErrStatus) & g::kErrEngineHang.mask(), 0u);

  std::memset(dst.data(), 0, kLen);
  ASSERT_NE(q0.enable() & qr::kStatusEnabled.mask(), 0u);
  q0.put(copy_desc(kSrcIova, kDstIova, kLen));
  q0.ring();
  auto c0 = q0.next();
  ASSERT_TRUE(c0.has_value()) << "queue 0 works again after QUEUE.RESET";
  EXPECT_EQ(c0->status(), dma::Status::kOk);
  EXPECT_EQ(c0->sq_index(), 0u);
  EXPECT_EQ(std::memcmp(dst.data(), src.data(), kLen), 0);
  q0.ack();
  // Queue 1 was not reset: still hung.
  EXPECT_FALSE(q1.peek().has_value());
  EXPECT_EQ(b.read32(q1.reg(qr::kSqHead)), 0u);
  const auto log = rig.emulator().event_log();
  EXPECT_TRUE(std::any_of(log.begin(), log.end(), [](const std::string& l) {
    return l.find("watchdog engine_hang queue=0") != std::string::npos;
  }));
}

// ---- 4. injected completion error, FENCE ---------------------------------------------------

TEST(DmaIntegration, CompletionErrorThenNextOpSucceeds) {
  Rig rig(test_config(1));
  ASSERT_TRUE(rig.ok());
  be::Device* dev = rig.open(0);
  ASSERT_NE(dev, nullptr);
  auto& b = Rig::bar0(*dev);
  auto& src = rig.alloc_mapped(*dev, kPage, kSrcIova, be::DmaAccess::kRead);
  auto& dst = rig.alloc_mapped(*dev, 2 * kPage, kDstIova, be::DmaAccess::kWrite);
  fill_random(src.span(), 5);
  ASSERT_TRUE(rig.emulator().inject(
      {.at_ns = 0, .kind = emu::FaultKind::kCompletionError, .card = 0, .engine = 0, .queue = 0, .count = 1}));
  rig.advance(1);

  RingQueue q(rig, *dev, 0, kRingIova);
  ASSERT_NE(q.enable() & qr::kStatusEnabled.mask(), 0u);
  q.put(copy_desc(kSrcIova, kDstIova, kPage));
  q.put(copy_desc(kSrcIova, kDstIova + kPage, kPage));
  q.ring();
  auto c = q.next();
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->status(), dma::Status::kEngineError);
  EXPECT_EQ(c->sq_index(), 0u);
  c = q.next();
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->status(), dma::Status::kOk) << "count = 1: only one op fails";
  EXPECT_EQ(c->info(), kPage);
  EXPECT_EQ(c->sq_index(), 1u);
  EXPECT_EQ(std::memcmp(dst.data() + kPage, src.data(), kPage), 0);
  q.ack();
  EXPECT_EQ(b.read64(q.reg(qr::kCompleted)), 2u) << "failed ops count as completed";
  EXPECT_NE(b.read32(q.reg(qr::kErr)) & qr::kErrOpFailed.mask(), 0u);
  b.write32(q.reg(qr::kErr), qr::kErrOpFailed.mask());
  EXPECT_EQ(b.read32(q.reg(qr::kErr)) & qr::kErrOpFailed.mask(), 0u) << "QUEUE.ERR is RW1C";
}

TEST(DmaIntegration, FenceSkipsAfterFailureAndRearms) {
  // registers.md §5.7: a per-queue failure latch, set by a failed op (not by FENCE_SKIPPED),
  // cleared by every fenced op (FENCE flag or FENCE opcode). ERR.OP_FAILED is only a sticky
  // summary for software and does not influence execution.
  Rig rig(test_config(1));
  ASSERT_TRUE(rig.ok());
  be::Device* dev = rig.open(0);
  ASSERT_NE(dev, nullptr);
  auto& b = Rig::bar0(*dev);
  auto& src = rig.alloc_mapped(*dev, kPage, kSrcIova, be::DmaAccess::kRead);
  auto& dst = rig.alloc_mapped(*dev, 5 * kPage, kDstIova, be::DmaAccess::kWrite);
  fill_random(src.span(), 9);
  std::memset(dst.data(), 0xee, dst.size());
  const auto page = [&](unsigned i) { return dst.span().subspan(i * kPage, kPage); };

  RingQueue q(rig, *dev, 3, kRingIova);
  ASSERT_NE(q.enable() & qr::kStatusEnabled.mask(), 0u);
  dma::Descriptor barrier;
  barrier.set_opcode(dma::Opcode::kFence);
  q.put(copy_desc(kUnmappedIova, kDstIova, kPage));                             // 0: fails
  q.put(copy_desc(kSrcIova, kDstIova + kPage, kPage, dma::flags::kFence));      // 1: skipped
  q.put(copy_desc(kSrcIova, kDstIova + 2 * kPage, kPage));                      // 2: runs normally
  q.put(copy_desc(kSrcIova, kDstIova + 3 * kPage, kPage, dma::flags::kFence));  // 3: latch re-armed: runs
  q.put(copy_desc(kUnmappedIova, kDstIova, kPage));                             // 4: fails
  q.put(barrier);                                                               // 5: FENCE opcode: skipped
  q.put(barrier);                                                               // 6: runs
  q.ring();
  const dma::Status want[] = {dma::Status::kIommuFault, dma::Status::kFenceSkipped, dma::Status::kOk, dma::Status::kOk,
                              dma::Status::kIommuFault, dma::Status::kFenceSkipped, dma::Status::kOk};
  for (std::uint32_t i = 0; i < std::size(want); ++i) {
    auto c = q.next();
    ASSERT_TRUE(c.has_value()) << "op " << i;
    EXPECT_EQ(c->status(), want[i]) << "op " << i;
    EXPECT_EQ(c->sq_index(), i);
    if (want[i] == dma::Status::kFenceSkipped) {
      EXPECT_EQ(c->info(), 0u) << "op " << i;
    }
  }
  q.ack();
  EXPECT_TRUE(all_bytes(page(1), std::byte{0xee})) << "a skipped op moves nothing";
  EXPECT_EQ(std::memcmp(page(2).data(), src.data(), kPage), 0) << "non-fenced op after a failure runs";
  EXPECT_EQ(std::memcmp(page(3).data(), src.data(), kPage), 0) << "the next fence runs without host action";
  EXPECT_TRUE(all_bytes(page(0), std::byte{0xee}));

  // ERR.OP_FAILED: sticky, RW1C, and acknowledging it does not clear the latch.
  EXPECT_NE(b.read32(q.reg(qr::kErr)) & qr::kErrOpFailed.mask(), 0u);
  b.write32(q.reg(qr::kErr), qr::kErrOpFailed.mask());
  EXPECT_EQ(b.read32(q.reg(qr::kErr)) & qr::kErrOpFailed.mask(), 0u);
  q.put(copy_desc(kUnmappedIova, kDstIova, kPage));  // 7: fails, sets OP_FAILED again
  q.ring();
  auto c = q.next();
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->status(), dma::Status::kIommuFault);
  EXPECT_NE(b.read32(q.reg(qr::kErr)) & qr::kErrOpFailed.mask(), 0u);
  b.write32(q.reg(qr::kErr), qr::kErrOpFailed.mask());
  q.put(copy_desc(kSrcIova, kDstIova + 4 * kPage, kPage, dma::flags::kFence));  // 8: still skipped
  q.ring();
  c = q.next();
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->status(), dma::Status::kFenceSkipped);
  EXPECT_EQ(c->sq_index(), 8u);
  EXPECT_TRUE(all_bytes(page(4), std::byte{0xee}));
  q.ack();
}

}  // namespace
}  // namespace npo::itest
