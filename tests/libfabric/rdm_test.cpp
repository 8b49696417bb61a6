// SPDX-License-Identifier: Apache-2.0
// The native FI_EP_RDM endpoint of the `npo` provider, in-process on emu:mesh8 through the
// libfabric API only, as Open MPI's mtl ofi drives it: the getinfo entry it selects, tagged
// messages of every size class (eager, rendezvous, several chunks) with data checked and NULL
// descriptors, unexpected messages and their order, tag masks, directed receives, remote CQ
// data, FI_PEEK / FI_CLAIM / FI_DISCARD, fi_cancel and truncation.
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include "fi_fixture.hpp"

namespace {

using namespace npo_fi_test;

constexpr std::size_t kEager = 4096;  // the provider's inject_size / eager limit

const SideOptions kSide{.hints = mtl_ofi_hints, .check_info = check_native};

class Rdm : public SidePair<> {
 protected:
  Rdm() : SidePair(kSide) {}
  // Sends `tx` tagged from a to b while b receives into `rx`; returns b's receive entry.
  Entry transfer(const std::vector<std::uint8_t>& tx, std::vector<std::uint8_t>& rx, std::uint64_t tag) {
    int sctx = 0, rctx = 0;
    EXPECT_EQ(fi_trecv(b_.ep, rx.data(), rx.size(), nullptr, FI_ADDR_UNSPEC, tag, 0, &rctx), 0);
    EXPECT_EQ(fi_tsend(a_.ep, tx.data(), tx.size(), nullptr, a_to_b_, tag, &sctx), 0);
    Entry r = wait_entry(b_, {&a_});
    Entry s = wait_entry(a_, {&b_});
    EXPECT_FALSE(s.error);
    EXPECT_EQ(s.e.op_context, &sctx);
    EXPECT_EQ(s.e.flags, FI_SEND | FI_TAGGED);
    EXPECT_EQ(r.error ? r.err.op_context : r.e.op_context, &rctx);
    return r;
  }
};

TEST(RdmInfo, OpenMpiHintsSelectTheNativeEndpointFirst) {
  use_provider();
  fi_info* hints = mtl_ofi_hints();
  free(hints->fabric_attr->prov_name);
  hints->fabric_attr->prov_name = nullptr;  // every provider, as mpirun without an include list
  fi_info* info = nullptr;
  ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info), 0);
  fi_freeinfo(hints);
  // Open MPI's include list matches by prefix ("npo" takes "npo;ofi_rxd" too) and takes the
  // first entry: the first npo-named entry must be the native one.
  const fi_info* native = nullptr;
  for (const fi_info* i = info; i && !native; i = i->next)
    if (std::string(i->fabric_attr->prov_name).starts_with("npo")) native = i;
  ASSERT_NE(native, nullptr) << "no npo RDM entry";
  ASSERT_STREQ(native->fabric_attr->prov_name, "npo") << "ofi_rxd layered over npo comes first";
  EXPECT_EQ(native->ep_attr->type, FI_EP_RDM);
  EXPECT_EQ(native->caps & (FI_TAGGED | FI_DIRECTED_RECV), FI_TAGGED | FI_DIRECTED_RECV);
  EXPECT_GE(native->domain_attr->cq_data_size, 4u);
  EXPECT_GE(native->ep_attr->max_msg_size, std::size_t{1} << 32);
  EXPECT_EQ(native->tx_attr->msg_order & FI_ORDER_SAS, FI_ORDER_SAS);
  EXPECT_EQ(native->rx_attr->msg_order & FI_ORDER_SAS, FI_ORDER_SAS);
  EXPECT_EQ(native->domain_attr->mr_mode & FI_MR_LOCAL, 0) << "NULL descriptors (any buffer) must be accepted";
  EXPECT_EQ(native->tx_attr->inject_size, kEager);
  EXPECT_NE(native->ep_attr->mem_tag_format >> 63, 0u) << "mtl ofi counts tag bits from the top";
  fi_freeinfo(info);
}

TEST_F(Rdm, TaggedEverySizeClassArrivesIntactWithNullDescriptors) {
  // 0, eager, eager limit, first rendezvous size, one chunk, chunk+1, several chunks, more
  // chunks than the landing zone holds at once (16 x 256 KiB).
  for (std::size_t n :
       {std::size_t{0}, std::size_t{1}, kEager - 1, kEager, kEager + 1, std::size_t{65536}, std::size_t{256 * 1024},
        std::size_t{256 * 1024 + 1}, std::size_t{(1 << 20) + 13}, std::size_t{9 << 20}}) {
    SCOPED_TRACE("size " + std::to_string(n));
    const auto tx = pattern(n, static_cast<unsigned>(n));
    std::vector<std::uint8_t> rx(n + 64, 0xee);
    const Entry r = transfer(tx, rx, 0x1234000000000000ull + n);
    ASSERT_FALSE(r.error) << r.err.err;
    EXPECT_EQ(r.e.len, n);
    EXPECT_EQ(r.e.tag, 0x1234000000000000ull + n);
    EXPECT_EQ(r.e.flags & (FI_RECV | FI_TAGGED), FI_RECV | FI_TAGGED);
    EXPECT_EQ(r.src, b_to_a_) << "fi_cq_readfrom names the sender";
    EXPECT_TRUE(std::equal(tx.begin(), tx.end(), rx.begin())) << "payload differs";
    EXPECT_EQ(rx[n], 0xee) << "wrote past the message";
  }
}

TEST_F(Rdm, UnexpectedMessagesKeepTheirOrderAcrossEagerAndRendezvous) {
  const auto m1 = pattern(100, 1), m2 = pattern(600 * 1024, 2), m3 = pattern(3000, 3);
  int s1 = 0, s2 = 0, s3 = 0;
  ASSERT_EQ(fi_tsend(a_.ep, m1.data(), m1.size(), nullptr, a_to_b_, 77, &s1), 0);
  ASSERT_EQ(fi_tsend(a_.ep, m2.data(), m2.size(), nullptr, a_to_b_, 77, &s2), 0);
  ASSERT_EQ(fi_tsend(a_.ep, m3.data(), m3.size(), nullptr, a_to_b_, 77, &s3), 0);
  // let them arrive before any receive is posted (b buffers them as unexpected)
  for (int i = 0; i < 200; ++i) {
    fi_cq_tagged_entry none{};
    (void)fi_cq_read(b_.cq, &none, 0);
    (void)fi_cq_read(a_.cq, &none, 0);
  }
  std::vector<std::uint8_t> r1(700 * 1024), r2(700 * 1024), r3(700 * 1024);
  int c1 = 0, c2 = 0, c3 = 0;
  ASSERT_EQ(fi_trecv(b_.ep, r1.data(), r1.size(), nullptr, FI_ADDR_UNSPEC, 77, 0, &c1), 0);
  ASSERT_EQ(fi_trecv(b_.ep, r2.data(), r2.size(), nullptr, FI_ADDR_UNSPEC, 77, 0, &c2), 0);
  ASSERT_EQ(fi_trecv(b_.ep, r3.data(), r3.size(), nullptr, FI_ADDR_UNSPEC, 77, 0, &c3), 0);
  std::vector<Entry> got;
  while (got.size() < 3) {
    got.push_back(wait_entry(b_, {&a_}));
    ASSERT_FALSE(got.back().error);
  }
  // all three receives complete; the first posted got the first sent, and so on
  auto find = [&](void* ctx) {
    return *std::find_if(got.begin(), got.end(), [&](const Entry& e) { return e.e.op_context == ctx; });
  };
  EXPECT_EQ(find(&c1).e.len, m1.size());
  EXPECT_EQ(find(&c2).e.len, m2.size());
  EXPECT_EQ(find(&c3).e.len, m3.size());
  EXPECT_TRUE(std::equal(m1.begin(), m1.end(), r1.begin()));
  EXPECT_TRUE(std::equal(m2.begin(), m2.end(), r2.begin()));
  EXPECT_TRUE(std::equal(m3.begin(), m3.end(), r3.begin()));
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(wait_entry(a_, {&b_}).error);
}

TEST_F(Rdm, TagMaskDirectedReceiveAndRemoteCqData) {
  Side c;
  c.open(2, kSide);
  const fi_addr_t c_to_b = c.insert(b_);
  const fi_addr_t b_to_c = b_.insert(c);
  std::uint32_t from_a = 0xaaaa, from_c = 0xcccc, rx_c = 0, rx_any = 0;
  int ctx_c = 0, ctx_any = 0;
  // b wants c's message first (directed), with a tag mask ignoring the low byte
  ASSERT_EQ(fi_trecv(b_.ep, &rx_c, sizeof rx_c, nullptr, b_to_c, 0x500, 0xff, &ctx_c), 0);
  ASSERT_EQ(fi_tsenddata(a_.ep, &from_a, sizeof from_a, nullptr, 0xfeed, a_to_b_, 0x5a1, nullptr), 0);
  ASSERT_EQ(fi_tsenddata(c.ep, &from_c, sizeof from_c, nullptr, 0xbeef, c_to_b, 0x5c2, nullptr), 0);
  Entry r = wait_entry(b_, {&a_, &c});
  ASSERT_FALSE(r.error);
  EXPECT_EQ(r.e.op_context, &ctx_c);
  EXPECT_EQ(rx_c, 0xccccu) << "the directed receive took a message of another sender";
  EXPECT_EQ(r.e.tag, 0x5c2u);
  EXPECT_EQ(r.e.data, 0xbeefu);
  EXPECT_EQ(r.e.flags & FI_REMOTE_CQ_DATA, FI_REMOTE_CQ_DATA);
  EXPECT_EQ(r.src, b_to_c);
  // a's message waited as unexpected; any source, tag masked
  ASSERT_EQ(fi_trecv(b_.ep, &rx_any, sizeof rx_any, nullptr, FI_ADDR_UNSPEC, 0x500, 0xff, &ctx_any), 0);
  r = wait_entry(b_, {&a_, &c});
  ASSERT_FALSE(r.error);
  EXPECT_EQ(rx_any, 0xaaaau);
  EXPECT_EQ(r.e.data, 0xfeedu);
  EXPECT_EQ(r.src, b_to_a_);
  // a tag that matches nothing stays posted: cancel it
  std::uint32_t never = 0;
  int ctx_never = 0;
  ASSERT_EQ(fi_trecv(b_.ep, &never, sizeof never, nullptr, FI_ADDR_UNSPEC, 0x999, 0, &ctx_never), 0);
  ASSERT_EQ(fi_cancel(&b_.ep->fid, &ctx_never), 0);
  r = wait_entry(b_, {&a_, &c});
  ASSERT_TRUE(r.error);
  EXPECT_EQ(r.err.err, FI_ECANCELED);
  EXPECT_EQ(r.err.op_context, &ctx_never);
  EXPECT_EQ(fi_cancel(&b_.ep->fid, &ctx_never), -FI_ENOENT) << "canceled twice";
  c.close();
}

// fi_sendmsg / fi_tsendmsg with FI_INJECT (fi_msg(3), fi_tagged(3)): the buffer is the
// caller's again when the call returns, and the send still reports its completion (only
// fi_inject / fi_tinject never do). The buffer is overwritten at once; the receiver gets the
// bytes of the call.
TEST_F(Rdm, SendmsgWithInjectReusesTheBufferAndStillCompletes) {
  std::array<std::uint8_t, 64> buf{};
  std::array<std::uint8_t, 64> rx_t{}, rx_m{};
  for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<std::uint8_t>(i + 1);
  const auto sent = buf;
  int ctx_t = 0, ctx_m = 0, rctx_t = 0, rctx_m = 0;
  iovec iov{buf.data(), buf.size()};
  fi_msg_tagged tm{};
  tm.msg_iov = &iov;
  tm.iov_count = 1;
  tm.addr = a_to_b_;
  tm.tag = 0x42;
  tm.context = &ctx_t;
  ASSERT_EQ(fi_tsendmsg(a_.ep, &tm, FI_INJECT | FI_COMPLETION), 0);
  buf.fill(0xdd);
  fi_msg m{};
  m.msg_iov = &iov;
  m.iov_count = 1;
  m.addr = a_to_b_;
  m.context = &ctx_m;
  ASSERT_EQ(fi_sendmsg(a_.ep, &m, FI_INJECT | FI_COMPLETION), 0);
  buf.fill(0x11);
  ASSERT_EQ(fi_trecv(b_.ep, rx_t.data(), rx_t.size(), nullptr, FI_ADDR_UNSPEC, 0x42, 0, &rctx_t), 0);
  ASSERT_EQ(fi_recv(b_.ep, rx_m.data(), rx_m.size(), nullptr, FI_ADDR_UNSPEC, &rctx_m), 0);
  std::vector<void*> tx_done;
  for (int i = 0; i < 2; ++i) {
    const Entry t = wait_entry(a_, {&b_});
    ASSERT_FALSE(t.error || t.timeout) << "FI_INJECT send " << i << " never completed";
    tx_done.push_back(t.e.op_context);
  }
  EXPECT_EQ(tx_done, (std::vector<void*>{&ctx_t, &ctx_m}));
  for (int i = 0; i < 2; ++i) EXPECT_FALSE(wait_entry(b_, {&a_}).error);
  EXPECT_EQ(rx_t, sent);
  std::array<std::uint8_t, 64> second{};
  second.fill(0xdd);
  EXPECT_EQ(rx_m, second);
}

TEST_F(Rdm, PeekClaimAndDiscard) {
  const auto small = pattern(64, 5), large = pattern(700 * 1024, 6);
  ASSERT_EQ(fi_tsend(a_.ep, small.data(), small.size(), nullptr, a_to_b_, 7, nullptr), 0);
  ASSERT_EQ(fi_tsend(a_.ep, large.data(), large.size(), nullptr, a_to_b_, 8, nullptr), 0);
  ASSERT_EQ(fi_tsend(a_.ep, small.data(), small.size(), nullptr, a_to_b_, 9, nullptr), 0);
  fi_context2 ctx{};
  auto peek = [&](std::uint64_t tag, std::uint64_t flags, void* buf = nullptr, std::size_t len = 0) {
    iovec iov{buf, len};
    fi_msg_tagged m{};
    m.msg_iov = &iov;
    m.iov_count = buf ? 1 : 0;
    m.addr = FI_ADDR_UNSPEC;
    m.tag = tag;
    m.context = &ctx;
    return fi_trecvmsg(b_.ep, &m, flags);
  };
  // the last one sent (tag 9) is seen by a peek once everything before it arrived
  Entry r;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < until) {  // until the three arrived (a peek progresses b)
    ASSERT_EQ(peek(9, FI_PEEK), 0);
    r = wait_entry(b_, {&a_});
    if (!r.error) break;
    (void)fi_cq_read(a_.cq, nullptr, 0);
  }
  ASSERT_FALSE(r.error) << "tag 9 never arrived";
  EXPECT_EQ(r.e.len, small.size());
  // nothing with tag 10: FI_ENOMSG
  ASSERT_EQ(peek(10, FI_PEEK), 0);
  r = wait_entry(b_, {&a_});
  ASSERT_TRUE(r.error);
  EXPECT_EQ(r.err.err, FI_ENOMSG);
  // peek + claim the rendezvous message, then receive the claimed one
  ASSERT_EQ(peek(8, FI_PEEK | FI_CLAIM), 0);
  r = wait_entry(b_, {&a_});
  ASSERT_FALSE(r.error);
  EXPECT_EQ(r.e.len, large.size());
  EXPECT_EQ(r.e.tag, 8u);
  ASSERT_EQ(peek(8, FI_PEEK), 0);  // claimed: a second peek does not see it
  r = wait_entry(b_, {&a_});
  ASSERT_TRUE(r.error);
  EXPECT_EQ(r.err.err, FI_ENOMSG);
  std::vector<std::uint8_t> rx(large.size());
  ASSERT_EQ(peek(8, FI_CLAIM, rx.data(), rx.size()), 0);
  r = wait_entry(b_, {&a_});
  ASSERT_FALSE(r.error);
  EXPECT_EQ(r.e.len, large.size());
  EXPECT_TRUE(std::equal(large.begin(), large.end(), rx.begin()));
  // peek + discard tag 7: reported, then gone
  ASSERT_EQ(peek(7, FI_PEEK | FI_DISCARD), 0);
  r = wait_entry(b_, {&a_});
  ASSERT_FALSE(r.error);
  EXPECT_EQ(r.e.tag, 7u);
  ASSERT_EQ(peek(7, FI_PEEK), 0);
  r = wait_entry(b_, {&a_});
  ASSERT_TRUE(r.error);
  EXPECT_EQ(r.err.err, FI_ENOMSG);
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(wait_entry(a_, {&b_}).error);
}

TEST_F(Rdm, RendezvousIntoAShortBufferIsTruncated) {
  const auto tx = pattern(1 << 20, 9);
  std::vector<std::uint8_t> rx(300 * 1024);
  const Entry r = transfer(tx, rx, 3);
  ASSERT_TRUE(r.error);
  EXPECT_EQ(r.err.err, FI_ETRUNC);
  EXPECT_EQ(r.err.len, rx.size());
  EXPECT_EQ(r.err.olen, tx.size() - rx.size());
  EXPECT_TRUE(std::equal(rx.begin(), rx.end(), tx.begin())) << "the part that fits is delivered";
}

// The domain's op counters (fi_npo_domain_ops::op_counters).
fi_npo_op_counters op_counters(fid_domain* d) {
  fi_npo_domain_ops* ops = nullptr;
  fi_npo_op_counters c{};
  EXPECT_EQ(fi_open_ops(&d->fid, FI_NPO_DOMAIN_OPS_NAME, 0, reinterpret_cast<void**>(&ops), nullptr), 0);
  if (ops) {
    EXPECT_EQ(ops->op_counters(d, &c), 0);
  }
  return c;
}
// Rendezvous payload bytes the card read from the sender's buffer in place / from staging.
std::pair<std::uint64_t, std::uint64_t> rndv_bytes(fid_domain* d) {
  const fi_npo_op_counters c = op_counters(d);
  return {c.rndv_zero_copy_bytes, c.rndv_staged_bytes};
}
std::uint64_t credit_reads(fid_domain* d) { return op_counters(d).credit_reads; }

TEST_F(Rdm, RendezvousReadsTheSendersBufferInPlace) {
  // One buffer: every chunk read where it is (process memory map), nothing staged.
  const std::size_t n = (3 << 20) + 13;
  const auto tx = pattern(n, 5);
  std::vector<std::uint8_t> rx(n);
  const Entry r = transfer(tx, rx, 11);
  ASSERT_FALSE(r.error) << r.err.err;
  EXPECT_TRUE(rx == tx);
  EXPECT_EQ(rndv_bytes(a_.domain), std::make_pair(std::uint64_t{n}, std::uint64_t{0}));

  // Two iov entries split at 100 KiB: the 256 KiB chunk that spans the split is staged, the
  // others are read in place; all bytes arrive.
  const std::size_t first = 100 * 1024;
  std::vector<std::uint8_t> rx2(n);
  iovec iov[2] = {{const_cast<std::uint8_t*>(tx.data()), first},
                  {const_cast<std::uint8_t*>(tx.data()) + first, n - first}};
  int sctx = 0, rctx = 0;
  ASSERT_EQ(fi_trecv(b_.ep, rx2.data(), rx2.size(), nullptr, FI_ADDR_UNSPEC, 12, 0, &rctx), 0);
  ASSERT_EQ(fi_tsendv(a_.ep, iov, nullptr, 2, a_to_b_, 12, &sctx), 0);
  EXPECT_FALSE(wait_entry(b_, {&a_}).error);
  EXPECT_FALSE(wait_entry(a_, {&b_}).error);
  EXPECT_TRUE(rx2 == tx);
  const auto [zc, staged] = rndv_bytes(a_.domain);
  EXPECT_EQ(staged, 256u * 1024) << "exactly the chunk across the split";
  EXPECT_EQ(zc, 2 * n - 256 * 1024);
}

TEST_F(Rdm, PingPongCarriesItsCreditsAndNeedsNoRemoteReads) {
  // A 300 KiB message takes 3 slots of the peer's lane (RTS and 2 FINs); a lane has 16, so
  // 30 messages one way would run out of credits every 5 messages. In a ping-pong each side's
  // messages bring the other its credits (slot header `ack`): no remote read of a consumer
  // counter at all. One way only, the sender must read them.
  const std::size_t n = 300 * 1024;
  for (unsigned i = 0; i < 30; ++i) {
    const auto tx = pattern(n, i);
    std::vector<std::uint8_t> rx(n);
    const Entry r = transfer(tx, rx, 100 + i);
    ASSERT_FALSE(r.error) << r.err.err;
    ASSERT_TRUE(rx == tx) << i;
    int sctx = 0, rctx = 0;  // and back, b -> a
    std::vector<std::uint8_t> back(n);
    ASSERT_EQ(fi_trecv(a_.ep, back.data(), back.size(), nullptr, FI_ADDR_UNSPEC, 200 + i, 0, &rctx), 0);
    ASSERT_EQ(fi_tsend(b_.ep, rx.data(), rx.size(), nullptr, b_to_a_, 200 + i, &sctx), 0);
    ASSERT_FALSE(wait_entry(a_, {&b_}).error);
    ASSERT_FALSE(wait_entry(b_, {&a_}).error);
    ASSERT_TRUE(back == tx) << i;
  }
  EXPECT_EQ(credit_reads(a_.domain), 0u);
  EXPECT_EQ(credit_reads(b_.domain), 0u);
  // Eager messages one way (a rendezvous is answered by CTS messages, which carry credits):
  // 40 of 1 KiB, one slot each, fill the lane twice.
  for (unsigned i = 0; i < 40; ++i) {
    const auto tx = pattern(1024, i + 7);
    std::vector<std::uint8_t> rx(1024);
    const Entry r = transfer(tx, rx, 300 + i);
    ASSERT_FALSE(r.error) << r.err.err;
    ASSERT_TRUE(rx == tx) << i;
  }
  EXPECT_GE(credit_reads(a_.domain), 2u) << "a one-way stream reads the peer's counter";
  EXPECT_EQ(credit_reads(b_.domain), 0u);
}

TEST_F(Rdm, ASendBufferTheCardCannotReadInPlaceIsStagedInstead) {
  // memfd_secret memory: the CPU reads it, process_vm_readv cannot (likewise device mappings).
  // The first chunk read in place faults (IOMMU_FAULT); it and the rest of the message go
  // through staging, and the message arrives intact.
  const int fd = static_cast<int>(::syscall(SYS_memfd_secret, 0));
  // Kernels built without CONFIG_SECRETMEM have no such memory (this VM's and CI's have it).
  if (fd < 0) GTEST_SKIP() << "memfd_secret is not available: " << std::strerror(errno);
  const std::size_t n = (1 << 20) + 13;
  ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(n)), 0);
  auto* p = static_cast<std::uint8_t*>(::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  ASSERT_NE(p, MAP_FAILED);
  const auto tx = pattern(n, 21);
  std::memcpy(p, tx.data(), n);
  std::vector<std::uint8_t> rx(n);
  int sctx = 0, rctx = 0;
  ASSERT_EQ(fi_trecv(b_.ep, rx.data(), rx.size(), nullptr, FI_ADDR_UNSPEC, 77, 0, &rctx), 0);
  ASSERT_EQ(fi_tsend(a_.ep, p, n, nullptr, a_to_b_, 77, &sctx), 0);
  const Entry r = wait_entry(b_, {&a_});
  const Entry s = wait_entry(a_, {&b_});
  EXPECT_FALSE(s.error) << s.err.err;
  ASSERT_FALSE(r.error) << r.err.err;
  std::size_t first_diff = n, diffs = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (rx[i] != tx[i]) {
      if (first_diff == n) first_diff = i;
      ++diffs;
    }
  EXPECT_EQ(diffs, 0u) << "first differing byte " << first_diff;
  EXPECT_EQ(rndv_bytes(a_.domain).second, n) << "every byte went through staging";
  ::munmap(p, n);
  ::close(fd);
}

// FI_NPO_ZERO_COPY=0 (read when the domain's first endpoint opens): every chunk is staged.
struct ZeroCopyOff {
  ZeroCopyOff() { ::setenv("FI_NPO_ZERO_COPY", "0", 1); }
  ~ZeroCopyOff() { ::unsetenv("FI_NPO_ZERO_COPY"); }
};
class RdmStaged : private ZeroCopyOff, public Rdm {};

TEST_F(RdmStaged, WithZeroCopyOffEveryChunkIsStagedAndArrivesIntact) {
  const std::size_t n = (1 << 20) + 13;
  const auto tx = pattern(n, 6);
  std::vector<std::uint8_t> rx(n);
  const Entry r = transfer(tx, rx, 13);
  ASSERT_FALSE(r.error) << r.err.err;
  EXPECT_TRUE(rx == tx);
  EXPECT_EQ(rndv_bytes(a_.domain), std::make_pair(std::uint64_t{0}, std::uint64_t{n}));
}

TEST_F(Rdm, ThousandsOfUnexpectedEagerMessagesAreBufferedNotDropped) {
  // 2000 sends before any receive: far more than the ring holds (16 slots per lane); the
  // receiver buffers them (unexpected) as it progresses, the sender never loses one.
  constexpr int kCount = 2000;
  int sent = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (sent < kCount && std::chrono::steady_clock::now() < end) {
    std::uint32_t v = 0x51000000u + static_cast<std::uint32_t>(sent);
    const ssize_t r = fi_tinject(a_.ep, &v, sizeof v, a_to_b_, 42);
    if (r == 0) {
      ++sent;
    } else {
      ASSERT_EQ(r, -FI_EAGAIN);
    }
    fi_cq_tagged_entry none{};
    (void)fi_cq_read(b_.cq, &none, 0);
  }
  ASSERT_EQ(sent, kCount);
  for (int i = 0; i < kCount; ++i) {
    std::uint32_t v = 0;
    ASSERT_EQ(fi_trecv(b_.ep, &v, sizeof v, nullptr, FI_ADDR_UNSPEC, 42, 0, nullptr), 0);
    const Entry r = wait_entry(b_, {&a_});
    ASSERT_FALSE(r.error);
    ASSERT_EQ(v, 0x51000000u + static_cast<std::uint32_t>(i)) << "message " << i << " out of order or lost";
  }
}

TEST_F(Rdm, AnEndpointReopenedOnTheSameCardReachesAPeerThatOutlivedItsPredecessor) {
  // A sender's lane in a peer's ring is its card's fabric ID x 4 + its endpoint number, so an
  // endpoint closed and opened again on the same card writes the same lane of a peer that
  // stayed up. The peer has consumed the predecessor's messages there: the successor's
  // sequence must continue after them, or the peer never sees its messages.
  auto send_one = [&](std::uint32_t v, fi_addr_t to) {
    std::uint32_t got = 0;
    ASSERT_EQ(fi_trecv(b_.ep, &got, sizeof got, nullptr, FI_ADDR_UNSPEC, 9, 0, nullptr), 0);
    ASSERT_EQ(fi_tinject(a_.ep, &v, sizeof v, to, 9), 0);
    const Entry r = wait_entry(b_, {&a_});
    ASSERT_FALSE(r.error || r.timeout);
    ASSERT_EQ(got, v);
  };
  for (std::uint32_t i = 0; i < 21; ++i) ASSERT_NO_FATAL_FAILURE(send_one(0xa0000000u + i, a_to_b_));
  fi_addr_t to_b = a_to_b_;
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE("reopened " + std::to_string(round + 1) + " time(s)");
    // Round 2: the predecessor leaves 3 messages in b's ring that b has not read yet (b does
    // not progress until after the successor sent): they must survive, first in order.
    const std::uint32_t left = round == 1 ? 3 : 0;
    for (std::uint32_t i = 0; i < left; ++i) {
      const std::uint32_t v = 0xc0000000u + i;
      ASSERT_EQ(fi_tinject(a_.ep, &v, sizeof v, to_b, 9), 0);
    }
    a_.close();
    a_.open(0, options_);
    ASSERT_NE(a_.ep, nullptr);
    to_b = a_.insert(b_);
    (void)b_.insert(a_);
    if (left) {
      const std::uint32_t v = 0xd0000000u;
      ASSERT_EQ(fi_tinject(a_.ep, &v, sizeof v, to_b, 9), 0);
      for (std::uint32_t i = 0; i <= left; ++i) {
        std::uint32_t got = 0;
        ASSERT_EQ(fi_trecv(b_.ep, &got, sizeof got, nullptr, FI_ADDR_UNSPEC, 9, 0, nullptr), 0);
        const Entry r = wait_entry(b_, {&a_});
        ASSERT_FALSE(r.error || r.timeout);
        EXPECT_EQ(got, i < left ? 0xc0000000u + i : 0xd0000000u) << "message " << i;
      }
    }
    // more than a lane's 16 slots, so the successor also runs on its credits
    for (std::uint32_t i = 0; i < 40; ++i) ASSERT_NO_FATAL_FAILURE(send_one(0xb0000000u + i, to_b));
  }
  // and the rendezvous path, both ways of its control messages
  const auto tx = pattern(3 << 20, 77);
  std::vector<std::uint8_t> rx(tx.size());
  int rctx = 0, sctx = 0;
  ASSERT_EQ(fi_trecv(b_.ep, rx.data(), rx.size(), nullptr, FI_ADDR_UNSPEC, 5, 0, &rctx), 0);
  ASSERT_EQ(fi_tsend(a_.ep, tx.data(), tx.size(), nullptr, to_b, 5, &sctx), 0);
  const Entry r = wait_entry(b_, {&a_});
  ASSERT_FALSE(r.error || r.timeout);
  EXPECT_EQ(wait_entry(a_, {&b_}).e.op_context, &sctx);
  EXPECT_TRUE(rx == tx);
}

TEST_F(Rdm, APeerAnswersTheSuccessorOfAnEndpointItTalkedTo) {
  // The other direction: b sent to a's predecessor (eager and rendezvous) and keeps state for
  // it -- its sequence in the predecessor's ring, its address for rendezvous answers. The
  // successor's ring is new (a new window generation): b must reach it, not the revoked one.
  auto round = [&](fi_addr_t to_b, fi_addr_t to_a, std::uint32_t base) {
    for (std::uint32_t i = 0; i < 20; ++i) {  // b -> a eager, more than a lane's 16 slots
      std::uint32_t got = 0, v = base + i;
      ASSERT_EQ(fi_trecv(a_.ep, &got, sizeof got, nullptr, FI_ADDR_UNSPEC, 4, 0, nullptr), 0);
      ASSERT_EQ(fi_tinject(b_.ep, &v, sizeof v, to_a, 4), 0);
      const Entry r = wait_entry(a_, {&b_});
      ASSERT_FALSE(r.error || r.timeout) << "message " << i;
      ASSERT_EQ(got, v);
    }
    for (const bool a_sends : {true, false}) {  // rendezvous both ways: RTS, CTS, FIN each way
      Side& from = a_sends ? a_ : b_;
      Side& to = a_sends ? b_ : a_;
      const auto tx = pattern(256 << 10, base + (a_sends ? 1 : 2));
      std::vector<std::uint8_t> rx(tx.size());
      int rctx = 0, sctx = 0;
      ASSERT_EQ(fi_trecv(to.ep, rx.data(), rx.size(), nullptr, FI_ADDR_UNSPEC, 6, 0, &rctx), 0);
      ASSERT_EQ(fi_tsend(from.ep, tx.data(), tx.size(), nullptr, a_sends ? to_b : to_a, 6, &sctx), 0);
      const Entry r = wait_entry(to, {&from});
      ASSERT_FALSE(r.error || r.timeout) << (a_sends ? "a -> b" : "b -> a");
      const Entry s = wait_entry(from, {&to});
      ASSERT_FALSE(s.error || s.timeout);
      ASSERT_TRUE(rx == tx);
    }
  };
  ASSERT_NO_FATAL_FAILURE(round(a_to_b_, b_to_a_, 0x1000));
  const std::string before(reinterpret_cast<const char*>(a_.addr.data()), a_.addr.size());
  a_.close();
  a_.open(0, options_);
  ASSERT_NE(a_.ep, nullptr);
  EXPECT_NE(std::string(reinterpret_cast<const char*>(a_.addr.data()), a_.addr.size()), before);
  const fi_addr_t to_b = a_.insert(b_);
  const fi_addr_t to_a = b_.insert(a_);
  ASSERT_NO_FATAL_FAILURE(round(to_b, to_a, 0x2000));
}

TEST_F(Rdm, AReceiveOfAMessageWhosePredecessorSenderClosedMidwayFailsWhenItsSuccessorWrites) {
  // a announces 5 MiB (RTS); b matches it and grants all its 16 landing chunks (CTS) to a's
  // ring; a closes before it moves any data. Nobody will ever send the rest, so once the
  // endpoint opened next on a's card writes to b, b's receive completes with an error naming
  // the sender -- it does not wait forever -- and b goes on with the successor, both ways,
  // with its landing chunks back and no fault on its EQ.
  // Round 1: b answers the RTS before a closes. Round 2: after (a's RTS landed, a closed,
  // then b reads it): b's grant meets a revoked window and waits to be resent; it must be
  // dropped when the successor writes, not resent until the fault timer (300 ms here) fires.
  fid_eq* eq = nullptr;
  fi_eq_attr eq_attr{};
  ASSERT_EQ(fi_eq_open(b_.fabric, &eq_attr, &eq, nullptr), 0);
  ASSERT_EQ(fi_ep_bind(b_.ep, &eq->fid, 0), 0);
  ::setenv("FI_NPO_FAULT_MS", "300", 1);
  fi_addr_t to_b = a_to_b_, to_a = b_to_a_;
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round == 0 ? "b answered before a closed" : "b answered after a closed");
    const auto tx = pattern(5 << 20, 91 + round);
    std::vector<std::uint8_t> rx(tx.size());
    int rctx = 0, sctx = 0;
    ASSERT_EQ(fi_trecv(b_.ep, rx.data(), rx.size(), nullptr, FI_ADDR_UNSPEC, 5, 0, &rctx), 0);
    ASSERT_EQ(fi_tsend(a_.ep, tx.data(), tx.size(), nullptr, to_b, 5, &sctx), 0);
    if (round == 0) {
      for (int i = 0; i < 200; ++i) progress(b_);  // b takes the RTS and grants; a is not progressed
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the RTS lands in b's ring
    }
    a_.close();
    if (round == 1)
      for (int i = 0; i < 200; ++i) progress(b_);  // b grants to the closed ring: refused, resent later
    a_.open(0, options_);
    ASSERT_NE(a_.ep, nullptr);
    const fi_addr_t old_to_a = to_a;
    to_b = a_.insert(b_);
    to_a = b_.insert(a_);
    std::uint32_t got = 0;
    const std::uint32_t v = 0x5ecc0001u + static_cast<std::uint32_t>(round);
    int vctx = 0;
    ASSERT_EQ(fi_trecv(b_.ep, &got, sizeof got, nullptr, FI_ADDR_UNSPEC, 9, 0, &vctx), 0);
    ASSERT_EQ(fi_tinject(a_.ep, &v, sizeof v, to_b, 9), 0);
    // two entries, in either order: the 5 MiB receive fails, the successor's message arrives
    bool failed = false, arrived = false;
    for (int n = 0; n < 2; ++n) {
      const Entry r = wait_entry(b_, {&a_});
      ASSERT_FALSE(r.timeout);
      if (r.error) {
        EXPECT_EQ(r.err.op_context, &rctx);
        EXPECT_EQ(r.err.err, FI_EIO);
        const char* text = fi_cq_strerror(b_.cq, r.err.prov_errno, r.err.err_data, nullptr, 0);
        EXPECT_NE(std::string(text ? text : "").find("was closed before the message finished"), std::string::npos)
            << (text ? text : "");
        failed = true;
      } else {
        EXPECT_EQ(r.e.op_context, &vctx);
        EXPECT_EQ(got, v);
        arrived = true;
      }
    }
    EXPECT_TRUE(failed && arrived);
    // b's address of the closed endpoint now refuses sends at once (no wait for a fault)
    const std::uint32_t w = 1;
    EXPECT_EQ(fi_tinject(b_.ep, &w, sizeof w, old_to_a, 9), -FI_EIO);
    // the successor and b: rendezvous both ways (b's landing chunks were given back)
    for (const bool a_sends : {true, false}) {
      Side& from = a_sends ? a_ : b_;
      Side& to = a_sends ? b_ : a_;
      const auto t2 = pattern(1 << 20, a_sends ? 92 : 93);
      std::vector<std::uint8_t> r2(t2.size());
      ASSERT_EQ(fi_trecv(to.ep, r2.data(), r2.size(), nullptr, FI_ADDR_UNSPEC, 6, 0, nullptr), 0);
      ASSERT_EQ(fi_tsend(from.ep, t2.data(), t2.size(), nullptr, a_sends ? to_b : to_a, 6, nullptr), 0);
      const Entry x = wait_entry(to, {&from});
      ASSERT_FALSE(x.error || x.timeout) << (a_sends ? "a -> b" : "b -> a");
      const Entry y = wait_entry(from, {&to});
      ASSERT_FALSE(y.error || y.timeout);
      EXPECT_TRUE(r2 == t2);
    }
    // longer than the fault timer: b's EQ stays empty (a fault would be an error entry there)
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(600);
    while (std::chrono::steady_clock::now() < until) {
      progress(b_);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::uint32_t event = 0;
    fi_eq_entry entry{};
    fi_eq_err_entry err{};
    if (fi_eq_read(eq, &event, &entry, sizeof entry, 0) == -FI_EAVAIL && fi_eq_readerr(eq, &err, 0) > 0)
      ADD_FAILURE() << "b reported a fault: " << fi_eq_strerror(eq, err.prov_errno, err.err_data, nullptr, 0);
  }
  ::unsetenv("FI_NPO_FAULT_MS");
  b_.close_ep();
  EXPECT_EQ(fi_close(&eq->fid), 0);
}

TEST_F(Rdm, TwoCardsWritingOneLaneAreAFaultNamingBoth) {
  // A ring of one lane (FI_NPO_RING_LANES=1): the endpoints of cards 0 and 2 both write lane
  // 0 of it and would overwrite each other's slots. The receiver accepts the first sender and
  // reports the second on its EQ (FI_NPO_FAULT=report, the default outside a job) -- unlike
  // a successor of the same card and endpoint number (the test above).
  ::setenv("FI_NPO_RING_LANES", "1", 1);
  Side one;
  one.open(1, options_);
  ::unsetenv("FI_NPO_RING_LANES");
  ASSERT_NE(one.ep, nullptr);
  fid_eq* eq = nullptr;
  fi_eq_attr eq_attr{};
  ASSERT_EQ(fi_eq_open(one.fabric, &eq_attr, &eq, nullptr), 0);
  ASSERT_EQ(fi_ep_bind(one.ep, &eq->fid, 0), 0);
  Side c;
  c.open(2, options_);
  ASSERT_NE(c.ep, nullptr);
  const std::uint32_t v = 0x0a0b0c0d;
  std::uint32_t got = 0;
  ASSERT_EQ(fi_trecv(one.ep, &got, sizeof got, nullptr, FI_ADDR_UNSPEC, 3, 0, nullptr), 0);
  ASSERT_EQ(fi_tinject(a_.ep, &v, sizeof v, a_.insert(one), 3), 0);
  const Entry r = wait_entry(one, {&a_});
  ASSERT_FALSE(r.error || r.timeout);
  EXPECT_EQ(got, v) << "the lane's first sender is received";
  ASSERT_EQ(fi_tinject(c.ep, &v, sizeof v, c.insert(one), 3), 0);
  fi_eq_err_entry err{};
  ssize_t n = -FI_EAGAIN;
  for (int i = 0; i < 2000 && n == -FI_EAGAIN; ++i) {
    progress(one);
    progress(c);
    std::uint32_t event = 0;
    fi_eq_entry entry{};
    if (fi_eq_read(eq, &event, &entry, sizeof entry, 0) == -FI_EAVAIL) n = fi_eq_readerr(eq, &err, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(n, static_cast<ssize_t>(sizeof err));
  EXPECT_EQ(err.err, FI_EIO);
  const std::string msg = fi_eq_strerror(eq, err.prov_errno, err.err_data, nullptr, 0);
  EXPECT_NE(msg.find("two senders write lane 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("fabric ids 1 and 3"), std::string::npos) << msg;
  c.close();
  one.close_ep();
  EXPECT_EQ(fi_close(&eq->fid), 0);
  one.close();
}

}  // namespace
