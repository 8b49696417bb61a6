// SPDX-License-Identifier: Apache-2.0
// FLR through VFIO_DEVICE_RESET, when VFIO_DEVICE_GET_INFO says the function can reset.
#include <cerrno>

#include <gtest/gtest.h>

#include "rig.hpp"
#include "vfio/uapi.hpp"

namespace npo::vfio {
namespace {

using test::code_of;
using test::Rig;

class VfioReset : public ::testing::TestWithParam<IommuApi> {};

TEST_P(VfioReset, ResetsWhenTheDeviceCan) {
  Rig rig;
  auto o = rig.open(GetParam());
  ASSERT_NE(o.dev, nullptr);
  ASSERT_TRUE(o.dev->reset().has_value());
  ASSERT_TRUE(o.dev->reset().has_value());
  EXPECT_EQ(rig.dev.resets, 2u);
}

TEST_P(VfioReset, NoResetMethodIsUnimplemented) {
  Rig rig;
  rig.dev.resettable = false;
  auto o = rig.open(GetParam());
  ASSERT_NE(o.dev, nullptr);
  auto r = o.dev->reset();
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), Code::kUnimplemented);
  EXPECT_EQ(rig.kernel->ioctl_count(uapi::kDeviceReset), 0u) << "not even tried";
}

TEST_P(VfioReset, KernelErrors) {
  Rig rig;
  auto o = rig.open(GetParam());
  ASSERT_NE(o.dev, nullptr);
  struct Case {
    int err;
    Code code;
  };
  for (const Case c :
       {Case{EBUSY, Code::kUnavailable}, Case{EAGAIN, Code::kUnavailable}, Case{ENODEV, Code::kUnavailable},
        Case{EIO, Code::kUnavailable}, Case{ENOTTY, Code::kUnimplemented}, Case{EINVAL, Code::kInvalidArgument}}) {
    SCOPED_TRACE(c.err);
    rig.kernel->fail_ioctl(uapi::kDeviceReset, c.err);
    auto r = o.dev->reset();
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code(), c.code);
    EXPECT_EQ(r.error().sys_errno(), c.err);
  }
  EXPECT_EQ(rig.dev.resets, 0u);
}

INSTANTIATE_TEST_SUITE_P(Api, VfioReset, ::testing::Values(IommuApi::kType1, IommuApi::kIommufd), test::api_param_name);

}  // namespace
}  // namespace npo::vfio
