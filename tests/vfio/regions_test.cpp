// SPDX-License-Identifier: Apache-2.0
// Regions through both IOMMU APIs: config space, region info, MMIO over mmap and over
// pread/pwrite (whole BARs, sparse BARs, failed mmaps), apertures and their fds.
#include <linux/vfio.h>

#include <array>
#include <cerrno>
#include <cstring>

#include <gtest/gtest.h>

#include "rig.hpp"

namespace npo::vfio {
namespace {

using test::code_of;
using test::region_base;
using test::Rig;

class VfioRegions : public ::testing::TestWithParam<IommuApi> {};

template <typename T>
T load(const std::byte* p) {
  T v{};
  std::memcpy(&v, p, sizeof v);
  return v;
}

TEST_P(VfioRegions, RegionInfoFromTheKernelAndTheBarRegister) {
  Rig rig;
  auto o = rig.open(GetParam());
  ASSERT_NE(o.dev, nullptr);
  auto r0 = o.dev->region_info(0);
  ASSERT_TRUE(r0.has_value());
  EXPECT_EQ(r0->size, 64u << 10);
  EXPECT_TRUE(r0->is_64bit);
  EXPECT_FALSE(r0->prefetchable);
  EXPECT_FALSE(r0->mappable) << "registers are not an aperture, though VFIO lets us mmap them";
  auto r2 = o.dev->region_info(2);
  ASSERT_TRUE(r2.has_value());
  EXPECT_EQ(r2->size, 1u << 20);
  EXPECT_TRUE(r2->prefetchable);
  EXPECT_TRUE(r2->mappable);
  auto r4 = o.dev->region_info(4);
  ASSERT_TRUE(r4.has_value());
  EXPECT_FALSE(r4->mappable) << "sparse: the MSI-X table cannot be mapped";
  for (unsigned b : {1u, 3u, 5u}) EXPECT_EQ(o.dev->region_info(b)->size, 0u);
  EXPECT_EQ(code_of(o.dev->region_info(6)), Code::kInvalidArgument);
  const auto* sparse = o.vfio().region(4);
  ASSERT_NE(sparse, nullptr);
  EXPECT_TRUE(sparse->sparse);
  ASSERT_EQ(sparse->mmap_areas.size(), 1u);
  EXPECT_EQ(sparse->mmap_areas[0].offset, 8u << 10);
  EXPECT_EQ(o.vfio().region(7)->offset, region_base(7));
  EXPECT_EQ(o.vfio().region(8), nullptr);
}

TEST_P(VfioRegions, ConfigSpaceReadWrite) {
  Rig rig;
  auto o = rig.open(GetParam());
  ASSERT_NE(o.dev, nullptr);
  auto& d = *o.dev;
  std::array<std::byte, 4> id{};
  ASSERT_TRUE(d.config_read(0, id).has_value());
  EXPECT_EQ(load<std::uint32_t>(id.data()), 0x0a011ee7u);
  const std::array<std::byte, 2> cmd{std::byte{0x06}, std::byte{0x00}};
  ASSERT_TRUE(d.config_write(4, cmd).has_value());
  EXPECT_EQ(rig.dev.config()[4], std::byte{0x06});
  std::array<std::byte, 4096> all{};
  ASSERT_TRUE(d.config_read(0, all).has_value());
  EXPECT_EQ(all[4], std::byte{0x06});
  std::array<std::byte, 2> two{};
  EXPECT_EQ(code_of(d.config_read(4095, two)), Code::kOutOfRange);
  EXPECT_EQ(code_of(d.config_write(4095, two)), Code::kOutOfRange);
  EXPECT_EQ(code_of(d.config_read(4097, std::span<std::byte>())), Code::kOutOfRange);
}

TEST_P(VfioRegions, ConventionalConfigSpaceReadsZerosPast256) {
  Rig rig;
  rig.dev.regions[7].size = 256;
  std::memset(rig.dev.config() + 0x100, 0xab, 16);  // beyond the region: never seen
  auto o = rig.open(GetParam());
  ASSERT_NE(o.dev, nullptr);
  std::array<std::byte, 8> b{};
  ASSERT_TRUE(o.dev->config_read(0xfc, b).has_value());
  for (std::size_t i = 4; i < b.size(); ++i) EXPECT_EQ(b[i], std::byte{0}) << i;
  EXPECT_TRUE(o.dev->config_write(0x104, std::span(b).first(4)).has_value()) << "nothing there: a no-op";
}

TEST_P(VfioRegions, ConfigErrorsMapToCodes) {
  Rig rig;
  auto o = rig.open(GetParam());
  ASSERT_NE(o.dev, nullptr);
  std::array<std::byte, 4> b{};
  rig.kernel->fail_op("pread", ENODEV);
  auto r = o.dev->config_read(0, b);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), Code::kUnavailable);
  EXPECT_EQ(r.error().sys_errno(), ENODEV);
  for (auto x : b) EXPECT_EQ(x, std::byte{0xff}) << "a removed device reads all-ones";
  rig.kernel->fail_op("pwrite", EPERM);
  auto w = o.dev->config_write(0x40, b);
  ASSERT_FALSE(w.has_value());
  EXPECT_EQ(w.error().code(), Code::kPermissionDenied);
  rig.kernel->fail_op("pwrite", EINVAL);
  EXPECT_EQ(code_of(o.dev->config_write(0x40, b)), Code::kInvalidArgument);
}

TEST_P(VfioRegions, MmioOverMmap) {
  Rig rig;
  auto o = rig.open(GetParam());
  ASSERT_NE(o.dev, nullptr);
  auto m = o.dev->mmio(0);
  ASSERT_TRUE(m.has_value()) << m.error().to_string();
  auto& bar = static_cast<BarMmio&>(**m);
  EXPECT_TRUE(bar.is_direct(0));
  EXPECT_EQ(bar.size(), 64u << 10);
  bar.write32(0x10, 0xdeadbeefu);
  bar.write64(0x18, 0x0123456789abcdefull);
  EXPECT_EQ(load<std::uint32_t>(rig.dev.bar(0) + 0x10), 0xdeadbeefu);
  EXPECT_EQ(load<std::uint64_t>(rig.dev.bar(0) + 0x18), 0x0123456789abcdefull);
  EXPECT_EQ(bar.read32(0x1c), 0x01234567u);
  EXPECT_EQ(bar.read64(0x18), 0x0123456789abcdefull);
  const auto preads = rig.kernel->calls().size();
  for (int i = 0; i < 100; ++i) (void)bar.read32(0x10);
  EXPECT_EQ(rig.kernel->calls().size(), preads) << "mapped accesses make no system calls";
  // Misaligned and out-of-BAR: all-ones, dropped.
  EXPECT_EQ(bar.read32(0x11), 0xffffffffu);
  EXPECT_EQ(bar.read64(0x14), ~0ull);
  EXPECT_EQ(bar.read32(64u << 10), 0xffffffffu);
  EXPECT_EQ(bar.read64((64u << 10) - 4), ~0ull);
  bar.write32(0x12, 0);
  bar.write64((64u << 10), 0);
  EXPECT_EQ(bar.read32(0x10), 0xdeadbeefu);
  // The same object every time.
  EXPECT_EQ(*o.dev->mmio(0), *m);
  EXPECT_EQ(code_of(o.dev->mmio(1)), Code::kNotFound);
  EXPECT_EQ(code_of(o.dev->mmio(6)), Code::kInvalidArgument);
}

TEST_P(VfioRegions, MmioOverPreadWhenTheBarCannotBeMapped) {
  Rig rig;
  rig.dev.regions[0].flags &= ~static_cast<std::uint32_t>(VFIO_REGION_INFO_FLAG_MMAP);
  auto o = rig.open(GetParam());
  ASSERT_NE(o.dev, nullptr);
  auto m = o.dev->mmio(0);
  ASSERT_TRUE(m.has_value());
  auto& bar = static_cast<BarMmio&>(**m);
  EXPECT_FALSE(bar.is_direct(0));
  bar.write32(0x40, 0x11223344u);
  bar.write64(0x48, 0x5566778899aabbccull);
  EXPECT_EQ(load<std::uint32_t>(rig.dev.bar(0) + 0x40), 0x11223344u);
  EXPECT_EQ(bar.read64(0x48), 0x5566778899aabbccull);
  EXPECT_EQ(bar.read32(0x4c), 0x55667788u);
  // A failing pread (removed device) reads as all-ones; a failing pwrite is dropped.
  rig.kernel->fail_op("pread", ENODEV);
  EXPECT_EQ(bar.read32(0x40), 0xffffffffu);
  rig.kernel->fail_op("pread", EIO);
  EXPECT_EQ(bar.read64(0x48), ~0ull);
  rig.kernel->fail_op("pwrite", ENODEV);
  bar.write32(0x40, 0);
  EXPECT_EQ(bar.read32(0x40), 0x11223344u);
  // No aperture without mmap.
  EXPECT_EQ(code_of(o.dev->map_aperture(0)), Code::kUnimplemented);
}

TEST_P(VfioRegions, SparseBarMixesMappedAndPreadAccesses) {
  Rig rig;
  auto o = rig.open(GetParam());
  ASSERT_NE(o.dev, nullptr);
  auto m = o.dev->mmio(4);
  ASSERT_TRUE(m.has_value());
  auto& bar = static_cast<BarMmio&>(**m);
  EXPECT_FALSE(bar.is_direct(0)) << "the MSI-X table: pread/pwrite";
  EXPECT_TRUE(bar.is_direct(8u << 10)) << "the PBA page: mapped";
  bar.write32(0x10, 0xa5a5a5a5u);
  bar.write32((8u << 10) + 8, 0x5a5a5a5au);
  EXPECT_EQ(load<std::uint32_t>(rig.dev.bar(4) + 0x10), 0xa5a5a5a5u);
  EXPECT_EQ(load<std::uint32_t>(rig.dev.bar(4) + (8u << 10) + 8), 0x5a5a5a5au);
  EXPECT_EQ(bar.read32(0x10), 0xa5a5a5a5u);
  EXPECT_EQ(bar.read32((8u << 10) + 8), 0x5a5a5a5au);
}

TEST_P(VfioRegions, FailedMmapFallsBackToPread) {
  Rig rig;
  auto o = rig.open(GetParam());
  ASSERT_NE(o.dev, nullptr);
  rig.kernel->fail_op("mmap", ENOMEM);
  auto m = o.dev->mmio(0);
  ASSERT_TRUE(m.has_value()) << m.error().to_string();
  auto& bar = static_cast<BarMmio&>(**m);
  EXPECT_FALSE(bar.is_direct(0));
  bar.write32(0, 7);
  EXPECT_EQ(bar.read32(0), 7u);
}

TEST_P(VfioRegions, ApertureAndItsFd) {
  Rig rig;
  auto o = rig.open(GetParam());
  ASSERT_NE(o.dev, nullptr);
  auto ap = o.dev->map_aperture(2);
  ASSERT_TRUE(ap.has_value()) << ap.error().to_string();
  EXPECT_EQ(ap->size(), 1u << 20);
  (*ap)[ap->size() - 1] = std::byte{0x5a};
  EXPECT_EQ(rig.dev.bar(2)[(1u << 20) - 1], std::byte{0x5a});
  auto again = o.dev->map_aperture(2);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->data(), ap->data()) << "one mapping per BAR";
  auto m2 = o.dev->mmio(2);
  ASSERT_TRUE(m2.has_value());
  EXPECT_EQ((*m2)->read32((1u << 20) - 4) >> 24, 0x5au) << "Mmio shares the aperture's mapping";

  auto fd = o.dev->aperture_fd(2);
  ASSERT_TRUE(fd.has_value());
  EXPECT_GE(fd->fd, 0);
  EXPECT_EQ(fd->offset, region_base(2));
  EXPECT_EQ(fd->size, 1u << 20);
  EXPECT_EQ(code_of(o.dev->aperture_fd(0)), Code::kUnimplemented);
  EXPECT_EQ(code_of(o.dev->map_aperture(0)), Code::kUnimplemented);
  EXPECT_EQ(code_of(o.dev->map_aperture(4)), Code::kUnimplemented);
  EXPECT_EQ(code_of(o.dev->map_aperture(7)), Code::kInvalidArgument);
}

TEST_P(VfioRegions, ApertureMmapFailureKeepsTheErrno) {
  Rig rig;
  auto o = rig.open(GetParam());
  ASSERT_NE(o.dev, nullptr);
  rig.kernel->fail_op("mmap", ENOMEM);
  auto ap = o.dev->map_aperture(2);
  ASSERT_FALSE(ap.has_value());
  EXPECT_EQ(ap.error().sys_errno(), ENOMEM);
}

TEST_P(VfioRegions, MappingsAreUnmappedOnClose) {
  Rig rig;
  {
    auto o = rig.open(GetParam());
    ASSERT_NE(o.dev, nullptr);
    ASSERT_TRUE(o.dev->mmio(0).has_value());
    ASSERT_TRUE(o.dev->map_aperture(2).has_value());
  }
  std::size_t maps = 0, unmaps = 0;
  for (const auto& c : rig.kernel->calls()) {
    maps += c.op == "mmap";
    unmaps += c.op == "munmap";
  }
  EXPECT_EQ(maps, 2u);
  EXPECT_EQ(unmaps, maps);
}

INSTANTIATE_TEST_SUITE_P(Api, VfioRegions, ::testing::Values(IommuApi::kType1, IommuApi::kIommufd),
                         test::api_param_name);

}  // namespace
}  // namespace npo::vfio
