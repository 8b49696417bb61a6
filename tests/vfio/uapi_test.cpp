// SPDX-License-Identifier: Apache-2.0
// The kernel ABI the backend declares for itself (uapi.hpp) matches the kernel's numbers.
// (Sizes and offsets are static_asserts in uapi.hpp; these are the request numbers, spelled
// out once more so a wrong edit shows up as a readable failure.)
#include "vfio/uapi.hpp"

#include <gtest/gtest.h>

namespace npo::vfio::uapi {
namespace {

TEST(VfioUapi, RequestNumbers) {
  // _IO(';', 100 + n): VFIO ioctls carry no size or direction.
  EXPECT_EQ(kGetApiVersion, 0x3b64u);
  EXPECT_EQ(kCheckExtension, 0x3b65u);
  EXPECT_EQ(kSetIommu, 0x3b66u);
  EXPECT_EQ(kGroupGetStatus, 0x3b67u);
  EXPECT_EQ(kGroupSetContainer, 0x3b68u);
  EXPECT_EQ(kGroupGetDeviceFd, 0x3b6au);
  EXPECT_EQ(kDeviceGetInfo, 0x3b6bu);
  EXPECT_EQ(kDeviceGetRegionInfo, 0x3b6cu);
  EXPECT_EQ(kDeviceGetIrqInfo, 0x3b6du);
  EXPECT_EQ(kDeviceSetIrqs, 0x3b6eu);
  EXPECT_EQ(kDeviceReset, 0x3b6fu);
  EXPECT_EQ(kIommuGetInfo, 0x3b70u);
  EXPECT_EQ(kIommuMapDma, 0x3b71u);
  EXPECT_EQ(kIommuUnmapDma, 0x3b72u);
  EXPECT_EQ(kDeviceBindIommufd, 0x3b76u);
  EXPECT_EQ(kDeviceAttachIommufdPt, 0x3b77u);
  // iommufd: _IO(';', 0x80 + n).
  EXPECT_EQ(kIoasAlloc, 0x3b81u);
  EXPECT_EQ(kIoasIovaRanges, 0x3b84u);
  EXPECT_EQ(kIoasMap, 0x3b85u);
  EXPECT_EQ(kIoasUnmap, 0x3b86u);
  EXPECT_EQ(kIoasMapFixedIova | kIoasMapWriteable | kIoasMapReadable, 7u);
  ::testing::Test::RecordProperty("system_iommufd_h", NPO_VFIO_HAVE_SYSTEM_IOMMUFD);
  ::testing::Test::RecordProperty("system_vfio_cdev", NPO_VFIO_HAVE_SYSTEM_CDEV);
}

}  // namespace
}  // namespace npo::vfio::uapi
