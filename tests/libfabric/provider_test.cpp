// SPDX-License-Identifier: Apache-2.0
// The `npo` libfabric provider (libnpo-fi.so) driven in-process through the libfabric API
// only, as a runtime would: two endpoints on two cards of emu:mesh8 (one emulated supernode
// inside the provider), every message size with data checked, injects, CQ formats, AV
// calls, truncation, cancel, error completions, and the cards' DMA counters.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
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
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include "fi_fixture.hpp"
#include "fi_npo_ext.h"

namespace {

using namespace npo_fi_test;

void check_domain(const fi_info* info, const std::string& domain) {
  ASSERT_STREQ(info->domain_attr->name, domain.c_str());
}

// A DGRAM endpoint with a CQ of `format` (256 entries).
SideOptions dgram(fi_cq_format format) {
  return SideOptions{
      .hints = dgram_hints, .check_info = check_domain, .cq_format = format, .cq_size = 256, .check_addr_len = true};
}

// Reads one entry (or an error: returns -FI_EAVAIL) within 5 s.
ssize_t read_one(fid_cq* cq, void* entry) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (;;) {
    const ssize_t r = fi_cq_read(cq, entry, 1);
    if (r != -FI_EAGAIN || std::chrono::steady_clock::now() > end) return r;
    std::this_thread::yield();
  }
}

// 200 messages, more than a lane's 16 slots: the sender sees -FI_EAGAIN until the receiver
// consumes, never overwrites, and every message arrives once, in order.
void flow_control(Side& from, Side& to, fi_addr_t dest) {
  constexpr int kCount = 200;
  std::vector<std::uint32_t> got;
  std::vector<std::uint32_t> rxbuf(1);
  int sent = 0, eagain = 0;
  bool posted = false;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (static_cast<int>(got.size()) < kCount && std::chrono::steady_clock::now() < end) {
    if (sent < kCount) {
      const std::uint32_t v = 0xabc00000u + static_cast<std::uint32_t>(sent);
      const ssize_t r = fi_send(from.ep, &v, sizeof v, nullptr, dest, nullptr);
      if (r == 0) {
        ++sent;
      } else {
        ASSERT_EQ(r, -FI_EAGAIN);
        ++eagain;
      }
      fi_cq_data_entry tx{};
      (void)fi_cq_read(from.cq, &tx, 1);
    }
    // the receiver lags: it starts after the sender was pushed back once
    if (eagain == 0 && sent < kCount) continue;
    if (!posted) {
      ASSERT_EQ(fi_recv(to.ep, rxbuf.data(), sizeof(std::uint32_t), nullptr, FI_ADDR_UNSPEC, nullptr), 0);
      posted = true;
    }
    fi_cq_data_entry rx{};
    if (fi_cq_read(to.cq, &rx, 1) == 1) {
      got.push_back(rxbuf[0]);
      posted = false;
    }
  }
  ASSERT_EQ(static_cast<int>(got.size()), kCount);
  for (int i = 0; i < kCount; ++i) EXPECT_EQ(got[i], 0xabc00000u + static_cast<std::uint32_t>(i));
  EXPECT_GT(eagain, 0) << "the lane never filled up";
}

class ProviderPair : public ::testing::TestWithParam<fi_cq_format> {
 protected:
  void SetUp() override {
    use_provider();
    a_.open(0, dgram(format()));
    ASSERT_FALSE(HasFatalFailure());
    b_.open(1, dgram(format()));
    ASSERT_FALSE(HasFatalFailure());
    ASSERT_EQ(fi_av_insert(a_.av, b_.addr.data(), 1, &a_to_b_, 0, nullptr), 1);
    ASSERT_EQ(fi_av_insert(b_.av, a_.addr.data(), 1, &b_to_a_, 0, nullptr), 1);
  }
  void TearDown() override {
    b_.close();
    a_.close();
  }
  virtual fi_cq_format format() const { return FI_CQ_FORMAT_DATA; }

  // Sends `len` bytes a -> b and checks data, length and both completions.
  void round_trip(std::size_t len) {
    std::vector<std::uint8_t> src(len), dst(len + 16, 0xee);
    for (std::size_t i = 0; i < len; ++i) src[i] = static_cast<std::uint8_t>(i * 13 + len);
    ASSERT_EQ(fi_recv(b_.ep, dst.data(), dst.size(), nullptr, FI_ADDR_UNSPEC, &rx_ctx_), 0);
    ASSERT_EQ(fi_send(a_.ep, src.data(), len, nullptr, a_to_b_, &tx_ctx_), 0);
    fi_cq_data_entry tx{}, rx{};
    ASSERT_EQ(read_one(a_.cq, &tx), 1) << "send of " << len << " B";
    EXPECT_EQ(tx.op_context, &tx_ctx_);
    EXPECT_EQ(tx.flags, FI_SEND | FI_MSG);
    ASSERT_EQ(read_one(b_.cq, &rx), 1) << "recv of " << len << " B";
    EXPECT_EQ(rx.op_context, &rx_ctx_);
    EXPECT_EQ(rx.len, len);
    EXPECT_EQ(rx.flags, FI_RECV | FI_MSG);
    EXPECT_TRUE(std::equal(src.begin(), src.end(), dst.begin())) << len << " B";
    EXPECT_EQ(dst[len], 0xee) << "wrote past the message";
  }

  Side a_, b_;
  fi_addr_t a_to_b_ = FI_ADDR_NOTAVAIL, b_to_a_ = FI_ADDR_NOTAVAIL;
  int tx_ctx_ = 0, rx_ctx_ = 0;
};

TEST(Provider, GetinfoListsEveryCardInOrderWithoutTakingThem) {
  use_provider();
  fi_info* hints = dgram_hints();
  fi_info* info = nullptr;
  ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info), 0);
  std::vector<std::string> names;
  for (fi_info* i = info; i; i = i->next) {
    names.emplace_back(i->domain_attr->name);
    EXPECT_STREQ(i->fabric_attr->prov_name, "npo");
    EXPECT_EQ(i->ep_attr->type, FI_EP_DGRAM);
    EXPECT_EQ(i->ep_attr->max_msg_size, 4096u);
    EXPECT_EQ(i->caps & FI_MSG, FI_MSG);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"npo0", "npo1", "npo2", "npo3", "npo4", "npo5", "npo6", "npo7"}));
  fi_freeinfo(info);
  // RDM + tagged: the native endpoint, one per card; ofi_rxd does not layer over npo unless
  // FI_NPO_LAYERING=1 (it would be listed first and taken by `-p npo`)
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_TAGGED;
  info = nullptr;
  ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info), 0);
  names.clear();
  for (fi_info* i = info; i; i = i->next) {
    EXPECT_STREQ(i->fabric_attr->prov_name, "npo");
    EXPECT_EQ(i->ep_attr->type, FI_EP_RDM);
    EXPECT_GE(i->ep_attr->max_msg_size, std::size_t{1} << 32);
    names.emplace_back(i->domain_attr->name);
  }
  EXPECT_EQ(names.size(), 8u);
  EXPECT_EQ(names.front(), "npo0");
  fi_freeinfo(info);
  fi_freeinfo(hints);
}

TEST(Provider, CardChosenByFiNpoCard) {
  use_provider();
  ::setenv("FI_NPO_CARD", "5", 1);
  fi_info* hints = dgram_hints();
  fi_info* info = nullptr;
  ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info), 0);
  ::unsetenv("FI_NPO_CARD");
  ASSERT_NE(info, nullptr);
  EXPECT_STREQ(info->domain_attr->name, "npo5");
  EXPECT_EQ(info->next, nullptr);
  fi_freeinfo(info);
  fi_freeinfo(hints);
}

// Every ops table starts with its size; every function pointer after it must be set.
void expect_complete(const void* table, const char* name) {
  ASSERT_NE(table, nullptr) << name;
  std::size_t size = 0;
  std::memcpy(&size, table, sizeof size);
  ASSERT_GT(size, sizeof(std::size_t)) << name;
  for (std::size_t off = sizeof(std::size_t); off + sizeof(void*) <= size; off += sizeof(void*)) {
    void* fn = nullptr;
    std::memcpy(&fn, static_cast<const std::byte*>(table) + off, sizeof fn);
    EXPECT_NE(fn, nullptr) << name << " has a NULL entry at byte " << off;
  }
}

TEST_F(ProviderPair, EveryOpsTableIsComplete) {
  expect_complete(a_.fabric->fid.ops, "fabric fi_ops");
  expect_complete(a_.fabric->ops, "fi_ops_fabric");
  expect_complete(a_.domain->fid.ops, "domain fi_ops");
  expect_complete(a_.domain->ops, "fi_ops_domain");
  expect_complete(a_.domain->mr, "fi_ops_mr");
  expect_complete(a_.cq->fid.ops, "cq fi_ops");
  expect_complete(a_.cq->ops, "fi_ops_cq");
  expect_complete(a_.av->fid.ops, "av fi_ops");
  expect_complete(a_.av->ops, "fi_ops_av");
  expect_complete(a_.ep->fid.ops, "ep fi_ops");
  expect_complete(a_.ep->ops, "fi_ops_ep");
  expect_complete(a_.ep->cm, "fi_ops_cm");
  expect_complete(a_.ep->msg, "fi_ops_msg");
  expect_complete(a_.ep->rma, "fi_ops_rma");
  expect_complete(a_.ep->tagged, "fi_ops_tagged");
  expect_complete(a_.ep->atomic, "fi_ops_atomic");
  expect_complete(a_.ep->collective, "fi_ops_collective");
  fid_eq* eq = nullptr;
  fi_eq_attr eq_attr{};
  ASSERT_EQ(fi_eq_open(a_.fabric, &eq_attr, &eq, nullptr), 0);
  expect_complete(eq->fid.ops, "eq fi_ops");
  expect_complete(eq->ops, "fi_ops_eq");
  fid_mr* mr = nullptr;
  char buf[64];
  ASSERT_EQ(fi_mr_reg(a_.domain, buf, sizeof buf, FI_SEND, 0, 0, 0, &mr, nullptr), 0);
  expect_complete(mr->fid.ops, "mr fi_ops");
  EXPECT_EQ(fi_close(&mr->fid), 0);
  EXPECT_EQ(fi_close(&eq->fid), 0);
  // what the core provider does not offer answers -FI_ENOSYS, never crashes
  EXPECT_EQ(fi_tsend(a_.ep, buf, 1, nullptr, a_to_b_, 0, nullptr), -FI_ENOSYS);
  EXPECT_EQ(fi_write(a_.ep, buf, 1, nullptr, a_to_b_, 0, 0, nullptr), -FI_ENOSYS);
}

TEST_F(ProviderPair, SendRecvEverySizeFromOneByteToTheMaximumWithDataChecked) {
  for (std::size_t len : {1, 2, 3, 7, 8, 63, 64, 65, 100, 511, 1000, 1024, 2047, 3000, 4095, 4096}) {
    round_trip(len);
    ASSERT_FALSE(HasFailure()) << len;
  }
  // also zero bytes, and the maximum is enforced
  round_trip(0);
  std::vector<std::uint8_t> big(4097);
  EXPECT_EQ(fi_send(a_.ep, big.data(), big.size(), nullptr, a_to_b_, nullptr), -FI_EMSGSIZE);
}

TEST_F(ProviderPair, ManyMessagesQueueUpAndFlowControlHolds) { flow_control(a_, b_, a_to_b_); }

TEST(Provider, FlowControlReadsTheCounterOfTheLaneInThePeersRing) {
  // Rings of 8 lanes: the sender on card 2 (fabric ID 3, lane 3*4 = 12) writes lane 12 mod 8
  // = 4 of the receiver's ring, and must read that lane's consumer counter to get credit back.
  use_provider();
  ::setenv("FI_NPO_RING_LANES", "8", 1);
  Side from, to;
  from.open(2, dgram(FI_CQ_FORMAT_DATA));
  to.open(3, dgram(FI_CQ_FORMAT_DATA));
  ::unsetenv("FI_NPO_RING_LANES");
  ASSERT_FALSE(HasFatalFailure());
  fi_addr_t dest = FI_ADDR_NOTAVAIL;
  ASSERT_EQ(fi_av_insert(from.av, to.addr.data(), 1, &dest, 0, nullptr), 1);
  char buf[128];
  std::size_t len = sizeof buf;
  fi_av_straddr(from.av, to.addr.data(), buf, &len);
  EXPECT_NE(std::string(buf).find("ring8x16"), std::string::npos) << buf;
  flow_control(from, to, dest);
  to.close();
  from.close();
}

TEST(Provider, ABadRingLanesValueIsReportedOnceAndTheDefaultUsed) {
  // Issue fix6p point 3: "abc" used to be read as 0 and clamped to 1 lane (ring1x16).
  use_provider();
  ::setenv("FI_NPO_RING_LANES", "abc", 1);
  testing::internal::CaptureStderr();
  Side a, b;
  a.open(2, dgram(FI_CQ_FORMAT_DATA));
  b.open(3, dgram(FI_CQ_FORMAT_DATA));
  const std::string err = testing::internal::GetCapturedStderr();
  ::unsetenv("FI_NPO_RING_LANES");
  ASSERT_FALSE(HasFatalFailure());
  const std::string line =
      "npo: FI_NPO_RING_LANES='abc' is not valid (accepted: an integer 1..4096); using the default (4 per card + 4, "
      "at least 64)\n";
  EXPECT_NE(err.find(line), std::string::npos) << err;
  EXPECT_EQ(err.find(line), err.rfind(line)) << "reported twice: " << err;
  fi_addr_t dest = FI_ADDR_NOTAVAIL;
  ASSERT_EQ(fi_av_insert(a.av, b.addr.data(), 1, &dest, 0, nullptr), 1);
  char buf[128];
  std::size_t len = sizeof buf;
  fi_av_straddr(a.av, b.addr.data(), buf, &len);
  EXPECT_NE(std::string(buf).find("ring64x16"), std::string::npos) << buf;  // mesh8: 4 x 9 = 36, at least 64
  b.close();
  a.close();
}

TEST(Provider, ABadFiNpoCardIsReportedAndEveryCardListed) {
  // Issue fix6p point 3: "abc" used to become card 0.
  use_provider();
  ::setenv("FI_NPO_CARD", "abc", 1);
  testing::internal::CaptureStderr();
  fi_info* hints = dgram_hints();
  fi_info* info = nullptr;
  const int rc = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info);
  const std::string err = testing::internal::GetCapturedStderr();
  ::unsetenv("FI_NPO_CARD");
  ASSERT_EQ(rc, 0);
  EXPECT_NE(err.find("npo: FI_NPO_CARD='abc' is not valid (accepted: an integer 0..65535)"), std::string::npos) << err;
  std::size_t n = 0;
  for (fi_info* i = info; i; i = i->next) ++n;
  EXPECT_EQ(n, 8u);
  fi_freeinfo(info);
  fi_freeinfo(hints);
}

TEST_F(ProviderPair, ASendToAFullLaneWaitsForAPeerThatConsumesLateInsteadOfRefusing) {
  // ofi_rxd drops an ACK whose fi_send answers -FI_EAGAIN; the last ACK of a message lost so
  // hung fi_pingpong -e rdm under load (the receiver stopped progressing). A send into a full
  // lane whose receiver consumes within a moment must therefore be taken, not refused.
  constexpr int kLane = 16;  // slots per lane
  std::vector<std::uint32_t> rxbuf(kLane + 1);
  for (int i = 0; i <= kLane; ++i)
    ASSERT_EQ(fi_recv(b_.ep, &rxbuf[i], sizeof(std::uint32_t), nullptr, FI_ADDR_UNSPEC, nullptr), 0);
  for (int i = 0; i < kLane; ++i) {
    const std::uint32_t v = 0x5100u + static_cast<std::uint32_t>(i);
    ASSERT_EQ(fi_send(a_.ep, &v, sizeof v, nullptr, a_to_b_, nullptr), 0) << i;
  }
  // the receiver consumes 100 ms from now (another thread; each domain has its own lock)
  int received = 0;
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    fi_cq_data_entry rx{};
    while (received < kLane + 1 && std::chrono::steady_clock::now() < end)
      if (fi_cq_read(b_.cq, &rx, 1) == 1) ++received;
  });
  const std::uint32_t v = 0x5100u + kLane;
  const ssize_t r = fi_send(a_.ep, &v, sizeof v, nullptr, a_to_b_, nullptr);
  late.join();
  EXPECT_EQ(r, 0) << "the 17th send was refused although the receiver consumed 100 ms later";
  EXPECT_EQ(received, kLane + 1);
  for (int i = 0; i <= kLane; ++i) EXPECT_EQ(rxbuf[i], 0x5100u + static_cast<std::uint32_t>(i));
  fi_cq_data_entry tx{};
  for (int i = 0; i <= kLane; ++i) ASSERT_EQ(read_one(a_.cq, &tx), 1);
}

TEST_F(ProviderPair, InjectHasNoCompletionAndArrives) {
  const char msg[] = "injected";
  char dst[32] = {};
  ASSERT_EQ(fi_recv(b_.ep, dst, sizeof dst, nullptr, FI_ADDR_UNSPEC, &rx_ctx_), 0);
  ASSERT_EQ(fi_inject(a_.ep, msg, sizeof msg, a_to_b_), 0);
  fi_cq_data_entry rx{};
  ASSERT_EQ(read_one(b_.cq, &rx), 1);
  EXPECT_EQ(rx.len, sizeof msg);
  EXPECT_STREQ(dst, msg);
  fi_cq_data_entry tx{};
  for (int i = 0; i < 50; ++i) ASSERT_EQ(fi_cq_read(a_.cq, &tx, 1), -FI_EAGAIN);
  // injectdata carries the data
  ASSERT_EQ(fi_recv(b_.ep, dst, sizeof dst, nullptr, FI_ADDR_UNSPEC, &rx_ctx_), 0);
  ASSERT_EQ(fi_injectdata(a_.ep, msg, 4, 0x1122334455667788ull, a_to_b_), 0);
  ASSERT_EQ(read_one(b_.cq, &rx), 1);
  EXPECT_EQ(rx.flags, FI_RECV | FI_MSG | FI_REMOTE_CQ_DATA);
  EXPECT_EQ(rx.data, 0x1122334455667788ull);
}

TEST_F(ProviderPair, SendDataSetsRemoteCqDataAndSendvRecvvGatherScatter) {
  char p1[] = "abc", p2[] = "defgh";
  iovec siov[2] = {{p1, 3}, {p2, 5}};
  char d1[4] = {}, d2[8] = {};
  iovec riov[2] = {{d1, 4}, {d2, 8}};
  ASSERT_EQ(fi_recvv(b_.ep, riov, nullptr, 2, FI_ADDR_UNSPEC, &rx_ctx_), 0);
  ASSERT_EQ(fi_sendv(a_.ep, siov, nullptr, 2, a_to_b_, &tx_ctx_), 0);
  fi_cq_data_entry rx{}, tx{};
  ASSERT_EQ(read_one(b_.cq, &rx), 1);
  ASSERT_EQ(read_one(a_.cq, &tx), 1);
  EXPECT_EQ(rx.len, 8u);
  EXPECT_EQ(std::string(d1, 4) + std::string(d2, 4), "abcdefgh");
  std::uint64_t v = 42, got = 0;
  ASSERT_EQ(fi_recv(b_.ep, &got, sizeof got, nullptr, FI_ADDR_UNSPEC, &rx_ctx_), 0);
  ASSERT_EQ(fi_senddata(a_.ep, &v, sizeof v, nullptr, 0xfeedull, a_to_b_, &tx_ctx_), 0);
  ASSERT_EQ(read_one(b_.cq, &rx), 1);
  EXPECT_EQ(rx.flags & FI_REMOTE_CQ_DATA, FI_REMOTE_CQ_DATA);
  EXPECT_EQ(rx.data, 0xfeedull);
  EXPECT_EQ(got, 42u);
}

TEST_F(ProviderPair, TruncationIsAnErrorCompletionWithTheLostLength) {
  std::vector<std::uint8_t> src(100, 7), dst(10, 0);
  ASSERT_EQ(fi_recv(b_.ep, dst.data(), dst.size(), nullptr, FI_ADDR_UNSPEC, &rx_ctx_), 0);
  ASSERT_EQ(fi_send(a_.ep, src.data(), src.size(), nullptr, a_to_b_, &tx_ctx_), 0);
  fi_cq_data_entry rx{};
  ASSERT_EQ(read_one(b_.cq, &rx), -FI_EAVAIL);
  fi_cq_err_entry err{};
  ASSERT_EQ(fi_cq_readerr(b_.cq, &err, 0), 1);
  EXPECT_EQ(err.err, FI_ETRUNC);
  EXPECT_EQ(err.op_context, &rx_ctx_);
  EXPECT_EQ(err.len, 10u);
  EXPECT_EQ(err.olen, 90u);
  EXPECT_EQ(dst, std::vector<std::uint8_t>(10, 7));
  const char* s = fi_cq_strerror(b_.cq, err.prov_errno, err.err_data, nullptr, 0);
  EXPECT_NE(std::string(s).find("truncated"), std::string::npos) << s;
}

TEST_F(ProviderPair, CancelCompletesThePostedReceiveWithEcanceled) {
  char dst[8];
  ASSERT_EQ(fi_recv(b_.ep, dst, sizeof dst, nullptr, FI_ADDR_UNSPEC, &rx_ctx_), 0);
  EXPECT_EQ(fi_cancel(&b_.ep->fid, &tx_ctx_), -FI_ENOENT);
  ASSERT_EQ(fi_cancel(&b_.ep->fid, &rx_ctx_), 0);
  fi_cq_data_entry rx{};
  ASSERT_EQ(read_one(b_.cq, &rx), -FI_EAVAIL);
  fi_cq_err_entry err{};
  ASSERT_EQ(fi_cq_readerr(b_.cq, &err, 0), 1);
  EXPECT_EQ(err.err, FI_ECANCELED);
  EXPECT_EQ(err.op_context, &rx_ctx_);
  EXPECT_EQ(fi_cq_readerr(b_.cq, &err, 0), -FI_EAGAIN);
}

TEST_F(ProviderPair, AvInsertLookupStraddrRemove) {
  std::vector<std::uint8_t> out(kAddrLen + 8);
  std::size_t len = out.size();
  ASSERT_EQ(fi_av_lookup(a_.av, a_to_b_, out.data(), &len), 0);
  EXPECT_EQ(len, kAddrLen);
  EXPECT_TRUE(std::equal(b_.addr.begin(), b_.addr.end(), out.begin()));
  char buf[128];
  std::size_t blen = sizeof buf;
  fi_av_straddr(a_.av, b_.addr.data(), buf, &blen);
  EXPECT_EQ(std::string(buf).rfind("npo://fabric2/window", 0), 0u) << buf;  // card 1 has fabric ID 2
  EXPECT_EQ(blen, std::strlen(buf) + 1);
  // garbage is refused per address, with FI_SYNC_ERR codes
  std::vector<std::uint8_t> two(2 * kAddrLen, 0x5a);
  std::memcpy(two.data() + kAddrLen, b_.addr.data(), kAddrLen);
  fi_addr_t fa[2];
  int errs[2] = {99, 99};
  EXPECT_EQ(fi_av_insert(a_.av, two.data(), 2, fa, FI_SYNC_ERR, errs), 1);
  EXPECT_EQ(fa[0], FI_ADDR_NOTAVAIL);
  EXPECT_NE(errs[0], 0);
  EXPECT_EQ(errs[1], 0);
  EXPECT_NE(fa[1], FI_ADDR_NOTAVAIL);
  // removed: lookup and send refuse it
  ASSERT_EQ(fi_av_remove(a_.av, &fa[1], 1, 0), 0);
  len = out.size();
  EXPECT_EQ(fi_av_lookup(a_.av, fa[1], out.data(), &len), -FI_ENOENT);
  char c = 1;
  EXPECT_EQ(fi_send(a_.ep, &c, 1, nullptr, fa[1], nullptr), -FI_EINVAL);
  // the original entry still works
  round_trip(16);
}

TEST_F(ProviderPair, APeerWhoseWindowIsRevokedDropsDatagramsThenRaisesAnEqErrorNamingTheCards) {
  // DGRAM semantics: a datagram the fabric cannot deliver is dropped and its send completes
  // (ofi_rxd retransmits); the drop is counted; a peer that keeps failing for FI_NPO_FAULT_MS
  // (2 s here) is a fault reported on the EQ (FI_NPO_FAULT=report, the default outside a job).
  ::setenv("FI_NPO_FAULT_MS", "2000", 1);
  fid_eq* eq = nullptr;
  fi_eq_attr eq_attr{};
  ASSERT_EQ(fi_eq_open(a_.fabric, &eq_attr, &eq, nullptr), 0);
  ASSERT_EQ(fi_ep_bind(a_.ep, &eq->fid, 0), 0);
  ASSERT_EQ(fi_close(&b_.ep->fid), 0);  // b's ring window is revoked
  b_.ep = nullptr;
  const fi_npo_dma_counters before = dma_counters(a_.domain);
  char c = 1;
  ASSERT_EQ(fi_send(a_.ep, &c, 1, nullptr, a_to_b_, &tx_ctx_), 0);
  fi_cq_data_entry tx{};
  ASSERT_EQ(read_one(a_.cq, &tx), 1);
  EXPECT_EQ(tx.op_context, &tx_ctx_);
  const fi_npo_dma_counters after = dma_counters(a_.domain);
  EXPECT_EQ(after.datagrams_dropped, before.datagrams_dropped + 1);
  EXPECT_GT(after.ops_failed, before.ops_failed);
  // keep sending: within 2 s + a bit the EQ holds the fault
  fi_eq_err_entry err{};
  ssize_t got = -FI_EAGAIN;
  const auto start = std::chrono::steady_clock::now();
  while (got == -FI_EAGAIN && std::chrono::steady_clock::now() - start < std::chrono::seconds(6)) {
    ASSERT_EQ(fi_send(a_.ep, &c, 1, nullptr, a_to_b_, &tx_ctx_), 0);
    ASSERT_EQ(read_one(a_.cq, &tx), 1);
    std::uint32_t event = 0;
    fi_eq_entry entry{};
    if (fi_eq_read(eq, &event, &entry, sizeof entry, 0) == -FI_EAVAIL) got = fi_eq_readerr(eq, &err, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const auto waited = std::chrono::steady_clock::now() - start;
  ::unsetenv("FI_NPO_FAULT_MS");
  ASSERT_EQ(got, static_cast<ssize_t>(sizeof err));
  EXPECT_GE(waited, std::chrono::milliseconds(1900));
  EXPECT_EQ(err.fid, &a_.ep->fid);
  EXPECT_EQ(err.err, FI_ECONNREFUSED);
  const std::string msg = fi_eq_strerror(eq, err.prov_errno, err.err_data, nullptr, 0);
  EXPECT_NE(msg.find("card 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("fabric id 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("window"), std::string::npos) << msg;
  ASSERT_EQ(fi_close(&a_.ep->fid), 0);
  a_.ep = nullptr;
  EXPECT_EQ(fi_close(&eq->fid), 0);
}

TEST_F(ProviderPair, TheCardsDmaCountersMoveWithTraffic) {
  // The first send to b reads b's ring first (sync_lane, docs/libfabric.md "Data path"): a
  // FENCE op, then its consumer counter of a's lane and the seq word of the lane's 16 slots,
  // 8 bytes each, in one batch (again if the batch timed out on a loaded machine), then
  // payload and header.
  const fi_npo_dma_counters first_a = dma_counters(a_.domain);
  round_trip(1000);
  const fi_npo_dma_counters before_a = dma_counters(a_.domain);
  const fi_npo_dma_counters before_b = dma_counters(b_.domain);
  const std::uint64_t batch_ops = before_a.ops_ok - first_a.ops_ok - 2u;
  EXPECT_GE(batch_ops, 18u);
  EXPECT_EQ(batch_ops % 18u, 0u);
  EXPECT_EQ(before_a.bytes_moved - first_a.bytes_moved - (1000u + 64u), batch_ops / 18u * 17u * 8u);
  for (int i = 0; i < 10; ++i) round_trip(1000);
  const fi_npo_dma_counters after_a = dma_counters(a_.domain);
  const fi_npo_dma_counters after_b = dma_counters(b_.domain);
  EXPECT_EQ(after_a.card, 0u);
  EXPECT_EQ(after_a.fabric_id, 1u);
  // per send: payload write, then the header write fenced, both OK; payload + header bytes moved
  EXPECT_EQ(after_a.ops_ok - before_a.ops_ok, 20u);
  EXPECT_EQ(after_a.bytes_moved - before_a.bytes_moved, 10u * (1000 + 64));
  EXPECT_EQ(after_a.ops_failed, before_a.ops_failed);
  EXPECT_EQ(after_b.ops_ok, before_b.ops_ok) << "the receiver's card only receives";
}

class ProviderFormats : public ProviderPair {
 protected:
  fi_cq_format format() const override { return GetParam(); }
};

TEST_P(ProviderFormats, EntryLayoutFollowsTheCqFormat) {
  std::uint64_t v = 0x55, got = 0;
  ASSERT_EQ(fi_recv(b_.ep, &got, sizeof got, nullptr, FI_ADDR_UNSPEC, &rx_ctx_), 0);
  ASSERT_EQ(fi_senddata(a_.ep, &v, sizeof v, nullptr, 0x77, a_to_b_, &tx_ctx_), 0);
  // a buffer of two DATA entries, filled with a marker: the entry must not write past its size
  struct {
    fi_cq_data_entry e;
    std::uint8_t guard[sizeof(fi_cq_data_entry)];
  } out;
  std::memset(&out, 0xcd, sizeof out);
  ASSERT_EQ(read_one(b_.cq, &out), 1);
  EXPECT_EQ(out.e.op_context, &rx_ctx_);
  const auto* bytes = reinterpret_cast<const std::uint8_t*>(&out);
  std::size_t size = 0;
  switch (GetParam()) {
    case FI_CQ_FORMAT_CONTEXT: size = sizeof(fi_cq_entry); break;
    case FI_CQ_FORMAT_MSG:
      size = sizeof(fi_cq_msg_entry);
      EXPECT_EQ(out.e.flags, FI_RECV | FI_MSG | FI_REMOTE_CQ_DATA);
      EXPECT_EQ(out.e.len, sizeof v);
      break;
    default:
      size = sizeof(fi_cq_data_entry);
      EXPECT_EQ(out.e.len, sizeof v);
      EXPECT_EQ(out.e.data, 0x77u);
      EXPECT_EQ(out.e.buf, &got);
      break;
  }
  EXPECT_EQ(bytes[size], 0xcd) << "entry larger than its format";
  EXPECT_EQ(got, v);
}
INSTANTIATE_TEST_SUITE_P(Formats, ProviderFormats,
                         ::testing::Values(FI_CQ_FORMAT_CONTEXT, FI_CQ_FORMAT_MSG, FI_CQ_FORMAT_DATA));

}  // namespace
