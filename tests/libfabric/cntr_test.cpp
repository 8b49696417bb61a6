// SPDX-License-Identifier: Apache-2.0
// Completion counters, FI_RMA_EVENT and FI_MULTI_RECV on the native FI_EP_RDM endpoint of the
// `npo` provider (issue 34; docs/libfabric.md "Counters", "Multi-receive buffers"), in-process
// on emu:mesh8 through the libfabric API only, as fabtests' rdm_cntr_pingpong, rdm_rma_event
// and multi_recv use them:
//  - one counter per event (FI_SEND ... FI_REMOTE_WRITE) counts exactly the operations of its
//    kind, also those without a CQ entry (selective completion, inject); a refused operation
//    moves the error count, not the value, and ends a waiter with -FI_EAVAIL;
//  - the target's FI_REMOTE_READ / FI_REMOTE_WRITE counters count RMA and atomics (eager and
//    rendezvous sizes) it is the target of;
//  - fi_cntr_add/set/adderr/seterr, wait timeouts, close while bound, DGRAM refusals;
//  - an FI_MULTI_RECV buffer takes messages one after the other (eager, rendezvous, already
//    unexpected ones), each completion names where its message lies, the last one carries
//    FI_MULTI_RECV once less than FI_OPT_MIN_MULTI_RECV is left; cancel releases it.
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_rma.h>

#include "fi_fixture.hpp"

namespace {

using namespace npo_fi_test;

enum { kSend, kRecv, kRead, kWrite, kRemoteRead, kRemoteWrite };
constexpr std::size_t kEager = 1024;
constexpr std::size_t kRndv = 256 * 1024;  // well above the provider's eager limit (~4 KiB)

fi_info* cntr_hints() {
  fi_info* h = fi_allocinfo();
  h->ep_attr->type = FI_EP_RDM;
  h->caps = FI_MSG | FI_TAGGED | FI_RMA | FI_ATOMIC | FI_RMA_EVENT;
  h->fabric_attr->prov_name = strdup("npo");
  return h;
}
void check_cntr_info(const fi_info* info, const std::string&) {
  ASSERT_STREQ(info->fabric_attr->prov_name, "npo");
  ASSERT_EQ(info->ep_attr->type, FI_EP_RDM);
  ASSERT_NE(info->caps & FI_RMA_EVENT, 0u);
  ASSERT_GE(info->domain_attr->cntr_cnt, 6u);
}
// Only the counters report completions: no CQ entry for an operation without FI_COMPLETION.
const SideOptions kCntrSide{.hints = cntr_hints,
                            .check_info = check_cntr_info,
                            .cq_bind_flags = FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION,
                            .counters = true};

class Cntr : public SidePair<> {
 protected:
  Cntr() : SidePair(kCntrSide) {}
  // Retries `f` while it answers -FI_EAGAIN, progressing b.
  template <typename F>
  void issue(F f) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    ssize_t r;
    while ((r = f()) == -FI_EAGAIN && std::chrono::steady_clock::now() < end) progress(b_);
    ASSERT_EQ(r, 0);
  }
  // Progresses both sides until counter `k` of `s` reaches `n` (20 s at most); its value.
  std::uint64_t wait_count(Side& s, int k, std::uint64_t n) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    std::uint64_t v = 0;
    while ((v = fi_cntr_read(s.cntr[k])) < n && std::chrono::steady_clock::now() < end) {
      progress(a_);
      progress(b_);
    }
    return v;
  }
  // A few more rounds of progress, so that an extra count would show.
  void settle() {
    for (int i = 0; i < 200; ++i) {
      progress(a_);
      progress(b_);
    }
  }
};

TEST_F(Cntr, SendsAndReceivesCountWithoutCqEntriesInjectsToo) {
  std::vector<std::vector<std::uint8_t>> rx(6, std::vector<std::uint8_t>(kRndv));
  std::array<fi_context, 6> rctx{}, sctx{};
  for (std::size_t i = 0; i < rx.size(); ++i)
    issue([&] { return fi_recv(b_.ep, rx[i].data(), rx[i].size(), nullptr, FI_ADDR_UNSPEC, &rctx[i]); });
  const auto small = pattern(kEager, 1);
  const auto big = pattern(kRndv, 2);
  issue([&] { return fi_send(a_.ep, small.data(), small.size(), nullptr, a_to_b_, &sctx[0]); });
  issue([&] { return fi_inject(a_.ep, small.data(), small.size(), a_to_b_); });
  issue([&] { return fi_send(a_.ep, big.data(), big.size(), nullptr, a_to_b_, &sctx[1]); });
  issue([&] { return fi_senddata(a_.ep, small.data(), small.size(), nullptr, 7, a_to_b_, &sctx[2]); });
  issue([&] { return fi_tsend(a_.ep, small.data(), small.size(), nullptr, a_to_b_, 0, &sctx[3]); });
  std::vector<std::uint8_t> trx(kEager);
  fi_context tctx{};
  issue([&] { return fi_trecv(b_.ep, trx.data(), trx.size(), nullptr, FI_ADDR_UNSPEC, 0, 0, &tctx); });
  EXPECT_EQ(wait_count(a_, kSend, 5), 5u);
  EXPECT_EQ(wait_count(b_, kRecv, 5), 5u);
  settle();
  EXPECT_EQ(fi_cntr_read(a_.cntr[kSend]), 5u);
  EXPECT_EQ(fi_cntr_read(b_.cntr[kRecv]), 5u);
  for (int k : {kRecv, kRead, kWrite, kRemoteRead, kRemoteWrite}) {
    EXPECT_EQ(fi_cntr_read(a_.cntr[k]), 0u) << "a's counter " << k;
  }
  for (int k : {kSend, kRead, kWrite, kRemoteRead, kRemoteWrite}) {
    EXPECT_EQ(fi_cntr_read(b_.cntr[k]), 0u) << "b's counter " << k;
  }
  EXPECT_EQ(fi_cntr_readerr(a_.cntr[kSend]), 0u);
  // the data arrived, in order: small, small, big, small (the tagged one went to trx)
  EXPECT_EQ(std::memcmp(rx[0].data(), small.data(), kEager), 0);
  EXPECT_EQ(std::memcmp(rx[1].data(), small.data(), kEager), 0);
  EXPECT_EQ(std::memcmp(rx[2].data(), big.data(), kRndv), 0);
  EXPECT_EQ(std::memcmp(rx[3].data(), small.data(), kEager), 0);
  EXPECT_EQ(std::memcmp(trx.data(), small.data(), kEager), 0);
  // selective completion without FI_COMPLETION: no CQ entry on either side
  fi_cq_tagged_entry e{};
  EXPECT_EQ(fi_cq_read(a_.cq, &e, 1), -FI_EAGAIN);
  EXPECT_EQ(fi_cq_read(b_.cq, &e, 1), -FI_EAGAIN);
  // fi_cntr_wait returns once the count is reached
  issue([&] { return fi_send(a_.ep, small.data(), small.size(), nullptr, a_to_b_, &sctx[4]); });
  EXPECT_EQ(fi_cntr_wait(a_.cntr[kSend], 6, 20000), 0);
  EXPECT_EQ(wait_count(b_, kRecv, 6), 6u);
}

TEST_F(Cntr, RmaAndAtomicsCountAtTheInitiatorAndWithRmaEventAtTheTarget) {
  constexpr std::uint64_t kKey = 0xc0de;
  std::vector<std::uint8_t> mem(2 * kRndv);
  fid_mr* mr = nullptr;
  ASSERT_EQ(fi_mr_reg(b_.domain, mem.data(), mem.size(), FI_REMOTE_READ | FI_REMOTE_WRITE, 0, kKey, 0, &mr, nullptr),
            0);
  const auto small = pattern(kEager, 3);
  const auto big = pattern(kRndv, 4);
  std::vector<std::uint8_t> back(kRndv);
  std::array<fi_context, 8> ctx{};
  // 2 writes (eager, rendezvous), 2 reads (eager, rendezvous), 1 plain and 1 fetching atomic
  issue([&] { return fi_write(a_.ep, small.data(), small.size(), nullptr, a_to_b_, 0, kKey, &ctx[0]); });
  issue([&] { return fi_write(a_.ep, big.data(), big.size(), nullptr, a_to_b_, kRndv, kKey, &ctx[1]); });
  EXPECT_EQ(wait_count(a_, kWrite, 2), 2u);
  issue([&] { return fi_read(a_.ep, back.data(), kEager, nullptr, a_to_b_, 0, kKey, &ctx[2]); });
  EXPECT_EQ(wait_count(a_, kRead, 1), 1u);
  EXPECT_EQ(std::memcmp(back.data(), small.data(), kEager), 0);
  issue([&] { return fi_read(a_.ep, back.data(), kRndv, nullptr, a_to_b_, kRndv, kKey, &ctx[3]); });
  EXPECT_EQ(wait_count(a_, kRead, 2), 2u);
  EXPECT_EQ(std::memcmp(back.data(), big.data(), kRndv), 0);
  std::uint64_t one = 1, old = 0;
  std::uint64_t before = 0;
  std::memcpy(&before, mem.data() + 64, 8);
  issue([&] { return fi_atomic(a_.ep, &one, 1, nullptr, a_to_b_, 64, kKey, FI_UINT64, FI_SUM, &ctx[4]); });
  EXPECT_EQ(wait_count(a_, kWrite, 3), 3u);
  issue([&] {
    return fi_fetch_atomic(a_.ep, &one, 1, nullptr, &old, nullptr, a_to_b_, 64, kKey, FI_UINT64, FI_SUM, &ctx[5]);
  });
  EXPECT_EQ(wait_count(a_, kRead, 3), 3u);
  EXPECT_EQ(old, before + 1) << "the fetching atomic saw the plain one's sum";
  settle();
  EXPECT_EQ(fi_cntr_read(a_.cntr[kWrite]), 3u) << "2 writes + 1 plain atomic";
  EXPECT_EQ(fi_cntr_read(a_.cntr[kRead]), 3u) << "2 reads + 1 fetching atomic";
  EXPECT_EQ(fi_cntr_read(a_.cntr[kSend]), 0u);
  EXPECT_EQ(fi_cntr_read(b_.cntr[kRemoteWrite]), 3u) << "the target saw 2 writes + 1 plain atomic";
  EXPECT_EQ(fi_cntr_read(b_.cntr[kRemoteRead]), 3u) << "the target saw 2 reads + 1 fetching atomic";
  EXPECT_EQ(fi_cntr_read(b_.cntr[kRecv]), 0u) << "RMA is no receive";
  EXPECT_EQ(fi_cntr_read(a_.cntr[kRemoteWrite]), 0u);
  // a refused write (no such key): the error count moves, the value does not, a waiter ends
  const auto mem_before = mem;
  issue([&] { return fi_write(a_.ep, small.data(), small.size(), nullptr, a_to_b_, 0, kKey + 1, &ctx[6]); });
  {
    // the target answers while this thread waits (progress is manual: a thread of b's)
    std::atomic<bool> stop{false};
    std::thread target([&] {
      while (!stop.load()) progress(b_);
    });
    EXPECT_EQ(fi_cntr_wait(a_.cntr[kWrite], 4, 20000), -FI_EAVAIL);
    stop = true;
    target.join();
  }
  EXPECT_EQ(fi_cntr_readerr(a_.cntr[kWrite]), 1u);
  EXPECT_EQ(fi_cntr_read(a_.cntr[kWrite]), 3u);
  EXPECT_EQ(fi_cntr_read(b_.cntr[kRemoteWrite]), 3u) << "a refused write is no remote write";
  EXPECT_EQ(mem, mem_before);
  fi_cq_err_entry err{};
  ASSERT_EQ(fi_cq_readerr(a_.cq, &err, 0), 1) << "errors are reported on the CQ also without FI_COMPLETION";
  EXPECT_EQ(err.err, FI_EKEYREJECTED);
  EXPECT_EQ(fi_close(&mr->fid), 0);
}

TEST_F(Cntr, AddSetWaitTimeoutAndCloseWhileBound) {
  fid_cntr* c = a_.cntr[kSend];
  EXPECT_EQ(fi_cntr_add(c, 5), 0);
  EXPECT_EQ(fi_cntr_read(c), 5u);
  EXPECT_EQ(fi_cntr_set(c, 2), 0);
  EXPECT_EQ(fi_cntr_read(c), 2u);
  EXPECT_EQ(fi_cntr_adderr(c, 3), 0);
  EXPECT_EQ(fi_cntr_readerr(c), 3u);
  EXPECT_EQ(fi_cntr_seterr(c, 0), 0);
  EXPECT_EQ(fi_cntr_readerr(c), 0u);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(fi_cntr_wait(c, 3, 50), -FI_ETIMEDOUT);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(50));
  EXPECT_EQ(fi_cntr_wait(c, 2, 50), 0) << "a reached threshold returns at once";
  EXPECT_EQ(fi_close(&c->fid), -FI_EBUSY) << "bound to an open endpoint";
  // a second counter for an event that has one already
  fi_cntr_attr ca{};
  fid_cntr* other = nullptr;
  ASSERT_EQ(fi_cntr_open(a_.domain, &ca, &other, nullptr), 0);
  EXPECT_EQ(fi_ep_bind(a_.ep, &other->fid, FI_SEND), -FI_EINVAL);
  EXPECT_EQ(fi_ep_bind(a_.ep, &other->fid, FI_TAGGED), -FI_EBADFLAGS) << "no event named";
  EXPECT_EQ(fi_close(&other->fid), 0);
  // wait objects the provider cannot give
  ca.wait_obj = FI_WAIT_FD;
  EXPECT_EQ(fi_cntr_open(a_.domain, &ca, &other, nullptr), -FI_ENOSYS);
}

TEST(CntrInfo, TheDgramCoreHasNoCountersNorMultiRecv) {
  use_provider();
  fi_info* h = dgram_hints();
  h->caps |= FI_MULTI_RECV;
  fi_info* info = nullptr;
  EXPECT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, h, &info), -FI_ENODATA);
  fi_freeinfo(h);
  h = dgram_hints();
  h->domain_attr->name = strdup("npo2");
  ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, h, &info), 0);
  fi_freeinfo(h);
  EXPECT_EQ(info->domain_attr->cntr_cnt, 0u);
  fid_fabric* fab = nullptr;
  fid_domain* dom = nullptr;
  fid_ep* ep = nullptr;
  fid_cntr* c = nullptr;
  ASSERT_EQ(fi_fabric(info->fabric_attr, &fab, nullptr), 0);
  ASSERT_EQ(fi_domain(fab, info, &dom, nullptr), 0);
  ASSERT_EQ(fi_endpoint(dom, info, &ep, nullptr), 0);
  fi_cntr_attr ca{};
  ASSERT_EQ(fi_cntr_open(dom, &ca, &c, nullptr), 0);
  EXPECT_EQ(fi_ep_bind(ep, &c->fid, FI_SEND), -FI_ENOSYS);
  EXPECT_EQ(fi_close(&ep->fid), 0);
  EXPECT_EQ(fi_close(&c->fid), 0);
  EXPECT_EQ(fi_close(&dom->fid), 0);
  EXPECT_EQ(fi_close(&fab->fid), 0);
  fi_freeinfo(info);
}

// ---- FI_MULTI_RECV ------------------------------------------------------------------------
fi_info* multi_hints() {
  fi_info* h = fi_allocinfo();
  h->ep_attr->type = FI_EP_RDM;
  h->caps = FI_MSG | FI_MULTI_RECV;
  h->fabric_attr->prov_name = strdup("npo");
  return h;
}
void check_multi_info(const fi_info* info, const std::string&) {
  ASSERT_STREQ(info->fabric_attr->prov_name, "npo");
  ASSERT_EQ(info->ep_attr->type, FI_EP_RDM);
  ASSERT_NE(info->caps & FI_MULTI_RECV, 0u);
  ASSERT_NE(info->rx_attr->caps & FI_MULTI_RECV, 0u);
}
const SideOptions kMultiSide{.hints = multi_hints, .check_info = check_multi_info};

class MultiRecv : public SidePair<> {
 protected:
  MultiRecv() : SidePair(kMultiSide) {}
  void send(const std::vector<std::uint8_t>& m, fi_context* ctx) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    ssize_t r;
    while ((r = fi_send(a_.ep, m.data(), m.size(), nullptr, a_to_b_, ctx)) == -FI_EAGAIN &&
           std::chrono::steady_clock::now() < end)
      progress(b_);
    ASSERT_EQ(r, 0);
  }
  void post_multi(std::vector<std::uint8_t>& buf, fi_context* ctx) {
    iovec iov{buf.data(), buf.size()};
    fi_msg msg{};
    msg.msg_iov = &iov;
    msg.iov_count = 1;
    msg.addr = FI_ADDR_UNSPEC;
    msg.context = ctx;
    ASSERT_EQ(fi_recvmsg(b_.ep, &msg, FI_MULTI_RECV), 0);
  }
  void set_min(std::size_t n) {
    ASSERT_EQ(fi_setopt(&b_.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &n, sizeof n), 0);
  }
  // The next receive completion of b (a is progressed meanwhile).
  Entry next_recv() {
    for (;;) {
      Entry e = wait_entry(b_, a_);
      if (e.timeout || e.error || (e.e.flags & FI_RECV)) return e;
    }
  }
  // Waits for a's send completions of `ctxs` (a send buffer is the provider's until then: the
  // card reads a rendezvous message's bytes from it in place).
  void wait_sends(std::initializer_list<fi_context*> ctxs) {
    std::vector<void*> want(ctxs.begin(), ctxs.end());
    while (!want.empty()) {
      const Entry e = wait_entry(a_, b_);
      ASSERT_FALSE(e.timeout || e.error);
      std::erase(want, e.e.op_context);
    }
  }
};

TEST_F(MultiRecv, MessagesFillOneBufferInOrderAndTheLastCarriesTheFlag) {
  std::size_t min = 0, len = sizeof min;
  ASSERT_EQ(fi_getopt(&b_.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min, &len), 0);
  EXPECT_GT(min, 0u) << "a default minimum";
  set_min(4096);
  ASSERT_EQ(fi_getopt(&b_.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min, &len), 0);
  EXPECT_EQ(min, 4096u);
  std::vector<std::uint8_t> buf(16384);
  fi_context mctx{};
  post_multi(buf, &mctx);
  // 4000 + 4000 + 4000 leave 4384 >= 4096 bytes; the fourth (3000) leaves 1384: released
  const std::size_t sizes[] = {4000, 4000, 4000, 3000};
  std::vector<std::vector<std::uint8_t>> msgs;
  std::array<fi_context, 4> sctx{};
  for (std::size_t i = 0; i < 4; ++i) {
    msgs.push_back(pattern(sizes[i], 10 + static_cast<unsigned>(i)));
    send(msgs.back(), &sctx[i]);
  }
  std::size_t off = 0;
  for (std::size_t i = 0; i < 4; ++i) {
    const Entry e = next_recv();
    ASSERT_FALSE(e.error || e.timeout) << "message " << i;
    EXPECT_EQ(e.e.op_context, &mctx);
    EXPECT_EQ(e.e.len, sizes[i]);
    EXPECT_EQ(e.e.buf, buf.data() + off) << "message " << i << " lies right after the one before";
    EXPECT_EQ(std::memcmp(buf.data() + off, msgs[i].data(), sizes[i]), 0) << "message " << i;
    EXPECT_EQ((e.e.flags & FI_MULTI_RECV) != 0, i == 3) << "only the last one releases the buffer";
    off += sizes[i];
  }
  // released: the next message waits as unexpected for a new buffer; a rendezvous one and an
  // eager one go into the next buffer once it is posted
  const auto big = pattern(kRndv, 20);
  const auto tail = pattern(100, 21);
  fi_context s5{}, s6{};
  send(big, &s5);
  send(tail, &s6);
  for (int i = 0; i < 200; ++i) progress(b_);
  fi_cq_tagged_entry none{};
  EXPECT_EQ(fi_cq_read(b_.cq, &none, 1), -FI_EAGAIN) << "no buffer is posted";
  std::vector<std::uint8_t> buf2(kRndv + 8192);
  fi_context mctx2{};
  post_multi(buf2, &mctx2);
  // both were placed in arrival order; the eager one completes at once, the rendezvous one
  // when its data has moved
  bool got_big = false, got_tail = false;
  for (int i = 0; i < 2; ++i) {
    const Entry e = next_recv();
    ASSERT_FALSE(e.error || e.timeout);
    EXPECT_EQ(e.e.flags & FI_MULTI_RECV, 0u);
    if (e.e.len == kRndv) {
      got_big = true;
      EXPECT_EQ(e.e.buf, buf2.data());
    } else {
      got_tail = true;
      EXPECT_EQ(e.e.len, tail.size());
      EXPECT_EQ(e.e.buf, buf2.data() + kRndv);
    }
  }
  EXPECT_TRUE(got_big && got_tail);
  wait_sends({&sctx[0], &sctx[1], &sctx[2], &sctx[3], &s5, &s6});
  EXPECT_EQ(std::memcmp(buf2.data(), big.data(), kRndv), 0);
  EXPECT_EQ(std::memcmp(buf2.data() + kRndv, tail.data(), tail.size()), 0);
  // 8092 bytes are left (>= 4096): still posted, until canceled -- the cancel releases it
  ASSERT_EQ(fi_cancel(&b_.ep->fid, &mctx2), 0);
  const Entry e = next_recv();
  ASSERT_TRUE(e.error);
  EXPECT_EQ(e.err.err, FI_ECANCELED);
  EXPECT_NE(e.err.flags & FI_MULTI_RECV, 0u);
}

TEST_F(MultiRecv, TaggedMultiRecvIsRefused) {
  std::vector<std::uint8_t> buf(8192);
  iovec iov{buf.data(), buf.size()};
  fi_msg_tagged msg{};
  msg.msg_iov = &iov;
  msg.iov_count = 1;
  msg.addr = FI_ADDR_UNSPEC;
  EXPECT_EQ(fi_trecvmsg(b_.ep, &msg, FI_MULTI_RECV), -FI_EINVAL);
}

}  // namespace
