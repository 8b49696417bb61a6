// SPDX-License-Identifier: Apache-2.0
// DMA mapping through both IOMMU APIs: validation before the kernel, the kernel's errnos
// mapped to codes (with the errno kept and the fix named), cleanup on close.
#include <cerrno>
#include <cstdlib>
#include <thread>

#include <gtest/gtest.h>

#include "rig.hpp"
#include "vfio/uapi.hpp"

namespace npo::vfio {
namespace {

using backend::DmaAccess;
using test::code_of;
using test::Rig;

constexpr std::uint64_t kPage = 4096;

struct Pages {
  explicit Pages(std::size_t n) : p(static_cast<std::byte*>(std::aligned_alloc(kPage, n * kPage))) {}
  ~Pages() { std::free(p); }
  std::byte* p;
};

class VfioDma : public ::testing::TestWithParam<IommuApi> {
 protected:
  unsigned long map_request() const { return GetParam() == IommuApi::kType1 ? uapi::kIommuMapDma : uapi::kIoasMap; }
  unsigned long unmap_request() const {
    return GetParam() == IommuApi::kType1 ? uapi::kIommuUnmapDma : uapi::kIoasUnmap;
  }
};

TEST_P(VfioDma, MapAndUnmapReachTheDevice) {
  Rig rig;
  Pages mem(8);
  auto o = rig.open(GetParam());
  ASSERT_NE(o.dev, nullptr);
  ASSERT_TRUE(o.dev->dma_map(mem.p, 0x100000, 4 * kPage, DmaAccess::kReadWrite).has_value());
  ASSERT_TRUE(o.dev->dma_map(mem.p + 4 * kPage, 0x200000, kPage, DmaAccess::kRead).has_value());
  ASSERT_TRUE(o.dev->dma_map(mem.p + 5 * kPage, 0x300000, kPage, DmaAccess::kWrite).has_value());
  EXPECT_EQ(rig.kernel->dma_mappings(), 3u);
  ASSERT_EQ(rig.dev.dma_log.size(), 3u);
  EXPECT_EQ(rig.dev.dma_log[0], "map 0x100000+0x4000 rw");
  EXPECT_EQ(rig.dev.dma_log[1], "map 0x200000+0x1000 r");
  EXPECT_EQ(rig.dev.dma_log[2], "map 0x300000+0x1000 w");
  ASSERT_TRUE(o.dev->dma_unmap(0x200000, kPage).has_value());
  EXPECT_EQ(rig.dev.dma_log.back(), "unmap 0x200000+0x1000");
  EXPECT_EQ(rig.kernel->dma_mappings(), 2u);
  // Closing the device unmaps what it mapped.
  o.dev.reset();
  EXPECT_EQ(rig.kernel->dma_mappings(), 0u);
}

TEST_P(VfioDma, ValidationHappensBeforeTheKernel) {
  Rig rig;
  rig.kernel->iova_ranges = {{0, 0xfedfffff}, {0xfef00000, 0xffffffffff}};
  Pages mem(4);
  auto o = rig.open(GetParam());
  ASSERT_NE(o.dev, nullptr);
  auto& d = *o.dev;
  const auto before = rig.kernel->ioctl_count(map_request());
  EXPECT_EQ(code_of(d.dma_map(mem.p + 1, 0x10000, kPage, DmaAccess::kRead)), Code::kInvalidArgument);
  EXPECT_EQ(code_of(d.dma_map(mem.p, 0x10008, kPage, DmaAccess::kRead)), Code::kInvalidArgument);
  EXPECT_EQ(code_of(d.dma_map(mem.p, 0x10000, 100, DmaAccess::kRead)), Code::kInvalidArgument);
  EXPECT_EQ(code_of(d.dma_map(mem.p, 0x10000, 0, DmaAccess::kRead)), Code::kInvalidArgument);
  EXPECT_EQ(code_of(d.dma_map(mem.p, 0xfee00000, kPage, DmaAccess::kRead)), Code::kOutOfRange) << "the MSI hole";
  EXPECT_EQ(code_of(d.dma_map(mem.p, 0xfedff000, 2 * kPage, DmaAccess::kRead)), Code::kOutOfRange) << "straddles";
  EXPECT_EQ(code_of(d.dma_map(mem.p, 0x10000000000, kPage, DmaAccess::kRead)), Code::kOutOfRange) << "past the end";
  EXPECT_EQ(code_of(d.dma_map(mem.p, ~std::uint64_t{0} - kPage + 1, 2 * kPage, DmaAccess::kRead)), Code::kOutOfRange);
  EXPECT_EQ(rig.kernel->ioctl_count(map_request()), before) << "no bad request reached the kernel";

  ASSERT_TRUE(d.dma_map(mem.p, 0x10000, 2 * kPage, DmaAccess::kReadWrite).has_value());
  EXPECT_EQ(code_of(d.dma_map(mem.p, 0x11000, 2 * kPage, DmaAccess::kRead)), Code::kAlreadyExists);
  EXPECT_EQ(code_of(d.dma_map(mem.p, 0xf000, 2 * kPage, DmaAccess::kRead)), Code::kAlreadyExists);
  EXPECT_EQ(code_of(d.dma_unmap(0x10000, kPage)), Code::kNotFound) << "unmaps need the exact mapping";
  EXPECT_EQ(code_of(d.dma_unmap(0x11000, kPage)), Code::kNotFound);
  EXPECT_EQ(code_of(d.dma_unmap(0x20000, kPage)), Code::kNotFound);
  EXPECT_TRUE(d.dma_map(mem.p + 2 * kPage, 0xfef00000, kPage, DmaAccess::kRead).has_value()) << "second range";
  EXPECT_TRUE(d.dma_unmap(0x10000, 2 * kPage).has_value());
  EXPECT_TRUE(d.dma_unmap(0xfef00000, kPage).has_value());
}

TEST_P(VfioDma, KernelErrnosMapToCodesAndNameTheFix) {
  Rig rig;
  Pages mem(2);
  auto o = rig.open(GetParam());
  ASSERT_NE(o.dev, nullptr);
  struct Case {
    int err;
    Code code;
    const char* says;
  };
  for (const Case c :
       {Case{ENOMEM, Code::kResourceExhausted, "RLIMIT_MEMLOCK"},
        Case{ENOSPC, Code::kResourceExhausted, "dma_entry_limit"}, Case{EINVAL, Code::kInvalidArgument, "refused"},
        Case{EFAULT, Code::kInvalidArgument, "not mapped"}, Case{EPERM, Code::kPermissionDenied, ""},
        Case{EEXIST, Code::kAlreadyExists, ""}, Case{ENODEV, Code::kUnavailable, "gone"},
        Case{EBUSY, Code::kUnavailable, ""}}) {
    SCOPED_TRACE(c.err);
    rig.kernel->fail_ioctl(map_request(), c.err);
    auto r = o.dev->dma_map(mem.p, 0x40000, kPage, DmaAccess::kReadWrite);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code(), c.code);
    EXPECT_EQ(r.error().sys_errno(), c.err);
    EXPECT_NE(r.error().message().find(c.says), std::string::npos) << r.error().message();
    EXPECT_NE(r.error().message().find(Rig::kBdf), std::string::npos) << "names the function";
  }
  EXPECT_EQ(rig.kernel->dma_mappings(), 0u) << "failed maps map nothing";
  EXPECT_TRUE(o.dev->dma_map(mem.p, 0x40000, kPage, DmaAccess::kReadWrite).has_value());

  rig.kernel->fail_ioctl(unmap_request(), EINVAL);
  auto u = o.dev->dma_unmap(0x40000, kPage);
  ASSERT_FALSE(u.has_value());
  EXPECT_EQ(u.error().code(), Code::kInvalidArgument);
  EXPECT_EQ(rig.kernel->dma_mappings(), 1u) << "the mapping is still there";
  EXPECT_TRUE(o.dev->dma_unmap(0x40000, kPage).has_value());
}

TEST_P(VfioDma, ManyMappingsAndConcurrentCallers) {
  Rig rig;
  constexpr unsigned kN = 64;
  Pages mem(kN);
  auto o = rig.open(GetParam());
  ASSERT_NE(o.dev, nullptr);
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      for (unsigned i = t; i < kN; i += 2) {
        EXPECT_TRUE(o.dev->dma_map(mem.p + i * kPage, 0x1000000 + i * kPage, kPage, DmaAccess::kRead).has_value());
      }
      for (unsigned i = t; i < kN; i += 2) EXPECT_TRUE(o.dev->dma_unmap(0x1000000 + i * kPage, kPage).has_value());
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(rig.kernel->dma_mappings(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Api, VfioDma, ::testing::Values(IommuApi::kType1, IommuApi::kIommufd), test::api_param_name);

}  // namespace
}  // namespace npo::vfio
