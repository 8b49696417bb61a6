// SPDX-License-Identifier: Apache-2.0
// The DMA API end to end on the emulated card: data moved and checked, every op's status,
// faults and hangs contained, budgets enforced.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/emu_system.hpp"
#include "npo/emu/emulator.hpp"
#include "npo/emu/register.hpp"
#include "npo/hal/hal.hpp"

namespace {

using namespace std::chrono_literals;
using npo::Code;
using npo::DmaAddress;
using npo::OpCompletion;
using npo::OpStatus;

/// A System over an emulator the test keeps a handle on (for fault injection).
struct Rig {
  std::shared_ptr<npo::emu::Emulator> emu;
  std::unique_ptr<npo::System> sys;

  explicit Rig(unsigned cards = 1, npo::emu::ClockMode clock = npo::emu::ClockMode::kVirtual) {
    npo::emu::SystemConfig c;
    c.num_cards = cards;
    c.cables.clear();
    c.card.hbm_bytes = 8u << 20;
    c.clock = clock;
    emu = npo::emu::Emulator::create(c).value();
    sys = npo_test::open_system(emu);
  }
  npo::Device& dev(std::size_t i = 0) { return sys->device(i); }
};

/// Polls until `n` completions arrived or 5 s passed.
std::vector<OpCompletion> reap(npo::DmaQueue& q, std::size_t n) {
  std::vector<OpCompletion> out;
  std::array<OpCompletion, 64> buf;
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (out.size() < n && std::chrono::steady_clock::now() < deadline) {
    const std::size_t k = q.poll(std::span(buf).first(std::min(buf.size(), n - out.size())));
    out.insert(out.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(k));
  }
  return out;
}

std::vector<std::byte> pattern(std::size_t n, unsigned seed) {
  std::vector<std::byte> v(n);
  std::mt19937 rng(seed);
  for (auto& b : v) b = static_cast<std::byte>(rng());
  return v;
}

TEST(Dma, CapabilitiesComeFromTheCard) {
  Rig r;
  const auto c = r.dev().dma_capabilities();
  EXPECT_TRUE(c.copy && c.fill && c.gather && c.fence && c.remote_write && c.remote_read);
  EXPECT_EQ(c.max_transfer_bytes, 1u << 30);
  EXPECT_EQ(c.min_depth, 4u);
  EXPECT_EQ(c.max_depth, 65536u);
  EXPECT_EQ(c.engines, 4u);
  EXPECT_EQ(c.queues_per_engine, 8u);
  EXPECT_EQ(c.max_sg_entries, 256u);
}

TEST(Dma, HostToHbmToHostRoundTripWithHandlesInOrder) {
  Rig r;
  auto q = r.dev().open_queue({.engine = 1, .depth = 64}).value();
  constexpr std::size_t kSize = 3u << 20;
  auto src = npo::allocate_host_memory(r.dev(), kSize).value();
  auto dst = npo::allocate_host_memory(r.dev(), kSize).value();
  const auto data = pattern(kSize, 7);
  std::memcpy(src->bytes().data(), data.data(), kSize);
  auto hbm = npo::allocate_hbm(r.dev(), kSize).value();
  const auto h1 = q->enqueue_copy(DmaAddress::host(src->iova()), DmaAddress::hbm(hbm.offset), kSize).value();
  const auto h2 = q->enqueue_copy(DmaAddress::hbm(hbm.offset), DmaAddress::host(dst->iova()), kSize).value();
  EXPECT_EQ(h2, h1 + 1);
  EXPECT_EQ(q->outstanding(), 2u);
  ASSERT_TRUE(q->submit().has_value());
  const auto done = reap(*q, 2);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].handle, h1);
  EXPECT_EQ(done[1].handle, h2);
  for (const auto& c : done) {
    EXPECT_EQ(c.status, OpStatus::kOk) << npo::op_status_name(c.status);
    EXPECT_EQ(c.info, kSize);
  }
  EXPECT_EQ(std::memcmp(dst->bytes().data(), data.data(), kSize), 0);
  EXPECT_EQ(q->outstanding(), 0u);
}

TEST(Dma, FillGatherAndManyPassesOverTheRing) {
  Rig r;
  auto q = r.dev().open_queue({.engine = 0, .depth = 8}).value();
  auto buf = npo::allocate_host_memory(r.dev(), 1u << 20).value();
  auto* b = buf->bytes().data();
  // Fill 4 KiB at offset 0 with a pattern; check byte order (little-endian pattern).
  ASSERT_TRUE(q->enqueue_fill(DmaAddress::host(buf->iova()), 0x0706050403020100ULL, 4096).has_value());
  ASSERT_TRUE(q->submit().has_value());
  ASSERT_EQ(reap(*q, 1).at(0).status, OpStatus::kOk);
  for (std::size_t i = 0; i < 4096; ++i) ASSERT_EQ(static_cast<unsigned>(b[i]), i % 8) << i;
  // Gather three pieces (SG list in host memory at offset 64 KiB) into offset 128 KiB.
  std::iota(reinterpret_cast<unsigned char*>(b + 8192), reinterpret_cast<unsigned char*>(b + 8192 + 300), 0);
  auto* sg = reinterpret_cast<npo::SgEntry*>(b + (64u << 10));
  sg[0] = {buf->iova() + 8192, 100, 0};
  sg[1] = {buf->iova() + 8192 + 200, 100, 0};
  sg[2] = {buf->iova() + 8192 + 100, 100, 0};
  ASSERT_TRUE(q->enqueue_gather(buf->iova() + (64u << 10), 3, DmaAddress::host(buf->iova() + (128u << 10)), 300));
  // Lengths that do not sum up: kSgError, nothing written.
  ASSERT_TRUE(q->enqueue_gather(buf->iova() + (64u << 10), 3, DmaAddress::host(buf->iova() + (256u << 10)), 299));
  ASSERT_TRUE(q->submit().has_value());
  auto d = reap(*q, 2);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].status, OpStatus::kOk);
  EXPECT_EQ(d[1].status, OpStatus::kSgError);
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(static_cast<int>(b[(128u << 10) + i]), i);
    EXPECT_EQ(static_cast<int>(b[(128u << 10) + 100 + i]), (200 + i) & 0xff);
    EXPECT_EQ(static_cast<int>(b[(128u << 10) + 200 + i]), 100 + i);
  }
  EXPECT_EQ(b[256u << 10], std::byte{0});
  // 50 passes over an 8-entry ring: phase bit and handle reconstruction across wraps.
  // A fence after the failed gather is skipped (and re-arms: the next fence runs).
  std::uint64_t expect = q->enqueue_fence().value();
  ASSERT_TRUE(q->enqueue_fence());
  ASSERT_TRUE(q->submit().has_value());
  const auto f = reap(*q, 2);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].status, OpStatus::kFenceSkipped);
  EXPECT_EQ(f[1].status, OpStatus::kOk);
  ++expect;
  ++expect;
  for (int pass = 0; pass < 50; ++pass) {
    for (int i = 0; i < 8; ++i) {
      ASSERT_TRUE(
          q->enqueue_copy(DmaAddress::host(buf->iova() + 8192), DmaAddress::host(buf->iova() + 16384 + i * 64), 64));
    }
    EXPECT_EQ(q->enqueue_fence().error().code(), Code::kResourceExhausted);  // full: 8 of 8 slots busy
    ASSERT_TRUE(q->submit().has_value());
    const auto c = reap(*q, 8);
    ASSERT_EQ(c.size(), 8u);
    for (const auto& x : c) {
      EXPECT_EQ(x.handle, expect++);
      EXPECT_EQ(x.status, OpStatus::kOk);
    }
  }
}

// Stress: a ring kept full with 1 MiB copies, completions reaped a ring's worth at a time,
// CQ_HEAD written lazily by the driver: the queue must never stall (no watchdog reset).
// (The regression this guards -- a CQ_TAIL register lagging the completions in memory, so the
// card ignored a CQ_HEAD the host had every right to write -- reproduces reliably only in
// npo-dma-bench's pattern: tests/tools NpoDmaBench.TimedRunHasNoFailedOps.)
TEST(Dma, FullRingsPolledInOneCallNeverStall) {
  Rig r(1, npo::emu::ClockMode::kRealtime);
  auto q = r.dev().open_queue({.engine = 0, .depth = 1024, .hang_timeout = 2s}).value();
  auto buf = npo::allocate_host_memory(r.dev(), 1u << 20).value();
  std::vector<OpCompletion> out(4096);
  // Four times round the ring. Behaviour, not speed: every op completes kOk and the queue is
  // never reset; the only time bound is a stall guard (no completion for 30 s), far above a
  // 1 MiB copy's time even under ThreadSanitizer on a loaded machine.
  constexpr std::uint64_t kOps = 4 * 1024;
  std::uint64_t done = 0, issued = 0;
  auto last_progress = std::chrono::steady_clock::now();
  while (done < kOps) {
    if (issued < kOps && q->outstanding() + 32 <= 1024) {  // keep the ring full, 32 ops per doorbell
      for (int i = 0; i < 32; ++i) {
        ASSERT_TRUE(q->enqueue_copy(DmaAddress::host(buf->iova()), DmaAddress::hbm(1u << 20), 1u << 20));
      }
      ASSERT_TRUE(q->submit());
      issued += 32;
    }
    const auto n = q->poll(out);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(out[i].status, OpStatus::kOk) << "after " << done << " ops";
    done += n;
    if (n > 0) last_progress = std::chrono::steady_clock::now();
    ASSERT_LT(std::chrono::steady_clock::now() - last_progress, 30s) << "stalled after " << done << " ops";
    // Like npo-dma-bench: nap when nothing completed, so a poll then finds a ring's worth
    // of completions, some of them written while the card's batch is still running.
    if (n == 0) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  EXPECT_EQ(done, kOps);
  EXPECT_EQ(q->resets(), 0u);
}

TEST(Dma, FaultsCompleteWithTheirStatusAndLaterOpsRun) {
  Rig r;
  auto q = r.dev().open_queue({.engine = 2, .depth = 16}).value();
  auto buf = npo::allocate_host_memory(r.dev(), 64u << 10).value();
  std::memset(buf->bytes().data(), 0xab, 64u << 10);
  const std::uint64_t bad_iova = 0x7fff'0000'0000ULL;  // never mapped
  ASSERT_TRUE(q->enqueue_copy(DmaAddress::host(bad_iova), DmaAddress::host(buf->iova()), 4096));
  ASSERT_TRUE(q->enqueue_copy(DmaAddress::host(buf->iova() + 8192), DmaAddress::host(buf->iova() + 16384), 4096));
  ASSERT_TRUE(q->enqueue_fence());
  ASSERT_TRUE(q->enqueue_copy(DmaAddress::hbm(8u << 20), DmaAddress::host(buf->iova()), 64));  // past HBM
  ASSERT_TRUE(q->enqueue_copy(DmaAddress::host(buf->iova()), DmaAddress::hbm(0), 64));
  ASSERT_TRUE(q->submit());
  const auto c = reap(*q, 5);
  ASSERT_EQ(c.size(), 5u);
  EXPECT_EQ(c[0].status, OpStatus::kIommuFault);
  EXPECT_EQ(c[0].info, bad_iova);
  EXPECT_EQ(c[1].status, OpStatus::kOk);            // not fenced: runs after a failure
  EXPECT_EQ(c[2].status, OpStatus::kFenceSkipped);  // a failure since the last fence
  EXPECT_EQ(c[3].status, OpStatus::kHbmRange);
  EXPECT_EQ(c[3].info, 8u << 20);
  EXPECT_EQ(c[4].status, OpStatus::kOk);
  EXPECT_EQ(buf->bytes()[0], std::byte{0xab});  // the faulting copy wrote nothing
}

TEST(Dma, AFencedOpIsSkippedWhenAnOpSinceTheLastFenceFailed) {
  // fence_next_op (registers.md §5.7): the op itself carries the FENCE flag, so it -- not a
  // separate FENCE op -- is skipped; the latch clears with it, and the next fenced op runs.
  // A message's header written this way never lands over a payload that failed.
  Rig r;
  auto q = r.dev().open_queue({.engine = 1, .depth = 16}).value();
  auto buf = npo::allocate_host_memory(r.dev(), 64u << 10).value();
  std::memset(buf->bytes().data(), 0x5a, 64u << 10);
  const std::uint64_t bad_iova = 0x7fff'0000'0000ULL;                                        // never mapped
  ASSERT_TRUE(q->enqueue_copy(DmaAddress::host(bad_iova), DmaAddress::hbm(0), 4096));        // "payload" fails
  ASSERT_TRUE(q->enqueue_copy(DmaAddress::host(buf->iova()), DmaAddress::hbm(8192), 4096));  // runs
  q->fence_next_op();
  ASSERT_TRUE(q->enqueue_copy(DmaAddress::host(buf->iova()), DmaAddress::hbm(4096), 64));  // "header": skipped
  q->fence_next_op();
  ASSERT_TRUE(q->enqueue_copy(DmaAddress::host(buf->iova()), DmaAddress::host(buf->iova() + 32768), 64));  // runs
  ASSERT_TRUE(q->enqueue_copy(DmaAddress::hbm(4096), DmaAddress::host(buf->iova() + 16384), 64));          // not fenced
  ASSERT_TRUE(q->submit());
  const auto c = reap(*q, 5);
  ASSERT_EQ(c.size(), 5u);
  EXPECT_EQ(c[0].status, OpStatus::kIommuFault);
  EXPECT_EQ(c[1].status, OpStatus::kOk);
  EXPECT_EQ(c[2].status, OpStatus::kFenceSkipped);
  EXPECT_EQ(c[3].status, OpStatus::kOk) << "the skipped op cleared the latch";
  EXPECT_EQ(c[4].status, OpStatus::kOk);
  EXPECT_EQ(buf->bytes()[16384], std::byte{0}) << "the skipped op moved nothing (HBM 4096 stayed zero)";
  EXPECT_EQ(buf->bytes()[32768], std::byte{0x5a});
}

// Issue 19: completion_error through the public queue: each armed op completes with
// kEngineError (no data moved), in order, and the ops after them run.
TEST(Dma, CompletionErrorFailsEachArmedOpWithEngineError) {
  Rig r;
  auto q = r.dev().open_queue({.engine = 2, .depth = 16}).value();
  auto buf = npo::allocate_host_memory(r.dev(), 64u << 10).value();
  std::memset(buf->bytes().data(), 0x5c, 4096);
  std::memset(buf->bytes().data() + 8192, 0, 4096);
  ASSERT_TRUE(r.emu->inject(
      {.at_ns = r.emu->now_ns(), .kind = npo::emu::FaultKind::kCompletionError, .card = 0, .engine = 2, .count = 3}));
  ASSERT_TRUE(r.emu->advance(0));
  std::vector<npo::OpHandle> handles;
  for (int i = 0; i < 3; ++i) {
    handles.push_back(
        q->enqueue_copy(DmaAddress::host(buf->iova()), DmaAddress::host(buf->iova() + 8192), 4096).value());
  }
  for (int i = 0; i < 2; ++i) {
    handles.push_back(q->enqueue_copy(DmaAddress::host(buf->iova()), DmaAddress::hbm(0), 4096).value());
  }
  ASSERT_TRUE(q->submit());
  const auto c = reap(*q, 5);
  ASSERT_EQ(c.size(), 5u);
  for (std::size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(c[i].handle, handles[i]);
    EXPECT_EQ(c[i].status, i < 3 ? OpStatus::kEngineError : OpStatus::kOk) << "op " << i;
  }
  EXPECT_EQ(buf->bytes()[8192], std::byte{0}) << "a failed copy moved nothing";
  EXPECT_EQ(q->resets(), 0u);
}

// Issue 19: a card removed under open queues. Every op the queues held gets a status
// (submitted: kTimeout) as soon as the queue sees the card gone -- not after the hang
// timeout -- and every later call fails fast with kUnavailable naming the card. Windows of
// the removed card cannot be made or mapped; the other card is unaffected.
TEST(Removal, OpenQueuesAndWindowsFailFastAndEveryOpGetsAStatus) {
  Rig r(2);
  auto& dev0 = r.dev(0);
  // A 60 s hang timeout: what fails the ops below is the removal, not the watchdog.
  auto q0 = dev0.open_queue({.engine = 0, .depth = 16, .hang_timeout = 60s}).value();
  auto q1 = dev0.open_queue({.engine = 1, .depth = 16, .hang_timeout = 60s}).value();
  auto other = r.dev(1).open_queue({.engine = 0, .depth = 16}).value();
  auto buf = npo::allocate_host_memory(dev0, 64u << 10).value();
  auto buf1 = npo::allocate_host_memory(r.dev(1), 64u << 10).value();
  auto win = npo::export_window(dev0, 0, 64u << 10).value();
  auto view = npo::map_window(dev0, *win).value();
  // Engine 0 hangs, so q0's ops are still pending when the card goes.
  ASSERT_TRUE(
      r.emu->inject({.at_ns = r.emu->now_ns(), .kind = npo::emu::FaultKind::kEngineHang, .card = 0, .engine = 0}));
  ASSERT_TRUE(r.emu->advance(0));
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(q0->enqueue_copy(DmaAddress::host(buf->iova()), DmaAddress::hbm(0), 4096));
  ASSERT_TRUE(q0->submit());
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(q1->enqueue_copy(DmaAddress::host(buf->iova()), DmaAddress::hbm(0), 4096));
  ASSERT_TRUE(r.emu->inject({.at_ns = r.emu->now_ns(), .kind = npo::emu::FaultKind::kSurpriseRemoval, .card = 0}));
  ASSERT_TRUE(r.emu->advance(0));

  const auto t0 = std::chrono::steady_clock::now();
  // wait() returns at once instead of sleeping out its timeout; poll() then fails the ops.
  EXPECT_TRUE(q0->wait(30s).has_value());
  auto c0 = reap(*q0, 4);
  ASSERT_EQ(c0.size(), 4u);
  for (const auto& c : c0) EXPECT_EQ(c.status, OpStatus::kTimeout);
  // q1's ops were enqueued, not submitted: submitting them to a gone card, then polling.
  (void)q1->submit();
  auto c1 = reap(*q1, 2);
  ASSERT_EQ(c1.size(), 2u);
  for (const auto& c : c1) EXPECT_TRUE(c.status == OpStatus::kTimeout || c.status == OpStatus::kAborted);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s) << "removal found by the status read, not the watchdog";
  EXPECT_EQ(q0->outstanding(), 0u);
  EXPECT_EQ(q1->outstanding(), 0u);

  // Later calls: kUnavailable at once, naming the card.
  for (auto* q : {q0.get(), q1.get()}) {
    auto e = q->enqueue_copy(DmaAddress::host(buf->iova()), DmaAddress::hbm(0), 64);
    ASSERT_FALSE(e.has_value());
    EXPECT_EQ(e.error().code(), Code::kUnavailable);
    EXPECT_NE(e.error().to_string().find("card=0"), std::string::npos) << e.error().to_string();
    EXPECT_EQ(q->enqueue_fence().error().code(), Code::kUnavailable);
    EXPECT_EQ(q->submit().error().code(), Code::kUnavailable);
    EXPECT_EQ(q->wait(30s).error().code(), Code::kUnavailable);
    EXPECT_EQ(q->outstanding(), 0u);
  }
  auto q2 = dev0.open_queue({.engine = 2, .depth = 16});
  ASSERT_FALSE(q2.has_value());
  EXPECT_EQ(q2.error().code(), Code::kUnavailable) << q2.error().to_string();
  auto w2 = npo::export_window(dev0, 1u << 20, 4096);
  ASSERT_FALSE(w2.has_value());
  EXPECT_EQ(w2.error().code(), Code::kUnavailable) << w2.error().to_string();
  auto m2 = npo::map_window(dev0, *win);
  ASSERT_FALSE(m2.has_value());
  EXPECT_EQ(m2.error().code(), Code::kUnavailable) << m2.error().to_string();
  auto rv = win->revoke();
  ASSERT_FALSE(rv.has_value());
  EXPECT_EQ(rv.error().code(), Code::kUnavailable);
  view.reset();  // the old view and window go away without a hang
  win.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);

  // The other card carries on.
  ASSERT_TRUE(other->enqueue_copy(DmaAddress::host(buf1->iova()), DmaAddress::hbm(0), 4096));
  ASSERT_TRUE(other->submit());
  auto c = reap(*other, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, OpStatus::kOk);
}

TEST(Dma, ReadOnlyRegistrationRefusesDeviceWrites) {
  Rig r;
  auto q = r.dev().open_queue({.engine = 0, .depth = 4}).value();
  std::vector<std::byte> user(3 * 4096 + 123, std::byte{0x11});
  auto ro = npo::register_host_memory(r.dev(), std::span(user).subspan(100), /*writable=*/false).value();
  EXPECT_EQ(ro->size(), user.size() - 100);
  EXPECT_EQ(ro->page_kind(), npo::PageKind::kUser);
  auto rw = npo::allocate_host_memory(r.dev(), 4096).value();
  ASSERT_TRUE(q->enqueue_copy(DmaAddress::host(ro->iova()), DmaAddress::host(rw->iova()), 64));  // read: fine
  ASSERT_TRUE(q->enqueue_copy(DmaAddress::host(rw->iova()), DmaAddress::host(ro->iova()), 64));  // write: refused
  ASSERT_TRUE(q->submit());
  const auto c = reap(*q, 2);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].status, OpStatus::kOk);
  EXPECT_EQ(rw->bytes()[0], std::byte{0x11});
  EXPECT_EQ(c[1].status, OpStatus::kIommuPermission);
  EXPECT_EQ(c[1].info, ro->iova());
  EXPECT_EQ(user[100], std::byte{0x11});
}

TEST(Dma, HungEngineTimesOutResetsAndRecovers) {
  Rig r;
  auto q = r.dev().open_queue({.engine = 3, .depth = 16, .hang_timeout = 50ms}).value();
  auto other = r.dev().open_queue({.engine = 1, .depth = 16}).value();
  auto buf = npo::allocate_host_memory(r.dev(), 64u << 10).value();
  ASSERT_TRUE(r.emu->inject({.at_ns = 0, .kind = npo::emu::FaultKind::kEngineHang, .card = 0, .engine = 3}));
  ASSERT_TRUE(r.emu->advance(0));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(q->enqueue_copy(DmaAddress::host(buf->iova()), DmaAddress::hbm(0), 4096));
  ASSERT_TRUE(q->submit());
  ASSERT_TRUE(q->enqueue_fill(DmaAddress::hbm(0), 1, 64));  // enqueued, not submitted
  // The other engine keeps working during the hang.
  ASSERT_TRUE(other->enqueue_fill(DmaAddress::host(buf->iova()), 0x5a5a5a5a5a5a5a5aULL, 256));
  ASSERT_TRUE(other->submit());
  ASSERT_EQ(reap(*other, 1).at(0).status, OpStatus::kOk);
  EXPECT_EQ(buf->bytes()[0], std::byte{0x5a});
  const auto c = reap(*q, 4);
  ASSERT_EQ(c.size(), 4u);
  EXPECT_EQ(c[0].status, OpStatus::kTimeout);
  EXPECT_EQ(c[1].status, OpStatus::kTimeout);
  EXPECT_EQ(c[2].status, OpStatus::kTimeout);
  EXPECT_EQ(c[3].status, OpStatus::kAborted);
  EXPECT_EQ(q->resets(), 1u);
  EXPECT_EQ(q->outstanding(), 0u);
  // The queue works again.
  const auto h = q->enqueue_copy(DmaAddress::host(buf->iova()), DmaAddress::hbm(4096), 256).value();
  ASSERT_TRUE(q->submit());
  const auto again = reap(*q, 1);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].handle, h);
  EXPECT_EQ(again[0].status, OpStatus::kOk);
}

TEST(Dma, InterruptModeWaitBlocksOnTheEventfd) {
  Rig r(1, npo::emu::ClockMode::kRealtime);
  auto q = r.dev().open_queue({.engine = 0, .depth = 32, .mode = npo::CompletionMode::kInterrupt}).value();
  auto buf = npo::allocate_host_memory(r.dev(), 1u << 20).value();
  EXPECT_EQ(q->wait(1ms).error().code(), Code::kFailedPrecondition);  // nothing outstanding
  ASSERT_TRUE(q->enqueue_copy(DmaAddress::host(buf->iova()), DmaAddress::hbm(0), 1u << 20));
  EXPECT_EQ(q->wait(1ms).error().code(), Code::kFailedPrecondition);  // not submitted
  ASSERT_TRUE(q->submit());
  auto w = q->wait(5s);
  ASSERT_TRUE(w.has_value()) << w.error().to_string();
  std::array<OpCompletion, 4> out;
  ASSERT_EQ(q->poll(out), 1u);
  EXPECT_EQ(out[0].status, OpStatus::kOk);
}

TEST(Dma, QueueOptionsAndExhaustion) {
  Rig r;
  auto& d = r.dev();
  EXPECT_EQ(d.open_queue({.engine = 4}).error().code(), Code::kInvalidArgument);
  EXPECT_EQ(d.open_queue({.depth = 100}).error().code(), Code::kInvalidArgument);
  EXPECT_EQ(d.open_queue({.depth = 2}).error().code(), Code::kInvalidArgument);
  EXPECT_EQ(d.open_queue({.depth = 1u << 17}).error().code(), Code::kInvalidArgument);
  EXPECT_EQ(d.open_queue({.priority = 8}).error().code(), Code::kInvalidArgument);
  std::vector<std::unique_ptr<npo::DmaQueue>> qs;
  for (int i = 0; i < 8; ++i) qs.push_back(d.open_queue({.engine = 2, .depth = 4}).value());
  auto ninth = d.open_queue({.engine = 2, .depth = 4});
  ASSERT_FALSE(ninth.has_value());
  EXPECT_EQ(ninth.error().code(), Code::kResourceExhausted);
  qs.pop_back();  // closing one frees its slot
  EXPECT_TRUE(d.open_queue({.engine = 2, .depth = 4}).has_value());
  auto q = d.open_queue({.engine = 0, .depth = 4}).value();
  EXPECT_EQ(q->enqueue_copy(DmaAddress::hbm(0), DmaAddress::hbm(64), 0).error().code(), Code::kInvalidArgument);
  EXPECT_EQ(q->enqueue_copy(DmaAddress::hbm(0), DmaAddress::hbm(64), (1u << 30) + 1).error().code(),
            Code::kInvalidArgument);
}

TEST(Memory, BudgetsAreEnforcedAndNamed) {
  Rig r;
  auto& d = r.dev();
  const auto before = npo::memory_budget(d);
  npo::set_memory_limits(d, before.pinned_used + (1u << 20), 0);
  auto ok = npo::allocate_host_memory(d, 512u << 10);
  ASSERT_TRUE(ok.has_value());
  auto over = npo::allocate_host_memory(d, 4u << 20);
  ASSERT_FALSE(over.has_value());
  EXPECT_EQ(over.error().code(), Code::kResourceExhausted);
  EXPECT_NE(over.error().message().find("pinned-memory budget"), std::string::npos) << over.error().message();
  npo::set_memory_limits(d, 1ULL << 40, npo::memory_budget(d).iova_used + 4096);
  std::vector<std::byte> user(8192);
  auto iova_over = npo::register_host_memory(d, user);
  ASSERT_FALSE(iova_over.has_value());
  EXPECT_NE(iova_over.error().message().find("IOVA budget"), std::string::npos);
  const auto used = npo::memory_budget(d).pinned_used;
  ok->reset();  // freeing returns the budget
  EXPECT_EQ(npo::memory_budget(d).pinned_used, used - (512u << 10));
  EXPECT_EQ(npo::allocate_host_memory(d, 0).error().code(), Code::kInvalidArgument);
}

TEST(Memory, HostAllocationPagesAndNuma) {
  Rig r;
  auto big = npo::allocate_host_memory(r.dev(), 4u << 20).value();
  EXPECT_NE(big->page_kind(), npo::PageKind::kUser);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(big->bytes().data()) % (2u << 20), 0u);  // huge-page aligned
  EXPECT_EQ(big->iova() % (2u << 20), 0u);
  auto small = npo::allocate_host_memory(r.dev(), 100).value();
  EXPECT_EQ(small->size(), 100u);
  EXPECT_NE(small->iova(), big->iova());
}

TEST(Memory, HbmAllocatorAndFragmentation) {
  Rig r;
  auto& d = r.dev();
  auto s0 = npo::hbm_stats(d);
  EXPECT_EQ(s0.total, 8u << 20);
  EXPECT_EQ(s0.free, 8u << 20);
  EXPECT_EQ(s0.fragmentation, 0.0);
  std::vector<npo::HbmRange> rs;
  for (int i = 0; i < 8; ++i) rs.push_back(npo::allocate_hbm(d, 1u << 20, 1u << 20).value());
  EXPECT_EQ(npo::allocate_hbm(d, 1).error().code(), Code::kResourceExhausted);
  for (int i = 0; i < 8; i += 2) ASSERT_TRUE(npo::free_hbm(d, rs[i]));  // free every other MiB
  const auto s = npo::hbm_stats(d);
  EXPECT_EQ(s.free, 4u << 20);
  EXPECT_EQ(s.largest_free, 1u << 20);
  EXPECT_EQ(s.free_blocks, 4u);
  EXPECT_DOUBLE_EQ(s.fragmentation, 0.75);
  auto two = npo::allocate_hbm(d, 2u << 20);
  ASSERT_FALSE(two.has_value());
  EXPECT_NE(two.error().message().find("largest block 1048576"), std::string::npos) << two.error().message();
  EXPECT_EQ(npo::free_hbm(d, rs[0]).error().code(), Code::kNotFound);  // double free
  EXPECT_EQ(npo::allocate_hbm(d, 64, 3).error().code(), Code::kInvalidArgument);
  for (int i = 1; i < 8; i += 2) ASSERT_TRUE(npo::free_hbm(d, rs[i]));
  EXPECT_EQ(npo::hbm_stats(d).free_blocks, 1u);  // coalesced
  EXPECT_EQ(npo::hbm_stats(d).largest_free, 8u << 20);
}

}  // namespace
