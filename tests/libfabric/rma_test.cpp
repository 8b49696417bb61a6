// SPDX-License-Identifier: Apache-2.0
// FI_RMA on the native FI_EP_RDM endpoint of the `npo` provider, in-process on emu:mesh8
// through the libfabric API only: getinfo offers it when asked (and mtl ofi's hints still
// select the native entry), fi_write / fi_read of every size class at offsets with the data
// checked (eager, rendezvous, several landing zones' worth), remote CQ data, inject, bad key /
// out of range / missing access refused with error entries and the target memory untouched,
// RMAs interleaved with tagged sends, and MR close (idle, and under a large write or read) /
// re-registration.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include "fi_fixture.hpp"

namespace {

using namespace npo_fi_test;

constexpr std::size_t kRmaEagerMax = 4096 - 80;  // the provider's one-message RMA write limit
constexpr std::uint64_t kRmaCaps = FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;

fi_info* rma_hints() {
  fi_info* h = fi_allocinfo();
  h->ep_attr->type = FI_EP_RDM;
  h->caps = FI_RMA | FI_TAGGED | FI_MSG;
  h->domain_attr->av_type = FI_AV_TABLE;
  h->fabric_attr->prov_name = strdup("npo");
  return h;
}

// Checks of getinfo's first entry for the RMA hints.
void check_rma(const fi_info* info, const std::string&) {
  ASSERT_STREQ(info->fabric_attr->prov_name, "npo");
  ASSERT_EQ(info->ep_attr->type, FI_EP_RDM);
  ASSERT_EQ(info->caps & kRmaCaps, kRmaCaps);
}

const SideOptions kSide{.hints = rma_hints, .check_info = check_rma};

class Rma : public SidePair<> {
 protected:
  Rma() : SidePair(kSide) {}
  // Registers `buf[0, len)` on b with `access` under `key`.
  fid_mr* reg_b(void* buf, std::size_t len, std::uint64_t access, std::uint64_t key) {
    fid_mr* mr = nullptr;
    EXPECT_EQ(fi_mr_reg(b_.domain, buf, len, access, 0, key, 0, &mr, nullptr), 0);
    return mr;
  }
  // Issues an op, retrying -FI_EAGAIN while progressing b.
  template <typename F>
  void issue(F f) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    ssize_t r;
    while ((r = f()) == -FI_EAGAIN && std::chrono::steady_clock::now() < end) progress(b_);
    ASSERT_EQ(r, 0);
  }
};

TEST(RmaInfo, OfferedWhenAskedWithAtomicsAndMtlOfiStillGetsTheNativeEntry) {
  use_provider();
  fi_info* hints = rma_hints();
  fi_info* info = nullptr;
  ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info), 0);
  ASSERT_STREQ(info->fabric_attr->prov_name, "npo");
  EXPECT_EQ(info->ep_attr->type, FI_EP_RDM);
  EXPECT_EQ(info->caps & kRmaCaps, kRmaCaps);
  EXPECT_EQ(info->domain_attr->mr_mode, 0) << "keys chosen by the application, offsets (docs/libfabric.md RMA)";
  EXPECT_GE(info->domain_attr->mr_key_size, 8u);
  EXPECT_GE(info->tx_attr->rma_iov_limit, 1u);
  fi_freeinfo(info);
  // atomics are offered too (atomic_test.cpp): the npo entry stays first
  hints->caps |= FI_ATOMIC;
  info = nullptr;
  ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info), 0);
  EXPECT_STREQ(info->fabric_attr->prov_name, "npo");
  EXPECT_EQ(info->caps & FI_ATOMIC, FI_ATOMIC);
  fi_freeinfo(info);
  fi_freeinfo(hints);
  // Open MPI's mtl ofi does not ask for FI_RMA: the native entry without it, first
  hints = fi_allocinfo();
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_TAGGED | FI_LOCAL_COMM | FI_REMOTE_COMM | FI_DIRECTED_RECV;
  hints->tx_attr->msg_order = FI_ORDER_SAS;
  hints->rx_attr->msg_order = FI_ORDER_SAS;
  hints->domain_attr->threading = FI_THREAD_SAFE;
  hints->domain_attr->cq_data_size = sizeof(int);
  hints->fabric_attr->prov_name = strdup("npo");
  info = nullptr;
  ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info), 0);
  EXPECT_STREQ(info->fabric_attr->prov_name, "npo");
  EXPECT_EQ(info->ep_attr->type, FI_EP_RDM);
  EXPECT_EQ(info->caps & FI_RMA, 0u);
  fi_freeinfo(info);
  fi_freeinfo(hints);
}

TEST_F(Rma, WriteAndReadEverySizeAtOffsetsWithDataChecked) {
  constexpr std::size_t kRegion = (8u << 20) + 3 * 4096;
  const auto initial = pattern(kRegion, 99);
  std::vector<std::uint8_t> region = initial;
  fid_mr* mr = reg_b(region.data(), region.size(), FI_REMOTE_READ | FI_REMOTE_WRITE, 0x5eed);
  ASSERT_NE(mr, nullptr);
  std::vector<std::uint8_t> expect = initial;
  for (std::size_t n : {std::size_t{1}, std::size_t{4096}, kRmaEagerMax, kRmaEagerMax + 1, std::size_t{1} << 20,
                        std::size_t{8} << 20}) {
    const std::size_t off = n >= (8u << 20) ? 4096 + 3 : 13 + n % 4096;
    SCOPED_TRACE("size " + std::to_string(n) + " at offset " + std::to_string(off));
    const auto tx = pattern(n, static_cast<unsigned>(n));
    int wctx = 0;
    issue([&] { return fi_write(a_.ep, tx.data(), n, nullptr, a_to_b_, off, 0x5eed, &wctx); });
    const Entry w = wait_entry(a_, b_);
    ASSERT_FALSE(w.error) << w.err.err << " " << fi_strerror(w.err.err);
    EXPECT_EQ(w.e.op_context, &wctx);
    EXPECT_EQ(w.e.flags, FI_RMA | FI_WRITE);
    // delivery complete: the target placed the data before the write completed
    std::copy(tx.begin(), tx.end(), expect.begin() + static_cast<std::ptrdiff_t>(off));
    ASSERT_TRUE(region == expect) << "target memory differs after the write completed";
    // read back a window around it (bytes before and after included)
    const std::size_t roff = off - 5, rn = std::min(n + 10, kRegion - roff);
    std::vector<std::uint8_t> rx(rn + 16, 0xee);
    int rctx = 0;
    issue([&] { return fi_read(a_.ep, rx.data(), rn, nullptr, a_to_b_, roff, 0x5eed, &rctx); });
    const Entry r = wait_entry(a_, b_);
    ASSERT_FALSE(r.error) << r.err.err;
    EXPECT_EQ(r.e.op_context, &rctx);
    EXPECT_EQ(r.e.flags, FI_RMA | FI_READ);
    EXPECT_TRUE(std::equal(rx.begin(), rx.begin() + static_cast<std::ptrdiff_t>(rn),
                           expect.begin() + static_cast<std::ptrdiff_t>(roff)))
        << "read data differs";
    EXPECT_EQ(rx[rn], 0xee) << "read wrote past the buffer";
  }
  EXPECT_EQ(fi_close(&mr->fid), 0);
}

TEST_F(Rma, VectoredWriteAndReadIntoAMultiIovRegion) {
  std::vector<std::uint8_t> r1(3000, 0), r2(700 * 1024, 0);
  iovec regs[2] = {{r1.data(), r1.size()}, {r2.data(), r2.size()}};
  fid_mr* mr = nullptr;
  ASSERT_EQ(fi_mr_regv(b_.domain, regs, 2, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 7, 0, &mr, nullptr), 0);
  // 600 KiB from two source buffers, spanning the region's two iovs
  const auto s1 = pattern(100 * 1024, 1), s2 = pattern(500 * 1024, 2);
  iovec src[2] = {{const_cast<std::uint8_t*>(s1.data()), s1.size()}, {const_cast<std::uint8_t*>(s2.data()), s2.size()}};
  issue([&] { return fi_writev(a_.ep, src, nullptr, 2, a_to_b_, 1000, 7, nullptr); });
  Entry w = wait_entry(a_, b_);
  ASSERT_FALSE(w.error) << w.err.err;
  std::vector<std::uint8_t> all(s1);
  all.insert(all.end(), s2.begin(), s2.end());
  std::vector<std::uint8_t> flat(r1);
  flat.insert(flat.end(), r2.begin(), r2.end());
  EXPECT_TRUE(std::equal(all.begin(), all.end(), flat.begin() + 1000));
  EXPECT_EQ(std::count(flat.begin(), flat.begin() + 1000, 0), 1000) << "wrote before the offset";
  // read it back into two buffers through fi_readmsg
  std::vector<std::uint8_t> d1(200 * 1024), d2(all.size() - d1.size());
  iovec dst[2] = {{d1.data(), d1.size()}, {d2.data(), d2.size()}};
  fi_rma_iov rma{1000, all.size(), 7};
  fi_msg_rma msg{};
  msg.msg_iov = dst;
  msg.iov_count = 2;
  msg.addr = a_to_b_;
  msg.rma_iov = &rma;
  msg.rma_iov_count = 1;
  issue([&] { return fi_readmsg(a_.ep, &msg, FI_COMPLETION); });
  Entry r = wait_entry(a_, b_);
  ASSERT_FALSE(r.error) << r.err.err;
  d1.insert(d1.end(), d2.begin(), d2.end());
  EXPECT_TRUE(d1 == all);
  EXPECT_EQ(fi_close(&mr->fid), 0);
}

TEST_F(Rma, WritedataGivesTheTargetARemoteCqDataCompletionAndInjectNeedsNoBuffer) {
  std::vector<std::uint8_t> region(2u << 20, 0);
  fid_mr* mr = reg_b(region.data(), region.size(), FI_REMOTE_WRITE, 42);
  for (std::size_t n : {std::size_t{100}, std::size_t{1} << 20}) {
    SCOPED_TRACE("size " + std::to_string(n));
    const auto tx = pattern(n, 3);
    int ctx = 0;
    const std::uint64_t data = 0xabcd0000u + n;
    issue([&] { return fi_writedata(a_.ep, tx.data(), n, nullptr, data, a_to_b_, 64, 42, &ctx); });
    const Entry t = wait_entry(b_, a_);
    ASSERT_FALSE(t.error) << t.err.err;
    EXPECT_EQ(t.e.flags, FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA);
    EXPECT_EQ(t.e.data, data);
    EXPECT_TRUE(std::equal(tx.begin(), tx.end(), region.begin() + 64)) << "data not placed at the completion";
    const Entry w = wait_entry(a_, b_);
    ASSERT_FALSE(w.error) << w.err.err;
    EXPECT_EQ(w.e.op_context, &ctx);
  }
  // fi_inject_write (eager) and an injected write above the eager limit: the source buffer is
  // reused at once and the bytes arrive; fi_inject_write reports no completion, fi_writemsg
  // with FI_INJECT does (the CQ is bound without FI_SELECTIVE_COMPLETION, fi_rma(3))
  std::vector<std::uint8_t> small = pattern(64, 4), big = pattern(4096, 5);
  const auto small_copy = small, big_copy = big;
  issue([&] { return fi_inject_write(a_.ep, small.data(), small.size(), a_to_b_, 0, 42); });
  iovec iov{big.data(), big.size()};
  fi_rma_iov rma{8192, big.size(), 42};
  fi_msg_rma msg{};
  msg.msg_iov = &iov;
  msg.iov_count = 1;
  msg.addr = a_to_b_;
  msg.rma_iov = &rma;
  msg.rma_iov_count = 1;
  int wctx = 0;
  msg.context = &wctx;
  issue([&] { return fi_writemsg(a_.ep, &msg, FI_INJECT); });
  std::fill(small.begin(), small.end(), 0);
  std::fill(big.begin(), big.end(), 0);
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < end &&
         !(std::equal(small_copy.begin(), small_copy.end(), region.begin()) &&
           std::equal(big_copy.begin(), big_copy.end(), region.begin() + 8192))) {
    progress(a_);
    progress(b_);
  }
  EXPECT_TRUE(std::equal(small_copy.begin(), small_copy.end(), region.begin()));
  EXPECT_TRUE(std::equal(big_copy.begin(), big_copy.end(), region.begin() + 8192));
  const Entry wm = wait_entry(a_, b_);
  ASSERT_FALSE(wm.error || wm.timeout) << "fi_writemsg(FI_INJECT) never completed";
  EXPECT_EQ(wm.e.op_context, &wctx) << "the completion is not fi_writemsg's";
  EXPECT_EQ(wm.e.flags & (FI_RMA | FI_WRITE), FI_RMA | FI_WRITE);
  fi_cq_tagged_entry none{};
  EXPECT_EQ(fi_cq_read(a_.cq, &none, 1), -FI_EAGAIN) << "fi_inject_write generated a completion";
  EXPECT_EQ(fi_close(&mr->fid), 0);
}

TEST_F(Rma, BadKeyOutOfRangeAndMissingAccessAreErrorEntriesAndNothingOutsideIsWritten) {
  // the MR covers the middle 1 MiB of a 3 MiB buffer; the rest must never change
  constexpr std::size_t kMiB = 1u << 20;
  std::vector<std::uint8_t> buf(3 * kMiB, 0x5a);
  std::uint8_t* region = buf.data() + kMiB;
  fid_mr* rw = reg_b(region, kMiB, FI_REMOTE_READ | FI_REMOTE_WRITE, 100);
  fid_mr* ro = reg_b(region, kMiB, FI_REMOTE_READ, 101);
  fid_mr* wo = reg_b(region, kMiB, FI_REMOTE_WRITE, 102);
  fid_mr* local = nullptr;
  ASSERT_EQ(fi_mr_reg(b_.domain, region, kMiB, FI_READ | FI_WRITE, 0, 103, 0, &local, nullptr), 0);
  const auto tx = pattern(2 * kMiB, 6);
  std::vector<std::uint8_t> rx(2 * kMiB, 0xee);
  struct Case {
    const char* what;
    bool read;
    std::size_t len;
    std::uint64_t addr, key;
    int err;
  };
  const Case cases[] = {
      {"bad key, eager write", false, 100, 0, 999, FI_EKEYREJECTED},
      {"bad key, large write", false, 300 * 1024, 0, 999, FI_EKEYREJECTED},
      {"bad key, read", true, 100, 0, 999, FI_EKEYREJECTED},
      {"local-only MR, write", false, 100, 0, 103, FI_EKEYREJECTED},
      {"past the end, eager write", false, 100, kMiB - 50, 100, FI_EINVAL},
      {"past the end, large write", false, 300 * 1024, kMiB - 4096, 100, FI_EINVAL},
      {"larger than the MR", false, 2 * kMiB, 0, 100, FI_EINVAL},
      {"far out of range", false, 8, ~std::uint64_t{0} - 3, 100, FI_EINVAL},
      {"past the end, read", true, 8192, kMiB - 10, 100, FI_EINVAL},
      {"past the end, large read", true, 600 * 1024, kMiB - 100, 100, FI_EINVAL},
      {"write into a read-only MR", false, 100, 0, 101, FI_EACCES},
      {"large write into a read-only MR", false, 600 * 1024, 0, 101, FI_EACCES},
      {"read of a write-only MR", true, 100, 0, 102, FI_EACCES},
      {"large read of a write-only MR", true, 600 * 1024, 0, 102, FI_EACCES},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    int ctx = 0;
    if (c.read) {
      issue([&] { return fi_read(a_.ep, rx.data(), c.len, nullptr, a_to_b_, c.addr, c.key, &ctx); });
    } else {
      issue([&] { return fi_write(a_.ep, tx.data(), c.len, nullptr, a_to_b_, c.addr, c.key, &ctx); });
    }
    const Entry e = wait_entry(a_, b_);
    ASSERT_TRUE(e.error) << "the operation succeeded";
    EXPECT_EQ(e.err.err, c.err) << fi_strerror(e.err.err);
    EXPECT_EQ(e.err.op_context, &ctx);
    EXPECT_EQ(e.err.flags, FI_RMA | (c.read ? FI_READ : FI_WRITE));
    EXPECT_EQ(std::count(buf.begin(), buf.end(), 0x5a), static_cast<std::ptrdiff_t>(buf.size()))
        << "target memory changed";
    EXPECT_EQ(std::count(rx.begin(), rx.end(), 0xee), static_cast<std::ptrdiff_t>(rx.size()))
        << "a refused read delivered data";
  }
  // the endpoints still work: a write that fits exactly at the end
  int ctx = 0;
  issue([&] { return fi_write(a_.ep, tx.data(), 4096, nullptr, a_to_b_, kMiB - 4096, 100, &ctx); });
  const Entry ok = wait_entry(a_, b_);
  ASSERT_FALSE(ok.error) << ok.err.err;
  EXPECT_TRUE(std::equal(tx.begin(), tx.begin() + 4096, region + kMiB - 4096));
  EXPECT_EQ(std::count(buf.begin() + 2 * kMiB, buf.end(), 0x5a), static_cast<std::ptrdiff_t>(kMiB));
  for (fid_mr* m : {rw, ro, wo, local}) EXPECT_EQ(fi_close(&m->fid), 0);
}

TEST_F(Rma, ManyConcurrentRmasInterleavedWithTaggedSends) {
  constexpr std::size_t kSlot = 320 * 1024;
  constexpr int kWrites = 40, kReads = 12, kSends = 24;
  std::vector<std::uint8_t> region(kSlot * (kWrites + kReads), 0);
  // the read slots hold known data from the start
  const auto readable = pattern(kSlot * kReads, 7);
  std::copy(readable.begin(), readable.end(), region.begin() + kSlot * kWrites);
  fid_mr* mr = reg_b(region.data(), region.size(), FI_REMOTE_READ | FI_REMOTE_WRITE, 0x77);
  std::mt19937 g(11);
  std::vector<std::vector<std::uint8_t>> wdata(kWrites), rdata(kReads), sdata(kSends), rcv(kSends);
  std::vector<std::size_t> rlen(kReads);
  std::vector<int> wctx(kWrites), rctx(kReads), sctx(kSends), tctx(kSends);
  for (int i = 0; i < kSends; ++i) {
    sdata[i] = pattern(1 + g() % (200 * 1024), 1000 + i);
    rcv[i].assign(200 * 1024, 0);
    ASSERT_EQ(fi_trecv(b_.ep, rcv[i].data(), rcv[i].size(), nullptr, FI_ADDR_UNSPEC, 500 + i, 0, &tctx[i]), 0);
  }
  int w = 0, r = 0, s = 0;
  while (w < kWrites || r < kReads || s < kSends) {
    const unsigned pick = g() % 3;
    if (pick == 0 && w < kWrites) {
      wdata[w] = pattern(1 + g() % kSlot, 2000 + w);
      issue([&] {
        return fi_write(a_.ep, wdata[w].data(), wdata[w].size(), nullptr, a_to_b_, kSlot * w, 0x77, &wctx[w]);
      });
      ++w;
    } else if (pick == 1 && r < kReads) {
      rlen[r] = 1 + g() % kSlot;
      rdata[r].assign(rlen[r], 0);
      issue([&] {
        return fi_read(a_.ep, rdata[r].data(), rlen[r], nullptr, a_to_b_, kSlot * (kWrites + r), 0x77, &rctx[r]);
      });
      ++r;
    } else if (pick == 2 && s < kSends) {
      issue([&] { return fi_tsend(a_.ep, sdata[s].data(), sdata[s].size(), nullptr, a_to_b_, 500 + s, &sctx[s]); });
      ++s;
    }
  }
  // every op completes once, without error
  std::vector<void*> done_a, done_b;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while ((done_a.size() < kWrites + kReads + kSends || done_b.size() < kSends) &&
         std::chrono::steady_clock::now() < end) {
    fi_cq_tagged_entry e{};
    for (auto [side, out] : {std::pair{&a_, &done_a}, std::pair{&b_, &done_b}}) {
      const ssize_t n = fi_cq_read(side->cq, &e, 1);
      if (n == 1) out->push_back(e.op_context);
      if (n == -FI_EAVAIL) {
        fi_cq_err_entry err{};
        (void)fi_cq_readerr(side->cq, &err, 0);
        FAIL() << "error entry " << err.err << " " << fi_strerror(err.err);
      }
    }
  }
  ASSERT_EQ(done_a.size(), std::size_t{kWrites + kReads + kSends});
  ASSERT_EQ(done_b.size(), std::size_t{kSends});
  std::sort(done_a.begin(), done_a.end());
  EXPECT_EQ(std::unique(done_a.begin(), done_a.end()), done_a.end()) << "an op completed twice";
  for (int i = 0; i < kWrites; ++i)
    EXPECT_TRUE(std::equal(wdata[i].begin(), wdata[i].end(), region.begin() + kSlot * i)) << "write " << i;
  for (int i = 0; i < kReads; ++i)
    EXPECT_TRUE(std::equal(rdata[i].begin(), rdata[i].end(), readable.begin() + kSlot * i)) << "read " << i;
  for (int i = 0; i < kSends; ++i)
    EXPECT_TRUE(std::equal(sdata[i].begin(), sdata[i].end(), rcv[i].begin())) << "tagged send " << i;
  EXPECT_EQ(fi_close(&mr->fid), 0);
}

TEST_F(Rma, MrCloseWhileIdleRevokesTheKeyAndKeysAreUnique) {
  std::vector<std::uint8_t> region(64 * 1024, 0), other(64 * 1024, 0);
  fid_mr* mr = reg_b(region.data(), region.size(), FI_REMOTE_WRITE | FI_REMOTE_READ, 5);
  EXPECT_EQ(fi_mr_key(mr), 5u);
  fid_mr* dup = nullptr;
  EXPECT_EQ(fi_mr_reg(b_.domain, other.data(), other.size(), FI_REMOTE_WRITE, 0, 5, 0, &dup, nullptr), -FI_ENOKEY);
  const auto tx = pattern(10000, 8);
  issue([&] { return fi_write(a_.ep, tx.data(), tx.size(), nullptr, a_to_b_, 0, 5, nullptr); });
  ASSERT_FALSE(wait_entry(a_, b_).error);
  EXPECT_TRUE(std::equal(tx.begin(), tx.end(), region.begin()));
  ASSERT_EQ(fi_close(&mr->fid), 0);
  // closed: the key is gone; the memory is left alone
  std::fill(region.begin(), region.end(), 0);
  issue([&] { return fi_write(a_.ep, tx.data(), tx.size(), nullptr, a_to_b_, 0, 5, nullptr); });
  Entry e = wait_entry(a_, b_);
  ASSERT_TRUE(e.error);
  EXPECT_EQ(e.err.err, FI_EKEYREJECTED);
  EXPECT_EQ(std::count(region.begin(), region.end(), 0), static_cast<std::ptrdiff_t>(region.size()));
  // the key can be registered again, on other memory
  mr = reg_b(other.data(), other.size(), FI_REMOTE_WRITE, 5);
  issue([&] { return fi_write(a_.ep, tx.data(), 100, nullptr, a_to_b_, 0, 5, nullptr); });
  ASSERT_FALSE(wait_entry(a_, b_).error);
  EXPECT_TRUE(std::equal(tx.begin(), tx.begin() + 100, other.begin()));
  EXPECT_EQ(std::count(region.begin(), region.end(), 0), static_cast<std::ptrdiff_t>(region.size()));
  EXPECT_EQ(fi_close(&mr->fid), 0);
}

TEST_F(Rma, AnInitiatorTheTargetNeverInsertedIsAnsweredThroughItsAddress) {
  // c knows b; b's AV does not know c: b answers from the address each request carries
  Side c;
  c.open(2, kSide);
  const fi_addr_t c_to_b = c.insert(b_);
  std::vector<std::uint8_t> region(2u << 20, 0);
  fid_mr* mr = reg_b(region.data(), region.size(), FI_REMOTE_READ | FI_REMOTE_WRITE, 31);
  for (std::size_t n : {std::size_t{100}, std::size_t{1} << 20}) {
    SCOPED_TRACE("size " + std::to_string(n));
    const auto tx = pattern(n, 21);
    ssize_t r;
    while ((r = fi_write(c.ep, tx.data(), n, nullptr, c_to_b, 0, 31, nullptr)) == -FI_EAGAIN) progress(b_);
    ASSERT_EQ(r, 0);
    Entry w = wait_entry(c, b_);
    ASSERT_FALSE(w.error) << w.err.err;
    EXPECT_TRUE(std::equal(tx.begin(), tx.end(), region.begin()));
    std::vector<std::uint8_t> rx(n, 0);
    while ((r = fi_read(c.ep, rx.data(), n, nullptr, c_to_b, 0, 31, nullptr)) == -FI_EAGAIN) progress(b_);
    ASSERT_EQ(r, 0);
    w = wait_entry(c, b_);
    ASSERT_FALSE(w.error) << w.err.err;
    EXPECT_TRUE(rx == tx);
  }
  EXPECT_EQ(fi_close(&mr->fid), 0);
  c.close();
}

TEST_F(Rma, MrClosedUnderALargeWriteOrReadStopsItWithAnErrorAndNothingOutsideChanges) {
  constexpr std::size_t kMiB = 1u << 20;
  std::vector<std::uint8_t> buf(10 * kMiB, 0);
  std::uint8_t* region = buf.data() + kMiB;
  const auto tx = pattern(8 * kMiB, 12);
  // write: close the region once its first chunk was placed (32 chunks of 256 KiB; the
  // landing zone takes 16 at a time, so most are still to come)
  fid_mr* mr = reg_b(region, 8 * kMiB, FI_REMOTE_WRITE | FI_REMOTE_READ, 9);
  int ctx = 0;
  issue([&] { return fi_write(a_.ep, tx.data(), tx.size(), nullptr, a_to_b_, 0, 9, &ctx); });
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::memcmp(region, tx.data(), 64) != 0 && std::chrono::steady_clock::now() < end) {
    progress(a_);
    progress(b_);
  }
  ASSERT_EQ(std::memcmp(region, tx.data(), 64), 0) << "the first chunk never arrived";
  ASSERT_EQ(fi_close(&mr->fid), 0);
  Entry e = wait_entry(a_, b_);
  ASSERT_TRUE(e.error) << "all 8 MiB placed although the region was closed after the first chunk";
  EXPECT_EQ(e.err.err, FI_EKEYREJECTED);
  EXPECT_EQ(e.err.op_context, &ctx);
  EXPECT_EQ(std::count(buf.begin(), buf.begin() + kMiB, 0), static_cast<std::ptrdiff_t>(kMiB));
  EXPECT_EQ(std::count(buf.end() - kMiB, buf.end(), 0), static_cast<std::ptrdiff_t>(kMiB));
  EXPECT_EQ(std::count(region + 7 * kMiB, region + 8 * kMiB, 0), static_cast<std::ptrdiff_t>(kMiB))
      << "chunks placed after the close";
  // read: the same, the region closed while its chunks are on their way (32 MiB: the target
  // stages chunks only as the initiator grants them, 8 ahead, so most are still to come)
  const auto big = pattern(32 * kMiB, 13);
  std::vector<std::uint8_t> src = big;
  mr = reg_b(src.data(), src.size(), FI_REMOTE_READ, 9);
  std::vector<std::uint8_t> rx(src.size(), 0);
  issue([&] { return fi_read(a_.ep, rx.data(), rx.size(), nullptr, a_to_b_, 0, 9, &ctx); });
  end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::memcmp(rx.data(), big.data(), 64) != 0 && std::chrono::steady_clock::now() < end) {
    progress(a_);
    progress(b_);
  }
  ASSERT_EQ(std::memcmp(rx.data(), big.data(), 64), 0) << "the first chunk never arrived";
  ASSERT_EQ(fi_close(&mr->fid), 0);
  e = wait_entry(a_, b_);
  ASSERT_TRUE(e.error) << "the read completed although the region was closed under it";
  EXPECT_EQ(e.err.err, FI_EKEYREJECTED);
  EXPECT_EQ(e.err.flags, FI_RMA | FI_READ);
}

}  // namespace
