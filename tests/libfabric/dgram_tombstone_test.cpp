// SPDX-License-Identifier: Apache-2.0
// The tombstone path of the `npo` provider's ring protocol (docs/libfabric.md "Data path"):
// a datagram whose slot header never landed leaves its seq missing in the peer's lane, and
// the peer consumes a lane strictly in seq order, so without a tombstone (a header with the
// skip flag for that seq) the lane would stop for good. Here a DGRAM endpoint on card 0 of
// an npo-emud mesh8 sends to one on card 1 in this process; `npo-emu fault --kind
// completion_error` makes card 0's next DMA op (the payload write) fail, so the header
// fenced behind it is skipped by the card. The next datagram must arrive, behind one
// tombstone header the card wrote first (its DMA counters say so).
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <rdma/fabric.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include "common/child_process.hpp"
#include "common/emud_process.hpp"
#include "fi_fixture.hpp"

namespace {

using namespace npo_fi_test;

// One entry (or -FI_EAVAIL for an error entry) within 10 s, progressing `other` too.
ssize_t read_one(fid_cq* cq, fi_cq_data_entry* entry, Side* other = nullptr) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    const ssize_t r = fi_cq_read(cq, entry, 1);
    if (r != -FI_EAGAIN || std::chrono::steady_clock::now() > end) return r;
    if (other) progress(*other);
    std::this_thread::yield();
  }
}

TEST(DgramTombstone, ADatagramWhoseHeaderNeverLandedIsSkippedAndTheLaneGoesOn) {
  npo_test::EmudProcess emud;
  ASSERT_TRUE(emud.start(NPO_EMUD, "emu:mesh8")) << emud.output();
  use_provider_on(emud.uri());
  const SideOptions o{.hints = dgram_hints, .cq_format = FI_CQ_FORMAT_DATA, .cq_size = 64};
  Side a, b;
  CloseSides close_both{a, b};
  a.open(0, o);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  b.open(1, o);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  fi_addr_t a_to_b = FI_ADDR_NOTAVAIL;
  ASSERT_EQ(fi_av_insert(a.av, b.addr.data(), 1, &a_to_b, 0, nullptr), 1);

  std::vector<std::uint8_t> rx(256, 0);
  fi_cq_data_entry e{};
  auto send = [&](std::uint8_t fill, std::size_t len) {
    const std::vector<std::uint8_t> tx(len, fill);
    EXPECT_EQ(fi_send(a.ep, tx.data(), tx.size(), nullptr, a_to_b, nullptr), 0);
    return read_one(a.cq, &e, &b);
  };
  // seq 1 lands: the lane is synced and in use
  ASSERT_EQ(fi_recv(b.ep, rx.data(), rx.size(), nullptr, FI_ADDR_UNSPEC, nullptr), 0);
  ASSERT_EQ(send(0x11, 100), 1);
  ASSERT_EQ(read_one(b.cq, &e, &a), 1);
  ASSERT_EQ(e.len, 100u);
  ASSERT_EQ(rx[0], 0x11);

  // card 0's next DMA op fails: the endpoint's queue is on engine 0 (its first endpoint)
  npo_test::ChildProcess tool;
  ASSERT_TRUE(tool.start(
      {NPO_EMU, "fault", "--socket-dir", emud.dir(), "--kind", "completion_error", "--card", "0", "--engine", "0"}));
  // (it exits by itself once the daemon acknowledged: under a sanitizer its exit takes a while)
  ASSERT_EQ(tool.wait_exit(60000), 0) << tool.output();
  ASSERT_NE(tool.output().find("injected completion_error"), std::string::npos) << tool.output();
  // the daemon fires a fault from its scheduler thread, just after it acknowledged it
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));

  const fi_npo_dma_counters before = dma_counters(a.domain);
  // seq 2: the payload write fails (ENGINE_ERROR), the card skips the header fenced behind it
  ASSERT_EQ(send(0x22, 100), -FI_EAVAIL) << "the fault did not hit the send";
  fi_cq_err_entry err{};
  ASSERT_EQ(fi_cq_readerr(a.cq, &err, 0), 1);
  EXPECT_EQ(err.err, FI_EIO) << fi_strerror(err.err);
  const fi_npo_dma_counters failed = dma_counters(a.domain);
  EXPECT_EQ(failed.ops_failed - before.ops_failed, 2u) << "header + payload (engine error) and seq (fence skipped)";
  EXPECT_EQ(failed.ops_ok, before.ops_ok);

  // seq 3: the tombstone for seq 2 goes first, then the datagram; b receives seq 3's bytes
  ASSERT_EQ(fi_recv(b.ep, rx.data(), rx.size(), nullptr, FI_ADDR_UNSPEC, nullptr), 0);
  ASSERT_EQ(send(0x33, 200), 1);
  ASSERT_EQ(read_one(b.cq, &e, &a), 1) << "the lane stopped at the seq whose header never landed";
  EXPECT_EQ(e.len, 200u);
  EXPECT_EQ(rx[0], 0x33);
  EXPECT_EQ(rx[199], 0x33);
  const fi_npo_dma_counters after = dma_counters(a.domain);
  // each slot is two writes: the header after its seq word with the payload, then, fenced, the seq
  EXPECT_EQ(after.ops_ok - failed.ops_ok, 4u) << "tombstone (header, seq), datagram (header + payload, seq)";
  EXPECT_EQ(after.bytes_moved - failed.bytes_moved, 56u + 8u + (56u + 200u) + 8u);
  EXPECT_EQ(after.ops_failed, failed.ops_failed);

  // and the lane keeps going: nothing more is owed
  ASSERT_EQ(fi_recv(b.ep, rx.data(), rx.size(), nullptr, FI_ADDR_UNSPEC, nullptr), 0);
  ASSERT_EQ(send(0x44, 8), 1);
  ASSERT_EQ(read_one(b.cq, &e, &a), 1);
  EXPECT_EQ(e.len, 8u);
  EXPECT_EQ(rx[0], 0x44);
  EXPECT_EQ(dma_counters(a.domain).ops_ok - after.ops_ok, 2u);
  b.close();
  a.close();
  EXPECT_EQ(emud.stop(), 0) << emud.output();
}

}  // namespace
