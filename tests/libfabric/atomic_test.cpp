// SPDX-License-Identifier: Apache-2.0
// FI_ATOMIC on the native FI_EP_RDM endpoint of the `npo` provider, in-process on emu:mesh8
// through the libfabric API only: getinfo offers it (also for Open MPI btl ofi's hints), the
// *valid queries and fi_query_atomic; every op x datatype of the three families (fi_atomic,
// fi_fetch_atomic, fi_compare_atomic) against a reference computed here (values that tell MIN
// from MAX, integer wrap-around), the fetched old values, CSWAP hit and miss; exact totals of
// concurrent fetch-adds from two initiators on one counter, also through two domains on one
// card; bad key / range / access refused with error entries and the memory untouched.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>
#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include "fi_fixture.hpp"

namespace {

using namespace npo_fi_test;

constexpr std::uint64_t kCaps = FI_RMA | FI_ATOMIC;

fi_info* atomic_hints() {
  fi_info* h = fi_allocinfo();
  h->ep_attr->type = FI_EP_RDM;
  h->caps = FI_ATOMIC | FI_RMA | FI_TAGGED | FI_MSG;
  h->domain_attr->av_type = FI_AV_TABLE;
  h->fabric_attr->prov_name = strdup("npo");
  return h;
}

void check_atomic(const fi_info* info, const std::string&) {
  ASSERT_STREQ(info->fabric_attr->prov_name, "npo");
  ASSERT_EQ(info->ep_attr->type, FI_EP_RDM);
  ASSERT_EQ(info->caps & kCaps, kCaps);
}

const SideOptions kSide{.hints = atomic_hints, .check_info = check_atomic};

// Issues an op, retrying -FI_EAGAIN while progressing `others`.
template <typename F>
void issue(F f, std::initializer_list<Side*> others) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  ssize_t r;
  while ((r = f()) == -FI_EAGAIN && std::chrono::steady_clock::now() < end)
    for (Side* s : others) progress(*s);
  ASSERT_EQ(r, 0) << fi_strerror(static_cast<int>(-r));
}

TEST(AtomicInfo, OfferedToBtlOfiHintsWithValidCountsAndUnsupportedCombinationsRefused) {
  use_provider();
  // Open MPI 4.1 btl ofi's hints (btl_ofi_component.c): FI_RMA | FI_ATOMIC, FI_CONTEXT(2),
  // mr_mode ALLOCATED | PROV_KEY | VIRT_ADDR offered, delivery complete, one iov
  fi_info* hints = fi_allocinfo();
  hints->caps = FI_RMA | FI_ATOMIC;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->ep_attr->type = FI_EP_RDM;
  hints->domain_attr->mr_mode = FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_VIRT_ADDR;
  hints->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
  hints->tx_attr->iov_limit = 1;
  hints->rx_attr->iov_limit = 1;
  hints->fabric_attr->prov_name = strdup("npo");
  fi_info* info = nullptr;
  ASSERT_EQ(fi_getinfo(FI_VERSION(1, 5), nullptr, nullptr, 0, hints, &info), 0);
  ASSERT_STREQ(info->fabric_attr->prov_name, "npo");
  EXPECT_EQ(info->ep_attr->type, FI_EP_RDM);
  EXPECT_EQ(info->caps & (kCaps | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE),
            kCaps | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE);
  EXPECT_EQ(info->domain_attr->mr_mode, 0) << "offsets, keys of the application (btl ofi passes base offsets)";
  fi_freeinfo(info);
  fi_freeinfo(hints);

  Side s;
  s.open(0, kSide);
  ASSERT_NE(s.ep, nullptr);
  std::size_t count = 0;
  EXPECT_EQ(fi_atomicvalid(s.ep, FI_UINT64, FI_SUM, &count), 0);
  EXPECT_EQ(count, 128u);
  EXPECT_EQ(fi_atomicvalid(s.ep, FI_INT8, FI_BXOR, &count), 0);
  EXPECT_EQ(count, 1024u);
  EXPECT_EQ(fi_fetch_atomicvalid(s.ep, FI_DOUBLE, FI_ATOMIC_READ, &count), 0);
  EXPECT_EQ(count, 128u);
  EXPECT_EQ(fi_compare_atomicvalid(s.ep, FI_UINT32, FI_CSWAP, &count), 0);
  EXPECT_EQ(count, 256u);
  EXPECT_EQ(fi_compare_atomicvalid(s.ep, FI_UINT16, FI_MSWAP, &count), 0);
  // not offered: bitwise ops on floating point, a read without fetch, compare ops elsewhere,
  // types the provider does not implement
  EXPECT_EQ(fi_atomicvalid(s.ep, FI_FLOAT, FI_BOR, &count), -FI_EOPNOTSUPP);
  EXPECT_EQ(fi_atomicvalid(s.ep, FI_UINT64, FI_ATOMIC_READ, &count), -FI_EOPNOTSUPP);
  EXPECT_EQ(fi_fetch_atomicvalid(s.ep, FI_UINT64, FI_CSWAP, &count), -FI_EOPNOTSUPP);
  EXPECT_EQ(fi_compare_atomicvalid(s.ep, FI_UINT64, FI_SUM, &count), -FI_EOPNOTSUPP);
  EXPECT_EQ(fi_compare_atomicvalid(s.ep, FI_DOUBLE, FI_MSWAP, &count), -FI_EOPNOTSUPP);
  EXPECT_EQ(fi_atomicvalid(s.ep, FI_LONG_DOUBLE, FI_SUM, &count), -FI_EOPNOTSUPP);
  EXPECT_EQ(fi_atomicvalid(s.ep, FI_DOUBLE_COMPLEX, FI_SUM, &count), -FI_EOPNOTSUPP);
  // the domain's query says the same
  fi_atomic_attr attr{};
  EXPECT_EQ(fi_query_atomic(s.domain, FI_INT16, FI_PROD, &attr, 0), 0);
  EXPECT_EQ(attr.size, 2u);
  EXPECT_EQ(attr.count, 512u);
  EXPECT_EQ(fi_query_atomic(s.domain, FI_UINT64, FI_SUM, &attr, FI_FETCH_ATOMIC), 0);
  EXPECT_EQ(attr.size, 8u);
  EXPECT_EQ(fi_query_atomic(s.domain, FI_INT64, FI_CSWAP_GT, &attr, FI_COMPARE_ATOMIC), 0);
  EXPECT_EQ(fi_query_atomic(s.domain, FI_FLOAT, FI_BAND, &attr, 0), -FI_EOPNOTSUPP);
  EXPECT_EQ(fi_query_atomic(s.domain, FI_UINT64, FI_CSWAP, &attr, FI_FETCH_ATOMIC), -FI_EOPNOTSUPP);
  s.close();
}

// The one-sided op counters of a domain (fi_npo_domain_ops::op_counters).
fi_npo_op_counters op_counters(fid_domain* d) {
  fi_npo_domain_ops* ops = nullptr;
  fi_npo_op_counters c{};
  EXPECT_EQ(fi_open_ops(&d->fid, FI_NPO_DOMAIN_OPS_NAME, 0, reinterpret_cast<void**>(&ops), nullptr), 0);
  if (ops) {
    EXPECT_GE(ops->size, sizeof(fi_npo_domain_ops));
    EXPECT_EQ(ops->op_counters(d, &c), 0);
  }
  return c;
}

// ---- The reference --------------------------------------------------------------------
constexpr std::size_t kN = 5;  // elements per atomic

template <typename T>
T ref_one(int op, T cur, T v, T c) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    const std::uint64_t a = static_cast<U>(cur), b = static_cast<U>(v);
    switch (op) {
      case FI_SUM: return static_cast<T>(static_cast<U>(a + b));
      case FI_PROD: return static_cast<T>(static_cast<U>(a * b));
      case FI_BOR: return static_cast<T>(cur | v);
      case FI_BAND: return static_cast<T>(cur & v);
      case FI_BXOR: return static_cast<T>(cur ^ v);
      case FI_MSWAP: return static_cast<T>((v & c) | (cur & ~c));
      default: break;
    }
  } else {
    if (op == FI_SUM) return cur + v;
    if (op == FI_PROD) return cur * v;
  }
  switch (op) {
    case FI_MIN: return std::min(cur, v);
    case FI_MAX: return std::max(cur, v);
    case FI_LOR: return (cur != 0 || v != 0) ? T(1) : T(0);
    case FI_LAND: return (cur != 0 && v != 0) ? T(1) : T(0);
    case FI_LXOR: return ((cur != 0) != (v != 0)) ? T(1) : T(0);
    case FI_ATOMIC_WRITE: return v;
    case FI_ATOMIC_READ: return cur;
    case FI_CSWAP: return c == cur ? v : cur;
    case FI_CSWAP_NE: return c != cur ? v : cur;
    case FI_CSWAP_LE: return c <= cur ? v : cur;
    case FI_CSWAP_LT: return c < cur ? v : cur;
    case FI_CSWAP_GE: return c >= cur ? v : cur;
    case FI_CSWAP_GT: return c > cur ? v : cur;
    default: ADD_FAILURE() << "no reference for op " << op; return cur;
  }
}

class Atomic : public SidePair<> {
 protected:
  Atomic() : SidePair(kSide) {}

  // One datatype: every op of each family on kN elements at byte 16 of a registered region
  // (offset addressing) of b, checked against ref_one; the fetched values are the old ones.
  template <typename T>
  void sweep(fi_datatype dt, std::size_t* ops_done) {
    constexpr bool kFloat = std::is_floating_point_v<T>;
    const T mx = std::numeric_limits<T>::max();
    // MIN/MAX differ on every element; max + 2 and max * 2 wrap for integers; zeros for the
    // logical ops; compare values hit elements 0, 2, 4 and miss 1, 3
    const std::array<T, kN> init{T(5), static_cast<T>(-3), mx, T(0), T(0)};
    const std::array<T, kN> operand{T(7), T(2), T(2), T(0), T(3)};
    const std::array<T, kN> compare{T(5), T(1), mx, T(1), T(0)};
    std::vector<std::uint8_t> region(16 + sizeof(T) * kN + 16, 0xa5);
    fid_mr* mr = nullptr;
    ASSERT_EQ(fi_mr_reg(b_.domain, region.data(), region.size(), FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0xa70 + dt, 0,
                        &mr, nullptr),
              0);
    const std::uint64_t key = fi_mr_key(mr);
    T* target = reinterpret_cast<T*>(region.data() + 16);
    std::vector<int> plain{FI_MIN, FI_MAX, FI_SUM, FI_PROD, FI_LOR, FI_LAND, FI_LXOR, FI_ATOMIC_WRITE};
    std::vector<int> compares{FI_CSWAP, FI_CSWAP_NE, FI_CSWAP_LE, FI_CSWAP_LT, FI_CSWAP_GE, FI_CSWAP_GT};
    if (!kFloat) {
      for (int op : {FI_BOR, FI_BAND, FI_BXOR}) plain.push_back(op);
      compares.push_back(FI_MSWAP);
    }
    std::vector<int> fetch = plain;
    fetch.push_back(FI_ATOMIC_READ);
    for (int family = 0; family < 3; ++family) {
      for (int op : family == 0 ? plain : family == 1 ? fetch : compares) {
        SCOPED_TRACE("datatype " + std::to_string(dt) + " op " + std::to_string(op) + " family " +
                     std::to_string(family));
        std::memcpy(target, init.data(), sizeof init);
        std::array<T, kN> result{};
        std::fill(result.begin(), result.end(), T(99));
        int ctx = 0;
        issue(
            [&] {
              if (family == 0)
                return fi_atomic(a_.ep, operand.data(), kN, nullptr, a_to_b_, 16, key, dt, static_cast<fi_op>(op),
                                 &ctx);
              if (family == 1)
                return fi_fetch_atomic(a_.ep, operand.data(), kN, nullptr, result.data(), nullptr, a_to_b_, 16, key, dt,
                                       static_cast<fi_op>(op), &ctx);
              return fi_compare_atomic(a_.ep, operand.data(), kN, nullptr, compare.data(), nullptr, result.data(),
                                       nullptr, a_to_b_, 16, key, dt, static_cast<fi_op>(op), &ctx);
            },
            {&b_});
        const Entry e = wait_entry(a_, b_);
        ASSERT_FALSE(e.error) << fi_strerror(e.err.err);
        EXPECT_EQ(e.e.op_context, &ctx);
        EXPECT_EQ(e.e.flags, FI_ATOMIC | (family == 0 ? FI_WRITE : FI_READ));
        for (std::size_t i = 0; i < kN; ++i) {
          T want = ref_one<T>(op, init[i], operand[i], compare[i]);
          T got{};
          std::memcpy(&got, reinterpret_cast<std::uint8_t*>(target) + i * sizeof(T), sizeof(T));
          EXPECT_EQ(got, want) << "element " << i;
          if (family != 0) {
            EXPECT_EQ(result[i], init[i]) << "fetched element " << i;
          }
        }
        EXPECT_TRUE(std::all_of(region.begin(), region.begin() + 16, [](std::uint8_t b) { return b == 0xa5; }));
        EXPECT_TRUE(std::all_of(region.end() - 16, region.end(), [](std::uint8_t b) { return b == 0xa5; }));
        ++*ops_done;
      }
    }
    EXPECT_EQ(fi_close(&mr->fid), 0);
  }
};

TEST_F(Atomic, EveryOpAndDatatypeMatchesTheReferenceAndFetchesTheOldValues) {
  std::size_t ops = 0;
  sweep<std::int8_t>(FI_INT8, &ops);
  sweep<std::uint8_t>(FI_UINT8, &ops);
  sweep<std::int16_t>(FI_INT16, &ops);
  sweep<std::uint16_t>(FI_UINT16, &ops);
  sweep<std::int32_t>(FI_INT32, &ops);
  sweep<std::uint32_t>(FI_UINT32, &ops);
  sweep<std::int64_t>(FI_INT64, &ops);
  sweep<std::uint64_t>(FI_UINT64, &ops);
  sweep<float>(FI_FLOAT, &ops);
  sweep<double>(FI_DOUBLE, &ops);
  // 8 integer types x (11 + 12 + 7) + 2 floating types x (8 + 9 + 6)
  EXPECT_EQ(ops, 8u * 30 + 2u * 23);
  // the op counters saw every one of them on both sides, and no RMA
  const fi_npo_op_counters ia = op_counters(a_.domain), tb = op_counters(b_.domain);
  EXPECT_EQ(ia.atomics, ops);
  EXPECT_EQ(tb.target_atomics, ops);
  EXPECT_EQ(ia.target_atomics + tb.atomics + ia.rma_writes + ia.rma_reads + tb.target_rma_writes, 0u);
}

TEST_F(Atomic, CswapHitSwapsMissLeavesAndBothFetchTheOldValueAndSumWrapsAround) {
  std::uint64_t word = 41;
  fid_mr* mr = nullptr;
  ASSERT_EQ(fi_mr_reg(b_.domain, &word, sizeof word, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 7, 0, &mr, nullptr), 0);
  auto cswap = [&](std::uint64_t cmp, std::uint64_t val) {
    std::uint64_t old = 0;
    int ctx = 0;
    issue(
        [&] {
          return fi_compare_atomic(a_.ep, &val, 1, nullptr, &cmp, nullptr, &old, nullptr, a_to_b_, 0, 7, FI_UINT64,
                                   FI_CSWAP, &ctx);
        },
        {&b_});
    const Entry e = wait_entry(a_, b_);
    EXPECT_FALSE(e.error);
    return old;
  };
  EXPECT_EQ(cswap(40, 1000), 41u);  // miss
  EXPECT_EQ(word, 41u);
  EXPECT_EQ(cswap(41, 1000), 41u);  // hit
  EXPECT_EQ(word, 1000u);
  // fetch-add wraps: UINT64_MAX - 999 + 1000 = 0 (mod 2^64), the old value comes back
  std::uint64_t add = std::numeric_limits<std::uint64_t>::max() - 999, old = 0;
  int ctx = 0;
  issue([&] { return fi_fetch_atomic(a_.ep, &add, 1, nullptr, &old, nullptr, a_to_b_, 0, 7, FI_UINT64, FI_SUM, &ctx); },
        {&b_});
  EXPECT_FALSE(wait_entry(a_, b_).error);
  EXPECT_EQ(old, 1000u);
  EXPECT_EQ(word, 999u + 1000u - 1000u - 999u);
  // inject: no completion, the value lands (seen by a fetch behind it: one sender is ordered)
  const std::uint64_t five = 5;
  issue([&] { return fi_inject_atomic(a_.ep, &five, 1, a_to_b_, 0, 7, FI_UINT64, FI_SUM); }, {&b_});
  issue(
      [&] {
        return fi_fetch_atomic(a_.ep, nullptr, 1, nullptr, &old, nullptr, a_to_b_, 0, 7, FI_UINT64, FI_ATOMIC_READ,
                               &ctx);
      },
      {&b_});
  const Entry r = wait_entry(a_, b_);
  EXPECT_FALSE(r.error);
  EXPECT_EQ(r.e.op_context, &ctx) << "the inject produced a completion";
  EXPECT_EQ(old, 5u);
  EXPECT_EQ(fi_close(&mr->fid), 0);
}

TEST_F(Atomic, VectoredAndMsgFormsGatherOperandsAndScatterResultsAndRemoteCqDataArrives) {
  std::array<std::uint32_t, 6> target{1, 2, 3, 4, 5, 6};
  fid_mr* mr = nullptr;
  ASSERT_EQ(fi_mr_reg(b_.domain, target.data(), sizeof target, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 9, 0, &mr, nullptr),
            0);
  // fi_fetch_atomicv: operands from two iocs (2 + 4 elements), old values into three (1 + 2 + 3)
  std::array<std::uint32_t, 2> op_a{10, 20};
  std::array<std::uint32_t, 4> op_b{30, 40, 50, 60};
  fi_ioc src[2] = {{op_a.data(), 2}, {op_b.data(), 4}};
  std::array<std::uint32_t, 1> r1{};
  std::array<std::uint32_t, 2> r2{};
  std::array<std::uint32_t, 3> r3{};
  fi_ioc res[3] = {{r1.data(), 1}, {r2.data(), 2}, {r3.data(), 3}};
  int ctx = 0;
  issue(
      [&] { return fi_fetch_atomicv(a_.ep, src, nullptr, 2, res, nullptr, 3, a_to_b_, 0, 9, FI_UINT32, FI_SUM, &ctx); },
      {&b_});
  Entry e = wait_entry(a_, b_);
  ASSERT_FALSE(e.error) << fi_strerror(e.err.err);
  EXPECT_EQ(target, (std::array<std::uint32_t, 6>{11, 22, 33, 44, 55, 66}));
  EXPECT_EQ(r1[0], 1u);
  EXPECT_EQ(r2, (std::array<std::uint32_t, 2>{2, 3}));
  EXPECT_EQ(r3, (std::array<std::uint32_t, 3>{4, 5, 6}));
  // fi_compare_atomicmsg (CSWAP_GT: compare > target) on elements 2..3 at offset 8, with remote CQ data
  std::array<std::uint32_t, 2> val{7, 8}, cmp{40, 40}, old{};
  fi_ioc vi{val.data(), 2}, ci{cmp.data(), 2}, oi{old.data(), 2};
  fi_rma_ioc rma{8, 2, 9};
  fi_msg_atomic msg{};
  msg.msg_iov = &vi;
  msg.iov_count = 1;
  msg.addr = a_to_b_;
  msg.rma_iov = &rma;
  msg.rma_iov_count = 1;
  msg.datatype = FI_UINT32;
  msg.op = FI_CSWAP_GT;
  msg.context = &ctx;
  msg.data = 0xda7a;
  issue([&] { return fi_compare_atomicmsg(a_.ep, &msg, &ci, nullptr, 1, &oi, nullptr, 1, FI_REMOTE_CQ_DATA); }, {&b_});
  e = wait_entry(a_, b_);
  ASSERT_FALSE(e.error) << fi_strerror(e.err.err);
  EXPECT_EQ(e.e.flags, FI_ATOMIC | FI_READ);
  EXPECT_EQ(old, (std::array<std::uint32_t, 2>{33, 44}));
  EXPECT_EQ(target, (std::array<std::uint32_t, 6>{11, 22, 7, 44, 55, 66})) << "40 > 33 swaps, 40 > 44 does not";
  const Entry rx = wait_entry(b_, a_);
  ASSERT_FALSE(rx.error);
  EXPECT_EQ(rx.e.flags, FI_ATOMIC | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA);
  EXPECT_EQ(rx.e.data, 0xda7au);
  // fi_atomicmsg with FI_INJECT: no completion; a read behind it sees the write
  const std::uint32_t w = 0xabcd;
  fi_ioc wi{const_cast<std::uint32_t*>(&w), 1};
  fi_rma_ioc last{20, 1, 9};
  msg.msg_iov = &wi;
  msg.rma_iov = &last;
  msg.op = FI_ATOMIC_WRITE;
  issue([&] { return fi_atomicmsg(a_.ep, &msg, FI_INJECT); }, {&b_});
  std::uint32_t seen = 0;
  issue(
      [&] {
        return fi_fetch_atomic(a_.ep, nullptr, 1, nullptr, &seen, nullptr, a_to_b_, 20, 9, FI_UINT32, FI_ATOMIC_READ,
                               &ctx);
      },
      {&b_});
  e = wait_entry(a_, b_);
  ASSERT_FALSE(e.error);
  EXPECT_EQ(e.e.op_context, &ctx);
  EXPECT_EQ(seen, 0xabcdu);
  EXPECT_EQ(target[5], 0xabcdu);
  EXPECT_EQ(fi_close(&mr->fid), 0);
}

TEST_F(Atomic, BadKeyRangeAccessAndOpAreRefusedAndTheMemoryIsUntouched) {
  std::vector<std::uint64_t> buf(16, 0x5a5a5a5a5a5a5a5aull);
  const std::vector<std::uint64_t> before = buf;
  std::uint64_t* region = buf.data() + 4;  // 8 words registered in the middle
  fid_mr *rw = nullptr, *ro = nullptr, *wo = nullptr;
  ASSERT_EQ(fi_mr_reg(b_.domain, region, 64, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 200, 0, &rw, nullptr), 0);
  ASSERT_EQ(fi_mr_reg(b_.domain, region, 64, FI_REMOTE_READ, 0, 201, 0, &ro, nullptr), 0);
  ASSERT_EQ(fi_mr_reg(b_.domain, region, 64, FI_REMOTE_WRITE, 0, 202, 0, &wo, nullptr), 0);
  struct Case {
    const char* what;
    int family;  // 0 atomic, 1 fetch, 2 compare
    std::uint64_t addr, key;
    std::size_t count;
    int err;
  };
  const Case cases[] = {
      {"bad key", 0, 0, 999, 1, FI_EKEYREJECTED},
      {"bad key, fetch", 1, 0, 999, 1, FI_EKEYREJECTED},
      {"past the end", 0, 60, 200, 1, FI_EINVAL},
      {"straddles the end", 1, 56, 200, 2, FI_EINVAL},
      {"far out of range", 2, ~std::uint64_t{0} - 3, 200, 1, FI_EINVAL},
      {"write into a read-only MR", 0, 0, 201, 1, FI_EACCES},
      {"fetch-add on a read-only MR", 1, 0, 201, 1, FI_EACCES},
      {"fetch-add on a write-only MR", 1, 0, 202, 1, FI_EACCES},
      {"compare on a write-only MR", 2, 0, 202, 1, FI_EACCES},
  };
  std::array<std::uint64_t, 2> v{1, 1}, c{0x5a5a5a5a5a5a5a5aull, 0}, res{77, 77};
  for (const Case& k : cases) {
    SCOPED_TRACE(k.what);
    int ctx = 0;
    issue(
        [&] {
          if (k.family == 0)
            return fi_atomic(a_.ep, v.data(), k.count, nullptr, a_to_b_, k.addr, k.key, FI_UINT64, FI_SUM, &ctx);
          if (k.family == 1)
            return fi_fetch_atomic(a_.ep, v.data(), k.count, nullptr, res.data(), nullptr, a_to_b_, k.addr, k.key,
                                   FI_UINT64, FI_SUM, &ctx);
          return fi_compare_atomic(a_.ep, v.data(), k.count, nullptr, c.data(), nullptr, res.data(), nullptr, a_to_b_,
                                   k.addr, k.key, FI_UINT64, FI_CSWAP, &ctx);
        },
        {&b_});
    const Entry e = wait_entry(a_, b_);
    ASSERT_TRUE(e.error) << "the atomic succeeded";
    EXPECT_EQ(e.err.err, k.err) << fi_strerror(e.err.err);
    EXPECT_EQ(e.err.op_context, &ctx);
    EXPECT_EQ(e.err.flags, FI_ATOMIC | (k.family == 0 ? FI_WRITE : FI_READ));
    EXPECT_EQ(buf, before) << "target memory changed";
    EXPECT_EQ(res[0], 77u) << "a refused fetch delivered data";
  }
  // refused at the call: unsupported combination, too many elements, a read without fetch
  double d = 1;
  EXPECT_EQ(fi_atomic(a_.ep, &d, 1, nullptr, a_to_b_, 0, 200, FI_DOUBLE, FI_BOR, nullptr), -FI_EOPNOTSUPP);
  EXPECT_EQ(fi_atomic(a_.ep, &d, 1, nullptr, a_to_b_, 0, 200, FI_UINT64, FI_ATOMIC_READ, nullptr), -FI_EOPNOTSUPP);
  std::vector<std::uint64_t> big(129, 1);
  EXPECT_EQ(fi_atomic(a_.ep, big.data(), big.size(), nullptr, a_to_b_, 0, 200, FI_UINT64, FI_SUM, nullptr),
            -FI_EMSGSIZE);
  EXPECT_EQ(buf, before);
  // still works: the last word of the region
  int ctx = 0;
  issue([&] { return fi_atomic(a_.ep, v.data(), 1, nullptr, a_to_b_, 56, 200, FI_UINT64, FI_SUM, &ctx); }, {&b_});
  EXPECT_FALSE(wait_entry(a_, b_).error);
  EXPECT_EQ(region[7], 0x5a5a5a5a5a5a5a5bull);
  EXPECT_EQ(buf[12], before[12]);
  for (fid_mr* m : {rw, ro, wo}) EXPECT_EQ(fi_close(&m->fid), 0);
}

// Two initiator threads (cards 0 and 2, each its own domain) fetch-add 1 onto one counter;
// the targets (progressed by their own threads) are `t1` and `t2` (the same endpoint, or two
// domains on one card with the counter registered in both). Every old value 0..2N-1 comes back
// exactly once and the counter ends at 2N.
void concurrent_fetch_add(Side& t1, Side& t2, bool two_targets) {
  constexpr unsigned kPerInitiator = 200;
  Side i1, i2;
  i1.open(0, kSide);
  i2.open(2, kSide);
  ASSERT_NE(i1.ep, nullptr);
  ASSERT_NE(i2.ep, nullptr);
  std::uint64_t counter = 0;
  fid_mr *m1 = nullptr, *m2 = nullptr;
  ASSERT_EQ(fi_mr_reg(t1.domain, &counter, 8, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 300, 0, &m1, nullptr), 0);
  if (two_targets) {
    ASSERT_EQ(fi_mr_reg(t2.domain, &counter, 8, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 300, 0, &m2, nullptr), 0);
  }
  const fi_addr_t d1 = i1.insert(t1);
  const fi_addr_t d2 = i2.insert(t2);
  std::atomic<bool> stop{false};
  std::vector<std::thread> progressors;
  progressors.emplace_back([&] {
    while (!stop.load()) progress(t1);
  });
  if (two_targets) {
    progressors.emplace_back([&] {
      while (!stop.load()) progress(t2);
    });
  }
  std::vector<std::uint64_t> got1(kPerInitiator, ~0ull), got2(kPerInitiator, ~0ull);
  std::atomic<unsigned> failures{0};
  auto run = [&](Side& s, fi_addr_t dest, std::vector<std::uint64_t>& got) {
    const std::uint64_t one = 1;
    for (unsigned k = 0; k < kPerInitiator; ++k) {
      const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      ssize_t r;
      while ((r = fi_fetch_atomic(s.ep, &one, 1, nullptr, &got[k], nullptr, dest, 0, 300, FI_UINT64, FI_SUM,
                                  nullptr)) == -FI_EAGAIN &&
             std::chrono::steady_clock::now() < end) {
      }
      if (r != 0) {
        failures.fetch_add(1);
        return;
      }
      fi_cq_tagged_entry e{};
      ssize_t n;
      while ((n = fi_cq_read(s.cq, &e, 1)) == -FI_EAGAIN && std::chrono::steady_clock::now() < end) {
      }
      if (n != 1) {
        failures.fetch_add(1);
        return;
      }
    }
  };
  std::thread a([&] { run(i1, d1, got1); });
  std::thread b([&] { run(i2, d2, got2); });
  a.join();
  b.join();
  stop.store(true);
  for (auto& t : progressors) t.join();
  EXPECT_EQ(failures.load(), 0u);
  EXPECT_EQ(counter, 2u * kPerInitiator);
  std::set<std::uint64_t> seen(got1.begin(), got1.end());
  seen.insert(got2.begin(), got2.end());
  EXPECT_EQ(seen.size(), 2u * kPerInitiator) << "an old value came back twice";
  EXPECT_EQ(*seen.begin(), 0u);
  EXPECT_EQ(*seen.rbegin(), 2u * kPerInitiator - 1);
  // each initiator saw its own values rise (its atomics are executed in order)
  EXPECT_TRUE(std::is_sorted(got1.begin(), got1.end()));
  EXPECT_TRUE(std::is_sorted(got2.begin(), got2.end()));
  EXPECT_EQ(fi_close(&m1->fid), 0);
  if (m2) {
    EXPECT_EQ(fi_close(&m2->fid), 0);
  }
  i1.close();
  i2.close();
}

TEST_F(Atomic, ConcurrentFetchAddsFromTwoInitiatorsGiveTheExactTotal) { concurrent_fetch_add(b_, b_, false); }

TEST_F(Atomic, TwoDomainsOnOneCardWorkAndTheirAtomicsOnSharedMemoryAreAtomicTogether) {
  // a second fabric + domain + endpoint on b's card (as Open MPI's btl ofi opens next to mtl ofi)
  Side b2;
  b2.open(1, kSide);
  ASSERT_NE(b2.ep, nullptr);
  EXPECT_EQ(b2.counters().card, b_.counters().card);
  EXPECT_NE(b2.addr, b_.addr) << "two endpoints on one card share an address";
  // both endpoints on the card still carry messages: a -> b and a -> b2 tagged sends
  const fi_addr_t a_to_b2 = a_.insert(b2);
  for (Side* t : {&b_, &b2}) {
    std::uint64_t in = 0, out = t == &b_ ? 11 : 22;
    ASSERT_EQ(fi_trecv(t->ep, &in, 8, nullptr, FI_ADDR_UNSPEC, 5, 0, nullptr), 0);
    issue([&] { return fi_tsend(a_.ep, &out, 8, nullptr, t == &b_ ? a_to_b_ : a_to_b2, 5, nullptr); }, {t});
    EXPECT_FALSE(wait_entry(*t, a_).error);
    EXPECT_FALSE(wait_entry(a_, *t).error);
    EXPECT_EQ(in, out);
  }
  concurrent_fetch_add(b_, b2, true);
  b2.close();
}

}  // namespace
