// SPDX-License-Identifier: Apache-2.0
// DMA conformance on the emulated card: every size class of copy (1, odd, unaligned,
// page-crossing, 64 B .. 64 MiB) in every direction with the data checked byte for byte;
// fills; scatter-gather; fence ordering; per-op status of a batch with a fault in the middle.
#include <chrono>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "common/dma_run.hpp"
#include "npo/hal/hal.hpp"

namespace {

using namespace std::chrono_literals;
using npo::DmaAddress;
using npo::OpCompletion;
using npo::OpStatus;

struct Env {
  std::unique_ptr<npo::System> sys;
  std::unique_ptr<npo::DmaQueue> q;
  std::unique_ptr<npo::MemoryRegion> a, b;
  npo::HbmRange h1{}, h2{};
  static constexpr std::size_t kMax = 64u << 20;
  Env() {
    sys = std::move(npo::System::open("emu:1?hbm=160M").value());
    auto& d = sys->device(0);
    q = std::move(d.open_queue({.engine = 0, .depth = 256}).value());
    a = std::move(npo::allocate_host_memory(d, kMax + 8192).value());
    b = std::move(npo::allocate_host_memory(d, kMax + 8192).value());
    h1 = npo::allocate_hbm(d, kMax + 8192).value();
    h2 = npo::allocate_hbm(d, kMax + 8192).value();
  }
};

Env& env() {
  static Env e;
  return e;
}

using npo_test::run;

void fill_random(std::byte* p, std::size_t n, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const std::uint64_t v = rng();
    std::memcpy(p + i, &v, 8);
  }
  for (; i < n; ++i) p[i] = static_cast<std::byte>(rng());
}

struct SizeCase {
  std::size_t size;
  std::size_t src_off;  // unaligned offsets
  std::size_t dst_off;
};

class CopySizes : public ::testing::TestWithParam<SizeCase> {};

// host -> HBM -> HBM -> host, each hop checked through the next; guard bytes around the
// destination must stay untouched.
TEST_P(CopySizes, EveryDirectionRoundTrips) {
  auto& e = env();
  const auto [size, so, doff] = GetParam();
  std::byte* src = e.a->bytes().data();
  std::byte* dst = e.b->bytes().data();
  fill_random(src + so, size, static_cast<unsigned>(size ^ so));
  std::memset(dst, 0xee, size + doff + 64);
  auto& q = *e.q;
  ASSERT_TRUE(q.enqueue_copy(DmaAddress::host(e.a->iova() + so), DmaAddress::hbm(e.h1.offset + doff), size));
  ASSERT_TRUE(q.enqueue_copy(DmaAddress::hbm(e.h1.offset + doff), DmaAddress::hbm(e.h2.offset + so), size));
  ASSERT_TRUE(q.enqueue_copy(DmaAddress::hbm(e.h2.offset + so), DmaAddress::host(e.b->iova() + doff), size));
  const auto c = run(q, 3);
  ASSERT_EQ(c.size(), 3u);
  for (const auto& x : c) {
    EXPECT_EQ(x.status, OpStatus::kOk) << npo::op_status_name(x.status);
    EXPECT_EQ(x.info, size);
  }
  ASSERT_EQ(std::memcmp(dst + doff, src + so, size), 0) << "size " << size;
  for (std::size_t i = 0; i < doff; ++i) ASSERT_EQ(dst[i], std::byte{0xee}) << "guard before, byte " << i;
  for (std::size_t i = 0; i < 64; ++i) ASSERT_EQ(dst[doff + size + i], std::byte{0xee}) << "guard after, byte " << i;
}

INSTANTIATE_TEST_SUITE_P(SizeClasses, CopySizes,
                         ::testing::Values(SizeCase{1, 0, 0}, SizeCase{1, 3, 5}, SizeCase{7, 1, 2}, SizeCase{63, 0, 1},
                                           SizeCase{64, 0, 0}, SizeCase{65, 7, 9}, SizeCase{4095, 1, 0},
                                           SizeCase{4096, 0, 0}, SizeCase{4096, 4000, 100},  // page-crossing both sides
                                           SizeCase{12289, 4093, 3}, SizeCase{65536, 0, 0}, SizeCase{1u << 20, 0, 0},
                                           SizeCase{(1u << 20) + 17, 11, 13}, SizeCase{16u << 20, 0, 0},
                                           SizeCase{64u << 20, 0, 0}),
                         [](const auto& p) {
                           return "s" + std::to_string(p.param.size) + "_o" + std::to_string(p.param.src_off) + "_" +
                                  std::to_string(p.param.dst_off);
                         });

TEST(DmaConformance, ZeroLengthIsRejectedAtEnqueue) {
  auto& e = env();
  const auto before = e.q->outstanding();
  auto r = e.q->enqueue_copy(DmaAddress::hbm(0), DmaAddress::hbm(64), 0);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), npo::Code::kInvalidArgument);
  EXPECT_EQ(e.q->outstanding(), before);  // nothing enqueued
}

TEST(DmaConformance, FillsOfOddSizesAndOffsets) {
  auto& e = env();
  std::byte* b = e.b->bytes().data();
  for (const std::size_t size : {1u, 3u, 8u, 13u, 4097u, 100000u}) {
    std::memset(b, 0, size + 32);
    ASSERT_TRUE(e.q->enqueue_fill(DmaAddress::host(e.b->iova() + 5), 0x8877665544332211ULL, size));
    const auto c = run(*e.q, 1);
    ASSERT_EQ(c.size(), 1u);
    ASSERT_EQ(c[0].status, OpStatus::kOk);
    EXPECT_EQ(b[4], std::byte{0});
    for (std::size_t i = 0; i < size; ++i) {
      ASSERT_EQ(static_cast<unsigned>(b[5 + i]), 0x11u + (i % 8) * 0x11u) << "size " << size << " byte " << i;
    }
    EXPECT_EQ(b[5 + size], std::byte{0});
  }
  // HBM fill, read back through a copy.
  ASSERT_TRUE(e.q->enqueue_fill(DmaAddress::hbm(e.h1.offset + 1), 0xa5a5a5a5a5a5a5a5ULL, 1000));
  ASSERT_TRUE(e.q->enqueue_copy(DmaAddress::hbm(e.h1.offset + 1), DmaAddress::host(e.b->iova()), 1000));
  ASSERT_EQ(run(*e.q, 2).size(), 2u);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(b[i], std::byte{0xa5});
}

TEST(DmaConformance, ScatterGatherIntoHbmAndHost) {
  auto& e = env();
  std::byte* a = e.a->bytes().data();
  std::byte* b = e.b->bytes().data();
  fill_random(a, 1u << 20, 99);
  // 16 pieces of varied sizes from scattered offsets, SG list at the end of `a`.
  auto* sg = reinterpret_cast<npo::SgEntry*>(a + (2u << 20));
  std::vector<std::byte> expect;
  std::uint32_t total = 0;
  for (int i = 0; i < 16; ++i) {
    const std::uint32_t off = static_cast<std::uint32_t>(i * 40000 + (i * 7) % 13);
    const std::uint32_t len = static_cast<std::uint32_t>(1 + i * 997);
    sg[i] = {e.a->iova() + off, len, 0};
    expect.insert(expect.end(), a + off, a + off + len);
    total += len;
  }
  ASSERT_TRUE(e.q->enqueue_gather(e.a->iova() + (2u << 20), 16, DmaAddress::hbm(e.h1.offset), total));
  ASSERT_TRUE(e.q->enqueue_copy(DmaAddress::hbm(e.h1.offset), DmaAddress::host(e.b->iova()), total));
  ASSERT_TRUE(e.q->enqueue_gather(e.a->iova() + (2u << 20), 16, DmaAddress::host(e.b->iova() + (4u << 20)), total));
  const auto c = run(*e.q, 3);
  ASSERT_EQ(c.size(), 3u);
  for (const auto& x : c) EXPECT_EQ(x.status, OpStatus::kOk);
  EXPECT_EQ(std::memcmp(b, expect.data(), total), 0);
  EXPECT_EQ(std::memcmp(b + (4u << 20), expect.data(), total), 0);
  // An SG list in unmapped memory: kSgError.
  ASSERT_TRUE(e.q->enqueue_gather(0x7000'0000'0000ULL, 2, DmaAddress::hbm(0), 10));
  EXPECT_EQ(run(*e.q, 1).at(0).status, OpStatus::kSgError);
}

TEST(DmaConformance, FenceOrdersAndGuardsAChain) {
  auto& e = env();
  std::byte* b = e.b->bytes().data();
  // Earlier tests on this queue left failures behind: one fence re-arms the latch.
  ASSERT_TRUE(e.q->enqueue_fence());
  ASSERT_EQ(run(*e.q, 1).size(), 1u);
  // copy -> fenced "signal" fill: the signal lands after the data, and only if it succeeded.
  fill_random(e.a->bytes().data(), 1u << 20, 5);
  std::memset(b, 0, 16);
  ASSERT_TRUE(e.q->enqueue_copy(DmaAddress::host(e.a->iova()), DmaAddress::host(e.b->iova() + 4096), 1u << 20));
  ASSERT_TRUE(e.q->enqueue_fence());
  ASSERT_TRUE(e.q->enqueue_fill(DmaAddress::host(e.b->iova()), 1, 8));
  auto c = run(*e.q, 3);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[1].status, OpStatus::kOk);
  EXPECT_EQ(c[2].status, OpStatus::kOk);
  EXPECT_EQ(b[0], std::byte{1});
  EXPECT_EQ(std::memcmp(b + 4096, e.a->bytes().data(), 1u << 20), 0);
  // Same chain with a failing copy: the fence is skipped, the signal still runs (not fenced
  // itself), and the following fence runs normally (the latch re-armed).
  std::memset(b, 0, 16);
  ASSERT_TRUE(e.q->enqueue_copy(DmaAddress::host(0x6000'0000'0000ULL), DmaAddress::host(e.b->iova() + 4096), 4096));
  ASSERT_TRUE(e.q->enqueue_fence());
  ASSERT_TRUE(e.q->enqueue_fence());
  c = run(*e.q, 3);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].status, OpStatus::kIommuFault);
  EXPECT_EQ(c[1].status, OpStatus::kFenceSkipped);
  EXPECT_EQ(c[2].status, OpStatus::kOk);
}

TEST(DmaConformance, FaultInTheMiddleOfABatchHasItsOwnStatus) {
  auto& e = env();
  std::byte* b = e.b->bytes().data();
  std::memset(b, 0, 64 * 32);
  std::vector<npo::OpHandle> hs;
  for (int i = 0; i < 32; ++i) {
    const std::uint64_t src = i == 13 ? 0x5000'0000'0000ULL : e.a->iova() + static_cast<std::uint64_t>(i) * 64;
    hs.push_back(e.q->enqueue_copy(DmaAddress::host(src), DmaAddress::host(e.b->iova() + i * 64), 64).value());
  }
  const auto c = run(*e.q, 32);
  ASSERT_EQ(c.size(), 32u);
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(c[i].handle, hs[i]);
    if (i == 13) {
      EXPECT_EQ(c[i].status, OpStatus::kIommuFault);
      EXPECT_EQ(c[i].info, 0x5000'0000'0000ULL);
      for (int k = 0; k < 64; ++k) EXPECT_EQ(b[13 * 64 + k], std::byte{0});
    } else {
      EXPECT_EQ(c[i].status, OpStatus::kOk) << i;
      EXPECT_EQ(std::memcmp(b + i * 64, e.a->bytes().data() + i * 64, 64), 0) << i;
    }
  }
}

}  // namespace
