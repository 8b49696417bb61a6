// SPDX-License-Identifier: Apache-2.0
// The iommufd path: /dev/iommu + the VFIO device cdev, bind/IOAS/attach/ranges, the choice
// between the two APIs, and every setup failure mapped to its code, errno and fix.
#include <cerrno>

#include <gtest/gtest.h>

#include "rig.hpp"
#include "vfio/uapi.hpp"

namespace npo::vfio {
namespace {

using test::Rig;

bool contains(const std::string& s, const char* needle) { return s.find(needle) != std::string::npos; }

TEST(VfioIommufd, OpensThroughCdevBindIoasAttach) {
  Rig rig;
  // Six ranges: more than the backend's first guess of 4, so IOMMU_IOAS_IOVA_RANGES answers
  // EMSGSIZE once with the count.
  rig.kernel->iova_ranges.clear();
  for (std::uint64_t i = 6; i-- > 0;) rig.kernel->iova_ranges.push_back({i << 32, (i << 32) + 0xffffffffull - 0x1000});
  {
    auto o = rig.open(IommuApi::kIommufd);
    ASSERT_NE(o.dev, nullptr);
    EXPECT_EQ(o.vfio().iommu_api(), IommuApi::kIommufd);
    const auto ranges = o.dev->iova_ranges();
    ASSERT_EQ(ranges.size(), 6u);
    for (std::size_t i = 1; i < ranges.size(); ++i) EXPECT_GT(ranges[i].first, ranges[i - 1].last) << "sorted";
    const auto seq = rig.kernel->ioctl_sequence();
    const std::vector<unsigned long> want = {uapi::kDeviceBindIommufd,     uapi::kIoasAlloc,
                                             uapi::kDeviceAttachIommufdPt, uapi::kIoasIovaRanges,
                                             uapi::kIoasIovaRanges,        uapi::kDeviceGetInfo};
    ASSERT_GE(seq.size(), want.size());
    EXPECT_TRUE(std::equal(want.begin(), want.end(), seq.begin())) << "ioctl order";
    EXPECT_EQ(rig.kernel->ioctl_count(uapi::kGetApiVersion), 0u) << "no container on this path";
    EXPECT_EQ(rig.kernel->open_fds(), 2u) << "cdev and /dev/iommu";
    // The device works: config space through the bound cdev.
    std::array<std::byte, 2> vid{};
    ASSERT_TRUE(o.dev->config_read(0, vid).has_value());
    EXPECT_EQ(std::to_integer<int>(vid[0]) | (std::to_integer<int>(vid[1]) << 8), 0x1ee7);
  }
  EXPECT_EQ(rig.kernel->open_fds(), 0u);
}

TEST(VfioIommufd, AutoPrefersTheGroupNodeThenTheCdev) {
  {
    Rig rig;  // both present: type1
    auto o = rig.open(IommuApi::kAuto);
    ASSERT_NE(o.dev, nullptr);
    EXPECT_EQ(o.vfio().iommu_api(), IommuApi::kType1);
  }
  {
    Rig rig;  // no group node (CONFIG_VFIO_GROUP=n): iommufd
    std::filesystem::remove(rig.tree.dir() / "dev/vfio/12");
    auto o = rig.open(IommuApi::kAuto);
    ASSERT_NE(o.dev, nullptr);
    EXPECT_EQ(o.vfio().iommu_api(), IommuApi::kIommufd);
  }
  {
    Rig rig(Rig::default_function(), /*iommufd_nodes=*/false);  // no /dev/iommu: type1
    auto o = rig.open(IommuApi::kAuto);
    ASSERT_NE(o.dev, nullptr);
    EXPECT_EQ(o.vfio().iommu_api(), IommuApi::kType1);
  }
}

TEST(VfioIommufd, MissingPieces) {
  {
    auto f = Rig::default_function();
    f.cdev.reset();  // kernel < 6.6
    Rig rig(f);
    const Error e = rig.open_error(IommuApi::kIommufd);
    EXPECT_EQ(e.code(), Code::kUnimplemented);
    EXPECT_TRUE(contains(e.message(), "CONFIG_VFIO_DEVICE_CDEV")) << e.message();
    EXPECT_TRUE(contains(e.message(), "iommu=type1")) << e.message();
  }
  {
    Rig rig;  // Linux 6.1..6.5: sysfs lists vfio-dev/vfio3, but there is no character device
    std::filesystem::remove(rig.tree.dir() / "dev/vfio/devices/vfio3");
    const Error e = rig.open_error(IommuApi::kIommufd);
    EXPECT_EQ(e.code(), Code::kUnimplemented);
    EXPECT_EQ(e.sys_errno(), ENOENT);
    EXPECT_TRUE(contains(e.message(), "Linux < 6.6")) << e.message();
    EXPECT_EQ(rig.kernel->open_fds(), 0u);
    std::filesystem::remove(rig.tree.dir() / "dev/vfio/12");  // auto: neither path -> type1's diagnosis
    const Error a = rig.open_error(IommuApi::kAuto);
    EXPECT_EQ(a.code(), Code::kFailedPrecondition);
    EXPECT_TRUE(contains(a.message(), "/vfio/12")) << a.message();
  }
  {
    Rig rig(Rig::default_function(), /*iommufd_nodes=*/false);
    const Error e = rig.open_error(IommuApi::kIommufd);
    EXPECT_EQ(e.code(), Code::kUnimplemented);
    EXPECT_EQ(e.sys_errno(), ENOENT);
    EXPECT_TRUE(contains(e.message(), "CONFIG_IOMMUFD")) << e.message();
    EXPECT_EQ(rig.kernel->open_fds(), 0u);
  }
  {
    auto f = Rig::default_function();
    f.driver = "nvme";
    f.cdev.reset();
    Rig rig(f);
    const Error e = rig.open_error(IommuApi::kIommufd);
    EXPECT_EQ(e.code(), Code::kFailedPrecondition);
    EXPECT_TRUE(contains(e.message(), "driver_override")) << e.message();
  }
}

TEST(VfioIommufd, NodeAndIoctlErrors) {
  {
    Rig rig;
    rig.kernel->fail_open("/vfio/devices/vfio3", EACCES);
    const Error e = rig.open_error(IommuApi::kIommufd);
    EXPECT_EQ(e.code(), Code::kPermissionDenied);
    EXPECT_EQ(e.sys_errno(), EACCES);
  }
  {
    Rig rig;
    rig.kernel->fail_open("/iommu", EACCES);
    const Error e = rig.open_error(IommuApi::kIommufd);
    EXPECT_EQ(e.code(), Code::kPermissionDenied);
    EXPECT_EQ(rig.kernel->open_fds(), 0u);
  }
  {
    Rig rig;
    rig.kernel->fail_ioctl(uapi::kDeviceBindIommufd, EBUSY);
    const Error e = rig.open_error(IommuApi::kIommufd);
    EXPECT_EQ(e.code(), Code::kUnavailable);
    EXPECT_EQ(e.sys_errno(), EBUSY);
    EXPECT_TRUE(contains(e.message(), "already in use")) << e.message();
  }
  {
    Rig rig;
    rig.kernel->fail_ioctl(uapi::kDeviceBindIommufd, ENOTTY);
    EXPECT_EQ(rig.open_error(IommuApi::kIommufd).code(), Code::kUnimplemented);
  }
  {
    Rig rig;
    rig.kernel->fail_ioctl(uapi::kIoasAlloc, ENOMEM);
    const Error e = rig.open_error(IommuApi::kIommufd);
    EXPECT_EQ(e.code(), Code::kResourceExhausted);
    EXPECT_EQ(e.sys_errno(), ENOMEM);
  }
  {
    Rig rig;
    rig.kernel->fail_ioctl(uapi::kDeviceAttachIommufdPt, EPERM);
    const Error e = rig.open_error(IommuApi::kIommufd);
    EXPECT_EQ(e.code(), Code::kFailedPrecondition);
    EXPECT_EQ(e.sys_errno(), EPERM);
    EXPECT_TRUE(contains(e.message(), "iommufd allow_unsafe_interrupts=1")) << e.message();
    EXPECT_EQ(rig.kernel->open_fds(), 0u);
  }
  {
    Rig rig;
    rig.kernel->fail_ioctl(uapi::kDeviceAttachIommufdPt, EINVAL);
    EXPECT_EQ(rig.open_error(IommuApi::kIommufd).code(), Code::kInvalidArgument);
  }
  {
    Rig rig;
    rig.kernel->fail_ioctl(uapi::kIoasIovaRanges, ENODEV);
    EXPECT_EQ(rig.open_error(IommuApi::kIommufd).code(), Code::kNotFound);
  }
}

TEST(VfioIommufd, GroupPathHoldsTheDevice) {
  // Another user holds the group through /dev/vfio/12: the cdev cannot bind (the kernel's EBUSY).
  Rig rig;
  auto t1 = rig.open(IommuApi::kType1);
  ASSERT_NE(t1.dev, nullptr);
  auto other = rig.backend(IommuApi::kIommufd);
  ASSERT_TRUE(other.has_value());
  auto d = (*other)->open(*backend::PciAddress::parse(Rig::kBdf));
  ASSERT_FALSE(d.has_value());
  EXPECT_EQ(d.error().code(), Code::kUnavailable);
}

}  // namespace
}  // namespace npo::vfio
