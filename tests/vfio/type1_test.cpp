// SPDX-License-Identifier: Apache-2.0
// The type1v2 container/group path: the ioctl sequence, the IOVA-range capability chain, and
// every setup failure mapped to its code, errno and fix.
#include <cerrno>
#include <cstring>

#include <gtest/gtest.h>

#include "rig.hpp"
#include "vfio/uapi.hpp"

namespace npo::vfio {
namespace {

using test::code_of;
using test::Rig;

bool contains(const std::string& s, const char* needle) { return s.find(needle) != std::string::npos; }

TEST(VfioType1, OpensThroughContainerGroupAndDeviceFd) {
  Rig rig;
  rig.kernel->iova_ranges = {{0xfee00000ull + 0x100000, (1ull << 39) - 1}, {0, 0xfedfffffull}};  // unsorted
  {
    auto o = rig.open(IommuApi::kType1);
    ASSERT_NE(o.dev, nullptr);
    EXPECT_EQ(o.vfio().iommu_api(), IommuApi::kType1);
    const auto& fi = o.dev->info();
    EXPECT_EQ(fi.address.to_string(), Rig::kBdf);
    EXPECT_EQ(fi.driver, "vfio-pci");
    EXPECT_EQ(fi.iommu_group, 12);
    EXPECT_EQ(fi.numa_node, 1);
    const auto ranges = o.dev->iova_ranges();
    ASSERT_EQ(ranges.size(), 2u);
    EXPECT_EQ(ranges[0].first, 0u);
    EXPECT_EQ(ranges[0].last, 0xfedfffffull);
    EXPECT_EQ(ranges[1].first, 0xfef00000ull);

    // The documented order: API check, extension, group viable, container, IOMMU, info, device.
    const auto seq = rig.kernel->ioctl_sequence();
    const std::vector<unsigned long> want = {uapi::kGetApiVersion,     uapi::kCheckExtension,   uapi::kGroupGetStatus,
                                             uapi::kGroupSetContainer, uapi::kSetIommu,         uapi::kIommuGetInfo,
                                             uapi::kIommuGetInfo,      uapi::kGroupGetDeviceFd, uapi::kDeviceGetInfo};
    ASSERT_GE(seq.size(), want.size());
    EXPECT_TRUE(std::equal(want.begin(), want.end(), seq.begin())) << "ioctl order";
    EXPECT_EQ(rig.kernel->ioctl_count(uapi::kIommuGetInfo), 2u) << "argsz grows once for the capability chain";
    EXPECT_EQ(rig.kernel->open_fds(), 3u) << "container, group, device";
  }
  EXPECT_EQ(rig.kernel->open_fds(), 0u) << "closing the device and backend closes every fd";
}

TEST(VfioType1, NoIovaCapabilityAssumes48Bits) {
  Rig rig;
  rig.kernel->report_iova_caps = false;
  auto o = rig.open(IommuApi::kType1);
  ASSERT_NE(o.dev, nullptr);
  const auto ranges = o.dev->iova_ranges();
  ASSERT_EQ(ranges.size(), 1u);
  EXPECT_EQ(ranges[0].last, (1ull << 48) - 1);
}

TEST(VfioType1, ExclusiveOpenAndReopen) {
  Rig rig;
  auto be = rig.backend(IommuApi::kType1);
  ASSERT_TRUE(be.has_value());
  const auto a = *backend::PciAddress::parse(Rig::kBdf);
  auto d1 = (*be)->open(a);
  ASSERT_TRUE(d1.has_value());
  EXPECT_EQ(code_of((*be)->open(a)), Code::kAlreadyExists);
  d1->reset();
  auto d2 = (*be)->open(a);
  EXPECT_TRUE(d2.has_value()) << d2.error().to_string();
}

TEST(VfioType1, FunctionsOfOneGroupShareTheContainer) {
  Rig rig;
  test::MemoryDevice second(0x1ee7, 0x0a01);
  auto f = Rig::default_function();
  f.bdf = "0000:3b:00.1";
  f.cdev = "vfio4";
  rig.tree.add_function(f);
  rig.kernel->add_group(12, {Rig::kBdf, "0000:3b:00.1"});
  rig.kernel->add_device("0000:3b:00.1", &second, "vfio4");
  auto be = rig.backend(IommuApi::kType1);
  ASSERT_TRUE(be.has_value());
  auto enumerated = (*be)->enumerate();
  ASSERT_TRUE(enumerated.has_value());
  EXPECT_EQ(enumerated->size(), 2u);
  auto d1 = (*be)->open(*backend::PciAddress::parse(Rig::kBdf));
  auto d2 = (*be)->open(*backend::PciAddress::parse("0000:3b:00.1"));
  ASSERT_TRUE(d1.has_value()) << d1.error().to_string();
  ASSERT_TRUE(d2.has_value()) << d2.error().to_string();
  EXPECT_EQ(rig.kernel->ioctl_count(uapi::kSetIommu), 1u) << "one container for the group";
  EXPECT_EQ(rig.kernel->open_fds(), 4u) << "container, group, two devices";
  d1->reset();
  EXPECT_EQ(rig.kernel->open_fds(), 3u) << "the group stays open for the other function";
  d2->reset();
  EXPECT_EQ(rig.kernel->open_fds(), 0u);
}

TEST(VfioType1, ContainerNodeErrors) {
  {
    Rig rig;
    std::filesystem::remove(rig.tree.dir() / "dev/vfio/vfio");
    const Error e = rig.open_error(IommuApi::kType1);
    EXPECT_EQ(e.code(), Code::kFailedPrecondition);
    EXPECT_EQ(e.sys_errno(), ENOENT);
    EXPECT_TRUE(contains(e.message(), "modprobe vfio-pci")) << e.message();
    EXPECT_EQ(rig.kernel->open_fds(), 0u);
  }
  {
    Rig rig;
    rig.kernel->fail_open("/vfio/vfio", EACCES);
    const Error e = rig.open_error(IommuApi::kType1);
    EXPECT_EQ(e.code(), Code::kPermissionDenied);
    EXPECT_EQ(e.sys_errno(), EACCES);
    EXPECT_TRUE(contains(e.message(), "group npo")) << e.message();
  }
  {
    Rig rig;
    rig.kernel->api_version = 1;
    const Error e = rig.open_error(IommuApi::kType1);
    EXPECT_EQ(e.code(), Code::kUnimplemented);
    EXPECT_TRUE(contains(e.message(), "API version 1")) << e.message();
    EXPECT_EQ(rig.kernel->open_fds(), 0u);
  }
  {
    Rig rig;
    rig.kernel->type1v2 = false;
    const Error e = rig.open_error(IommuApi::kType1);
    EXPECT_EQ(e.code(), Code::kUnimplemented);
    EXPECT_TRUE(contains(e.message(), "modprobe vfio_iommu_type1")) << e.message();
  }
}

TEST(VfioType1, GroupErrors) {
  {
    Rig rig;
    rig.kernel->fail_open("/vfio/12", EBUSY);
    const Error e = rig.open_error(IommuApi::kType1);
    EXPECT_EQ(e.code(), Code::kUnavailable);
    EXPECT_EQ(e.sys_errno(), EBUSY);
    EXPECT_TRUE(contains(e.message(), "another process")) << e.message();
    EXPECT_EQ(rig.kernel->open_fds(), 0u);
  }
  {
    Rig rig;
    rig.kernel->fail_open("/vfio/12", EACCES);
    const Error e = rig.open_error(IommuApi::kType1);
    EXPECT_EQ(e.code(), Code::kPermissionDenied);
    EXPECT_TRUE(contains(e.message(), "udev")) << e.message();
  }
  {
    Rig rig;
    std::filesystem::remove(rig.tree.dir() / "dev/vfio/12");
    const Error e = rig.open_error(IommuApi::kType1);
    EXPECT_EQ(e.code(), Code::kFailedPrecondition);
    EXPECT_TRUE(contains(e.message(), "group node is missing")) << e.message();
  }
  {
    Rig rig;  // a peer on another driver makes the group not viable
    auto peer = Rig::default_function();
    peer.bdf = "0000:3b:00.1";
    peer.driver = "snd_hda_intel";
    peer.cdev.reset();
    rig.tree.add_function(peer);
    rig.kernel->add_group(12, {Rig::kBdf, "0000:3b:00.1"}, /*viable=*/false);
    const Error e = rig.open_error(IommuApi::kType1);
    EXPECT_EQ(e.code(), Code::kFailedPrecondition);
    EXPECT_TRUE(contains(e.message(), "not viable")) << e.message();
    EXPECT_TRUE(contains(e.message(), "0000:3b:00.1 (snd_hda_intel)")) << e.message();
    EXPECT_EQ(rig.kernel->open_fds(), 0u);
  }
  {
    Rig rig;
    rig.kernel->fail_ioctl(uapi::kGroupSetContainer, EINVAL);
    const Error e = rig.open_error(IommuApi::kType1);
    EXPECT_EQ(e.code(), Code::kInvalidArgument);
    EXPECT_EQ(e.sys_errno(), EINVAL);
    EXPECT_TRUE(contains(e.message(), "VFIO_GROUP_SET_CONTAINER")) << e.message();
  }
}

TEST(VfioType1, SetIommuEpermMeansNoInterruptRemapping) {
  Rig rig;
  rig.kernel->fail_ioctl(uapi::kSetIommu, EPERM);
  const Error e = rig.open_error(IommuApi::kType1);
  EXPECT_EQ(e.code(), Code::kFailedPrecondition);
  EXPECT_EQ(e.sys_errno(), EPERM);
  EXPECT_TRUE(contains(e.message(), "interrupt remapping")) << e.message();
  EXPECT_TRUE(contains(e.message(), "vfio_iommu_type1 allow_unsafe_interrupts=1")) << e.message();
  EXPECT_EQ(rig.kernel->open_fds(), 0u);

  Rig busy;
  busy.kernel->fail_ioctl(uapi::kSetIommu, EBUSY);
  EXPECT_EQ(busy.open_error(IommuApi::kType1).code(), Code::kUnavailable);
}

TEST(VfioType1, DeviceFdErrors) {
  {
    Rig rig;
    rig.kernel->fail_ioctl(uapi::kGroupGetDeviceFd, ENODEV);
    const Error e = rig.open_error(IommuApi::kType1);
    EXPECT_EQ(e.code(), Code::kNotFound);
    EXPECT_EQ(e.sys_errno(), ENODEV);
  }
  {
    Rig rig;
    rig.kernel->fail_ioctl(uapi::kGroupGetDeviceFd, EBUSY);
    const Error e = rig.open_error(IommuApi::kType1);
    EXPECT_EQ(e.code(), Code::kUnavailable);
    EXPECT_EQ(rig.kernel->open_fds(), 0u);
  }
  {
    Rig rig;
    rig.kernel->fail_ioctl(uapi::kDeviceGetInfo, ENODEV);
    const Error e = rig.open_error(IommuApi::kType1);
    EXPECT_EQ(e.code(), Code::kUnavailable) << "device removed while opening";
    EXPECT_EQ(rig.kernel->open_fds(), 0u);
    // The failed open released its claim: the next open works.
    auto o = rig.open(IommuApi::kType1);
    EXPECT_NE(o.dev, nullptr);
  }
  {
    Rig rig;
    rig.kernel->fail_ioctl(uapi::kIommuGetInfo, EINVAL);
    EXPECT_EQ(rig.open_error(IommuApi::kType1).code(), Code::kInvalidArgument);
  }
}

TEST(VfioType1, WrongDriverAndNoGroupAreNamed) {
  {
    auto f = Rig::default_function();
    f.driver = "nvme";
    Rig rig(f);
    const Error e = rig.open_error(IommuApi::kType1);
    EXPECT_EQ(e.code(), Code::kFailedPrecondition);
    EXPECT_TRUE(contains(e.message(), "driver_override")) << e.message();
    EXPECT_EQ(rig.kernel->open_fds(), 0u);
  }
  {
    auto f = Rig::default_function();
    f.iommu_group = -1;
    Rig rig(f);
    const Error e = rig.open_error(IommuApi::kType1);
    EXPECT_EQ(e.code(), Code::kFailedPrecondition);
    EXPECT_TRUE(contains(e.message(), "intel_iommu=on")) << e.message();
  }
}

// ---- The capability-chain parser on hostile answers -------------------------------------------

std::vector<std::byte> info_with_cap(std::uint32_t cap_offset, std::uint32_t next, std::uint32_t nr) {
  std::vector<std::byte> buf(sizeof(uapi::Type1Info) + 16 + 16);
  uapi::Type1Info info{};
  info.argsz = static_cast<std::uint32_t>(buf.size());
  info.flags = VFIO_IOMMU_INFO_CAPS;
  info.cap_offset = cap_offset;
  std::memcpy(buf.data(), &info, sizeof info);
  uapi::Type1IovaRangeCap cap{};
  cap.header.id = VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE;
  cap.header.next = next;
  cap.nr_iovas = nr;
  std::memcpy(buf.data() + sizeof info, &cap, sizeof cap);
  uapi::Type1IovaRange r{0x1000, 0xffff};
  std::memcpy(buf.data() + sizeof info + sizeof cap, &r, sizeof r);
  return buf;
}

TEST(VfioType1, IovaCapabilityParser) {
  auto good = parse_type1_iova_ranges(info_with_cap(sizeof(uapi::Type1Info), 0, 1));
  ASSERT_TRUE(good.has_value());
  ASSERT_TRUE(good->has_value());
  EXPECT_EQ((**good)[0].first, 0x1000u);
  EXPECT_EQ((**good)[0].last, 0xffffu);
  EXPECT_EQ(code_of(parse_type1_iova_ranges(info_with_cap(sizeof(uapi::Type1Info), 0, 2))), Code::kDataLoss)
      << "more ranges than fit";
  EXPECT_EQ(code_of(parse_type1_iova_ranges(info_with_cap(4000, 0, 1))), Code::kDataLoss) << "outside the buffer";
  EXPECT_EQ(code_of(parse_type1_iova_ranges(info_with_cap(4, 0, 1))), Code::kDataLoss) << "inside the header";
  auto loop = info_with_cap(sizeof(uapi::Type1Info), 0, 1);
  uapi::InfoCapHeader other{99, 1, static_cast<std::uint32_t>(sizeof(uapi::Type1Info))};  // points at itself
  std::memcpy(loop.data() + sizeof(uapi::Type1Info), &other, sizeof other);
  EXPECT_EQ(code_of(parse_type1_iova_ranges(loop)), Code::kDataLoss) << "a loop";
  auto none = info_with_cap(0, 0, 1);
  auto r = parse_type1_iova_ranges(none);
  ASSERT_TRUE(r.has_value());
  EXPECT_FALSE(r->has_value()) << "no chain: no ranges";
  std::vector<std::byte> tiny(8);
  EXPECT_EQ(code_of(parse_type1_iova_ranges(tiny)), Code::kDataLoss);
}

}  // namespace
}  // namespace npo::vfio
