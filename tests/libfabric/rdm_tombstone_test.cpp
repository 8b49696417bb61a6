// SPDX-License-Identifier: Apache-2.0
// The predecessor-gap path of the `npo` provider's native RDM endpoint (docs/libfabric.md
// "Data path"): a peer consumes a sender's lane of its ring strictly in seq order, and an RDM
// sender resends its own failed writes, so a gap in a lane can only be left by an endpoint that
// closed before it resent. Its successor on the same card and endpoint number writes the same
// lane: at first contact it reads the lane (sync_lane), finds the gap below a message the
// predecessor left, and owes the peer a tombstone for it; the peer skips the gap, still takes
// the predecessor's message behind it as the predecessor's, and then the successor's own.
//
// The gap is made on an npo-emud mesh8: `npo-emu fault --kind completion_error` fails card 0's
// next DMA op, and the daemon is stopped (SIGSTOP) while the endpoint posts two messages, so
// that both reach the card behind one doorbell before the endpoint can see the first fail:
// seq 2's payload write fails and the card skips its fenced header (FENCE_SKIPPED), seq 3
// lands whole. Without the tombstone the peer's lane would stop at seq 2 for good.
#include <signal.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <rdma/fabric.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include "common/child_process.hpp"
#include "common/emud_process.hpp"
#include "fi_fixture.hpp"

namespace {

using namespace npo_fi_test;

constexpr std::uint64_t kTag = 9;

// Progresses `s` for `ms` milliseconds and says whether a completion (or error) came meanwhile.
bool any_entry_within(Side& s, int ms) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < end) {
    fi_cq_tagged_entry e{};
    const ssize_t r = fi_cq_read(s.cq, &e, 1);
    if (r != -FI_EAGAIN) return true;
    std::this_thread::yield();
  }
  return false;
}

TEST(RdmTombstone, ASuccessorFillsThePredecessorsGapAndThePredecessorsMessageBehindItIsStillItsOwn) {
  npo_test::EmudProcess emud;
  ASSERT_TRUE(emud.start(NPO_EMUD, "emu:mesh8")) << emud.output();
  // The daemon runs the cards' engines (engine=daemon, emud-protocol.md §5.12): stopping it
  // (SIGSTOP below) must hold back the ops the endpoint posts, which an owner's own engines
  // would run at once.
  use_provider_on(emud.uri() + "?engine=daemon");
  const SideOptions o{.hints = mtl_ofi_hints, .check_info = check_native};
  Side a, b;
  CloseSides close_both{a, b};
  a.open(0, o);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  b.open(1, o);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  fi_addr_t a_to_b = a.insert(b);
  (void)b.insert(a);

  // seq 1 lands: the lane is synced and b has consumed it
  std::uint32_t first = 0;
  const std::uint32_t v1 = 0x11111111u;
  ASSERT_EQ(fi_trecv(b.ep, &first, sizeof first, nullptr, FI_ADDR_UNSPEC, kTag, 0, nullptr), 0);
  ASSERT_EQ(fi_tinject(a.ep, &v1, sizeof v1, a_to_b, kTag), 0);
  {
    const Entry r = wait_entry(b, {&a});
    ASSERT_FALSE(r.error || r.timeout);
    ASSERT_EQ(first, v1);
  }

  // card 0's next DMA op fails: a's queue is on engine 0 (the card's first endpoint)
  npo_test::ChildProcess tool;
  ASSERT_TRUE(tool.start(
      {NPO_EMU, "fault", "--socket-dir", emud.dir(), "--kind", "completion_error", "--card", "0", "--engine", "0"}));
  ASSERT_EQ(tool.wait_exit(60000), 0) << tool.output();
  ASSERT_NE(tool.output().find("injected completion_error"), std::string::npos) << tool.output();
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // the daemon's scheduler fires it

  // seq 2 (eager) and seq 3 (the RTS of a rendezvous) are posted while the daemon is stopped,
  // so the endpoint cannot see seq 2 fail before it posts seq 3. Posting seq 3 may wait for the
  // daemon all the same: its poll of the CQ, finding seq 2 outstanding, may probe the card's
  // STATUS register (the removed-card check, at most once per 500 us), a socket round trip. A
  // thread resumes the daemon after 300 ms; the daemon then applies the doorbell of seq 2 before
  // it answers the read (protocol §5.11, "Order with the socket"), and that poll has already
  // found the CQ empty, so seq 3 is posted before the endpoint sees seq 2's failure either way.
  const fi_npo_dma_counters before = a.counters();
  const std::uint32_t v2 = 0x22222222u;
  const auto big = pattern(64 << 10, 3);  // past the eager limit (4 KiB): a rendezvous
  int ctx2 = 0, ctx3 = 0;
  progress(a);  // its once-a-second check that the card still answers (a register read) is done now
  const pid_t daemon = emud.pid();
  ASSERT_EQ(::kill(daemon, SIGSTOP), 0);
  std::thread resume([daemon] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    (void)::kill(daemon, SIGCONT);
  });
  struct Join {  // the daemon goes on also when an assertion ends the test early
    std::thread& t;
    ~Join() {
      if (t.joinable()) t.join();
    }
  } join{resume};
  ASSERT_TRUE(npo_test::all_threads_stopped(daemon)) << "npo-emud did not stop within 5 s";
  const ssize_t s2 = fi_tsend(a.ep, &v2, sizeof v2, nullptr, a_to_b, kTag, &ctx2);
  const ssize_t s3 = fi_tsend(a.ep, big.data(), big.size(), nullptr, a_to_b, kTag, &ctx3);
  resume.join();
  ASSERT_EQ(s2, 0);
  ASSERT_EQ(s3, 0) << "seq 3 was refused: the endpoint saw seq 2 fail first";

  // a: seq 2 fails (the payload write's ENGINE_ERROR is not a path failure: no resend, a fault
  // of the endpoint); seq 3's RTS lands (a closes before it could move the data)
  const Entry e2 = wait_entry(a, {&b});
  ASSERT_FALSE(e2.timeout);
  ASSERT_TRUE(e2.error) << "the fault did not hit seq 2";
  EXPECT_EQ(e2.err.op_context, &ctx2);
  EXPECT_EQ(e2.err.err, FI_EIO) << fi_strerror(e2.err.err);
  const fi_npo_dma_counters failed = a.counters();
  EXPECT_EQ(failed.ops_failed - before.ops_failed, 2u) << "seq 2's payload (engine error) and header (fence skipped)";

  // b: its lane stops at seq 2, whose header never landed; seq 3 waits in its slot
  std::vector<std::uint8_t> rx(big.size());
  std::uint32_t got = 0;
  int rctx = 0, vctx = 0;
  ASSERT_EQ(fi_trecv(b.ep, rx.data(), rx.size(), nullptr, FI_ADDR_UNSPEC, kTag, 0, &rctx), 0);
  ASSERT_EQ(fi_trecv(b.ep, &got, sizeof got, nullptr, FI_ADDR_UNSPEC, kTag, 0, &vctx), 0);
  ASSERT_FALSE(any_entry_within(b, 300)) << "seq 3 was consumed past the missing seq 2";

  // a's successor: same card, same endpoint number, so the same lane of b's ring. Its first
  // send reads the lane, finds seq 2 missing below seq 3 and writes a tombstone for it first.
  // Seq 3 is still the predecessor's: b matches its RTS to the first receive, which fails
  // with the closed-sender error once the successor's own message (seq 4) shows that the
  // predecessor closed (nobody will move its data); seq 4 completes the second receive.
  a.close();
  a.open(0, o);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  a_to_b = a.insert(b);
  const fi_addr_t b_to_a = b.insert(a);
  const fi_npo_dma_counters succ0 = a.counters();
  const std::uint32_t v4 = 0x44444444u;
  ASSERT_EQ(fi_tinject(a.ep, &v4, sizeof v4, a_to_b, kTag), 0);
  bool rts_failed = false, arrived = false;
  for (int n = 0; n < 2; ++n) {  // in either order
    const Entry r = wait_entry(b, {&a});
    ASSERT_FALSE(r.timeout) << "the lane stopped at the predecessor's gap";
    if (r.error) {
      EXPECT_EQ(r.err.op_context, &rctx) << "the receive of the predecessor's RTS";
      EXPECT_EQ(r.err.err, FI_EIO) << fi_strerror(r.err.err);
      const char* text = fi_cq_strerror(b.cq, r.err.prov_errno, r.err.err_data, nullptr, 0);
      EXPECT_NE(std::string(text ? text : "").find("was closed before the message finished"), std::string::npos)
          << (text ? text : "");
      rts_failed = true;
    } else {
      EXPECT_EQ(r.e.op_context, &vctx) << "seq 4 completed the receive the predecessor's RTS matched";
      EXPECT_EQ(r.e.len, sizeof v4);
      EXPECT_EQ(got, v4);
      arrived = true;
    }
  }
  EXPECT_TRUE(rts_failed && arrived);
  EXPECT_EQ(a.counters().ops_failed, succ0.ops_failed);

  // and the lane keeps going, past a lane's 16 slots
  for (std::uint32_t i = 0; i < 40; ++i) {
    std::uint32_t g = 0;
    const std::uint32_t v = 0x55000000u + i;
    ASSERT_EQ(fi_trecv(b.ep, &g, sizeof g, nullptr, FI_ADDR_UNSPEC, kTag, 0, nullptr), 0);
    ASSERT_EQ(fi_tinject(a.ep, &v, sizeof v, a_to_b, kTag), 0);
    const Entry r = wait_entry(b, {&a});
    ASSERT_FALSE(r.error || r.timeout) << "message " << i;
    ASSERT_EQ(g, v) << "message " << i;
  }
  // b reaches the successor too: only the predecessor counts as closed
  for (std::uint32_t i = 0; i < 4; ++i) {
    std::uint32_t g = 0;
    const std::uint32_t v = 0x66000000u + i;
    ASSERT_EQ(fi_trecv(a.ep, &g, sizeof g, nullptr, FI_ADDR_UNSPEC, kTag, 0, nullptr), 0);
    ASSERT_EQ(fi_tinject(b.ep, &v, sizeof v, b_to_a, kTag), 0) << "b refused to send to the successor";
    const Entry r = wait_entry(a, {&b});
    ASSERT_FALSE(r.error || r.timeout) << "message " << i << " of b";
    ASSERT_EQ(g, v) << "message " << i << " of b";
  }
  b.close();
  a.close();
  EXPECT_EQ(emud.stop(), 0) << emud.output();
}

}  // namespace
