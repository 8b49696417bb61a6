// SPDX-License-Identifier: Apache-2.0
// The card's activity counters (docs/spec/registers.md §9) through Device::queue_counters()
// and Device::card_counters(): DMA with a known op count and byte count, one op that fails, a
// reader racing the engine, windows exported and revoked, a mailbox request that errors; what a
// queue reset, re-open and card reset do to them; a removed card.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/emu_system.hpp"
#include "npo/emu/emulator.hpp"
#include "npo/hal/hal.hpp"

namespace {

using namespace std::chrono_literals;
using npo::DmaAddress;
using npo::OpCompletion;
using npo::OpStatus;

struct Rig {
  std::shared_ptr<npo::emu::Emulator> emu;
  std::unique_ptr<npo::System> sys;

  Rig() {
    npo::emu::SystemConfig c;
    c.num_cards = 1;
    c.cables.clear();
    c.card.hbm_bytes = 8u << 20;
    c.clock = npo::emu::ClockMode::kVirtual;
    emu = npo::emu::Emulator::create(c).value();
    sys = npo_test::open_system(emu);
  }
  npo::Device& dev() { return sys->device(0); }
};

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

/// The counters of every queue but `skip` (engine * 8 + queue) are all zero.
void expect_others_zero(const std::vector<npo::QueueCounters>& qs, std::size_t skip) {
  for (std::size_t i = 0; i < qs.size(); ++i) {
    if (i == skip) continue;
    EXPECT_EQ(qs[i].ops_ok, 0u) << "queue " << i;
    EXPECT_EQ(qs[i].ops_error, 0u) << "queue " << i;
    EXPECT_EQ(qs[i].bytes, 0u) << "queue " << i;
  }
}

TEST(ActivityCounters, QueueCountsOpsBytesAndErrorsAndSurvivesQueueResetUntilCardReset) {
  Rig r;
  auto fresh = r.dev().queue_counters();
  ASSERT_TRUE(fresh.has_value()) << fresh.error().to_string();
  ASSERT_EQ(fresh->size(), 32u);  // 4 engines x 8 queues, engine-major
  EXPECT_EQ((*fresh)[13].engine, 1u);
  EXPECT_EQ((*fresh)[13].queue, 5u);
  expect_others_zero(*fresh, 99);

  // Engine 1's first free queue on a fresh card is its queue 0: index 8.
  constexpr std::size_t kIdx = 8;
  auto q = r.dev().open_queue({.engine = 1, .depth = 16}).value();
  auto host = npo::allocate_host_memory(r.dev(), 1u << 20).value();
  auto hbm = npo::allocate_hbm(r.dev(), 1u << 20).value();
  constexpr std::uint32_t kLens[] = {4096, 65536, 1000};
  constexpr std::uint32_t kFill = 12345;
  for (const auto len : kLens)
    ASSERT_TRUE(q->enqueue_copy(DmaAddress::host(host->iova()), DmaAddress::hbm(hbm.offset), len));
  ASSERT_TRUE(q->enqueue_fill(DmaAddress::host(host->iova() + 65536), 0x1122334455667788ULL, kFill));
  const std::uint64_t bad_iova = 0x7fff'0000'0000ULL;  // never mapped: IOMMU_FAULT, moves nothing
  ASSERT_TRUE(q->enqueue_copy(DmaAddress::host(bad_iova), DmaAddress::hbm(hbm.offset), 4096));
  ASSERT_TRUE(q->submit());
  auto c = reap(*q, 5);
  ASSERT_EQ(c.size(), 5u);
  for (unsigned i = 0; i < 4; ++i) EXPECT_EQ(c[i].status, OpStatus::kOk) << "op " << i;
  EXPECT_EQ(c[4].status, OpStatus::kIommuFault);

  constexpr std::uint64_t kBytes = 4096 + 65536 + 1000 + kFill;
  auto after = r.dev().queue_counters().value();
  EXPECT_EQ(after[kIdx].engine, 1u);
  EXPECT_EQ(after[kIdx].queue, 0u);
  EXPECT_EQ(after[kIdx].ops_ok, 4u);
  EXPECT_EQ(after[kIdx].ops_error, 1u);
  EXPECT_EQ(after[kIdx].bytes, kBytes);
  expect_others_zero(after, kIdx);

  // A fence after the failure completes FENCE_SKIPPED: an error completion, no bytes.
  ASSERT_TRUE(q->enqueue_fence());
  ASSERT_TRUE(q->submit());
  ASSERT_EQ(reap(*q, 1).at(0).status, OpStatus::kFenceSkipped);
  after = r.dev().queue_counters().value();
  EXPECT_EQ(after[kIdx].ops_ok, 4u);
  EXPECT_EQ(after[kIdx].ops_error, 2u);
  EXPECT_EQ(after[kIdx].bytes, kBytes);

  // Closing the queue (disable + queue reset) and opening it again keeps the counts; the new
  // ops add to them.
  q.reset();
  q = r.dev().open_queue({.engine = 1, .depth = 16}).value();
  ASSERT_TRUE(q->enqueue_copy(DmaAddress::hbm(hbm.offset), DmaAddress::host(host->iova()), 512));
  ASSERT_TRUE(q->submit());
  ASSERT_EQ(reap(*q, 1).at(0).status, OpStatus::kOk);
  after = r.dev().queue_counters().value();
  EXPECT_EQ(after[kIdx].ops_ok, 5u);
  EXPECT_EQ(after[kIdx].ops_error, 2u);
  EXPECT_EQ(after[kIdx].bytes, kBytes + 512);
  expect_others_zero(after, kIdx);
  q.reset();

  // A card reset clears them.
  ASSERT_TRUE(r.dev().reset());
  after = r.dev().queue_counters().value();
  expect_others_zero(after, 99);
}

TEST(ActivityCounters, AReaderRacingTheEngineSeesMonotonicCountsAndTheExactTotal) {
  Rig r;
  auto q = r.dev().open_queue({.engine = 3, .depth = 64}).value();
  auto host = npo::allocate_host_memory(r.dev(), 1u << 16).value();
  constexpr unsigned kBatches = 40, kPerBatch = 64, kLen = 256;
  std::atomic<bool> stop{false};
  std::atomic<unsigned> reads{0};
  unsigned backwards = 0;
  std::thread reader([&] {
    npo::QueueCounters last{};
    while (!stop.load()) {
      auto c = r.dev().queue_counters();
      if (!c) continue;
      const auto& now = (*c)[24];  // engine 3, queue 0
      if (now.ops_ok < last.ops_ok || now.bytes < last.bytes) ++backwards;
      last = now;
      reads.fetch_add(1);
    }
  });
  // The reader must read while batches run, not only before or after them: on a loaded
  // 2-CPU host it may not be scheduled for a while, so every batch waits (up to 10 s) for
  // one more read after its doorbell before it is reaped.
  auto wait_for_read_past = [&](unsigned n) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (reads.load() <= n && std::chrono::steady_clock::now() < end) std::this_thread::yield();
    return reads.load() > n;
  };
  struct Join {  // also when an assertion below ends the test early
    std::atomic<bool>& stop;
    std::thread& t;
    ~Join() {
      stop.store(true);
      if (t.joinable()) t.join();
    }
  } join{stop, reader};
  EXPECT_TRUE(wait_for_read_past(0)) << "the reader never read";
  for (unsigned b = 0; b < kBatches; ++b) {
    for (unsigned i = 0; i < kPerBatch; ++i)
      ASSERT_TRUE(q->enqueue_fill(DmaAddress::host(host->iova() + i * kLen), i, kLen));
    const unsigned before = reads.load();
    ASSERT_TRUE(q->submit());
    EXPECT_TRUE(wait_for_read_past(before)) << "batch " << b;
    ASSERT_EQ(reap(*q, kPerBatch).size(), kPerBatch);
  }
  stop.store(true);
  reader.join();
  EXPECT_GT(reads.load(), kBatches);
  EXPECT_EQ(backwards, 0u);
  const auto c = r.dev().queue_counters().value();
  EXPECT_EQ(c[24].ops_ok, kBatches * kPerBatch);
  EXPECT_EQ(c[24].ops_error, 0u);
  EXPECT_EQ(c[24].bytes, std::uint64_t{kBatches} * kPerBatch * kLen);
}

TEST(ActivityCounters, WindowsValidFollowsExportAndRevoke) {
  Rig r;
  EXPECT_EQ(r.dev().card_counters().value().windows_valid, 0u);
  auto hbm = npo::allocate_hbm(r.dev(), 1u << 20).value();
  std::vector<std::unique_ptr<npo::Window>> ws;
  for (unsigned i = 0; i < 3; ++i) {
    auto w = npo::export_window(r.dev(), hbm.offset + i * 65536, 65536);
    ASSERT_TRUE(w.has_value()) << w.error().to_string();
    ws.push_back(std::move(*w));
  }
  EXPECT_EQ(r.dev().card_counters().value().windows_valid, 3u);
  ASSERT_TRUE(ws[1]->revoke());
  EXPECT_EQ(r.dev().card_counters().value().windows_valid, 2u);
  ws.clear();  // destroying revokes
  EXPECT_EQ(r.dev().card_counters().value().windows_valid, 0u);
  auto w = npo::export_window(r.dev(), hbm.offset, 4096).value();
  EXPECT_EQ(r.dev().card_counters().value().windows_valid, 1u);
  ASSERT_TRUE(r.dev().reset());
  EXPECT_EQ(r.dev().card_counters().value().windows_valid, 0u);
}

TEST(ActivityCounters, MailboxErrorsCountRequestsAnsweredWithAnError) {
  Rig r;
  ASSERT_EQ(r.dev().card_counters().value().mailbox_errors, 0u);
  ASSERT_TRUE(r.dev().heartbeat());
  EXPECT_EQ(r.dev().card_counters().value().mailbox_errors, 0u);
  // Bank 1 is never advertised (PAGE_NOT_SUPPORTED; NO_MODULE on an empty cage): one request,
  // answered with an error status.
  std::array<std::byte, 16> buf{};
  auto x = npo::read_transceiver(r.dev(), 0, 1, 0x10, 128, buf);
  ASSERT_FALSE(x.has_value());
  EXPECT_EQ(r.dev().card_counters().value().mailbox_errors, 1u) << x.error().to_string();
  ASSERT_TRUE(r.dev().firmware_versions());
  EXPECT_EQ(r.dev().card_counters().value().mailbox_errors, 1u);
  ASSERT_FALSE(npo::read_transceiver(r.dev(), 0, 1, 0x10, 128, buf).has_value());
  EXPECT_EQ(r.dev().card_counters().value().mailbox_errors, 2u);
  ASSERT_TRUE(r.dev().reset());
  EXPECT_EQ(r.dev().card_counters().value().mailbox_errors, 0u);
}

TEST(ActivityCounters, RemovedCardIsUnavailable) {
  Rig r;
  ASSERT_TRUE(r.emu->inject({.at_ns = r.emu->now_ns(), .kind = npo::emu::FaultKind::kSurpriseRemoval, .card = 0}));
  ASSERT_TRUE(r.emu->advance(0));
  const auto q = r.dev().queue_counters();
  ASSERT_FALSE(q.has_value());
  EXPECT_EQ(q.error().code(), npo::Code::kUnavailable);
  const auto k = r.dev().card_counters();
  ASSERT_FALSE(k.has_value());
  EXPECT_EQ(k.error().code(), npo::Code::kUnavailable);
}

}  // namespace
