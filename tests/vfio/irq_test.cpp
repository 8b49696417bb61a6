// SPDX-License-Identifier: Apache-2.0
// MSI-X to eventfds through VFIO_DEVICE_SET_IRQS: enabling, updating, growing past the
// enabled block, disabling, and the errors, through both IOMMU APIs.
#include <fcntl.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <array>
#include <cerrno>

#include <gtest/gtest.h>

#include "rig.hpp"
#include "vfio/uapi.hpp"

namespace npo::vfio {
namespace {

using test::code_of;
using test::Rig;

class VfioIrq : public ::testing::TestWithParam<IommuApi> {
 protected:
  void TearDown() override {
    for (int fd : fds_) ::close(fd);
  }
  int efd() {
    const int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    EXPECT_GE(fd, 0);
    fds_.push_back(fd);
    return fd;
  }
  std::vector<int> fds_;
};

TEST_P(VfioIrq, EnableUpdateGrowDisable) {
  Rig rig;
  const int a = efd(), b = efd(), c = efd();
  {
    auto o = rig.open(GetParam());
    ASSERT_NE(o.dev, nullptr);
    auto& d = *o.dev;
    EXPECT_EQ(d.msix_vectors(), 64u);

    const std::array<int, 2> ab{a, b};
    ASSERT_TRUE(d.set_msix_eventfds(0, ab).has_value());
    EXPECT_EQ(rig.kernel->msix_enabled(Rig::kBdf), 2u) << "enabled as many vectors as needed";
    EXPECT_EQ(rig.dev.vectors[0], a);
    EXPECT_EQ(rig.dev.vectors[1], b);

    const std::array<int, 1> off{-1};
    ASSERT_TRUE(d.set_msix_eventfds(1, off).has_value());
    EXPECT_EQ(rig.dev.vectors[1], -1);
    EXPECT_EQ(rig.kernel->msix_enabled(Rig::kBdf), 2u) << "still enabled: vector 0 is connected";

    // Vector 5 lies past the enabled block: disable and re-enable with 6 vectors, keeping vector 0.
    const std::array<int, 1> cc{c};
    const auto sets = rig.kernel->ioctl_count(uapi::kDeviceSetIrqs);
    ASSERT_TRUE(d.set_msix_eventfds(5, cc).has_value());
    EXPECT_EQ(rig.kernel->ioctl_count(uapi::kDeviceSetIrqs), sets + 2);
    EXPECT_EQ(rig.kernel->msix_enabled(Rig::kBdf), 6u);
    EXPECT_EQ(rig.dev.vectors[0], a);
    EXPECT_EQ(rig.dev.vectors[5], c);

    // A range reaching past the enabled block with only -1 there needs no re-enable.
    const std::array<int, 4> tail{b, -1, -1, -1};
    ASSERT_TRUE(d.set_msix_eventfds(4, tail).has_value());
    EXPECT_EQ(rig.dev.vectors[4], b);
    EXPECT_EQ(rig.dev.vectors[5], -1);
    EXPECT_EQ(rig.kernel->msix_enabled(Rig::kBdf), 6u);

    // Disconnecting the last vectors disables MSI-X.
    const std::array<int, 6> none{-1, -1, -1, -1, -1, -1};
    ASSERT_TRUE(d.set_msix_eventfds(0, none).has_value());
    EXPECT_EQ(rig.kernel->msix_enabled(Rig::kBdf), 0u);
    // And enabling again works; the device closes with MSI-X on.
    ASSERT_TRUE(d.set_msix_eventfds(63, cc).has_value());
    EXPECT_EQ(rig.kernel->msix_enabled(Rig::kBdf), 64u);
  }
  EXPECT_EQ(rig.kernel->msix_enabled(Rig::kBdf), 0u) << "closing the device disables MSI-X";
  EXPECT_EQ(rig.dev.vectors[63], -1);
}

TEST_P(VfioIrq, ArgumentErrors) {
  Rig rig;
  auto o = rig.open(GetParam());
  ASSERT_NE(o.dev, nullptr);
  auto& d = *o.dev;
  const int a = efd();
  const std::array<int, 1> neg{-2};
  const auto sets = rig.kernel->ioctl_count(uapi::kDeviceSetIrqs);
  EXPECT_EQ(code_of(d.set_msix_eventfds(0, neg)), Code::kInvalidArgument);
  const std::array<int, 1> one{a};
  const std::array<int, 2> two{a, a};
  EXPECT_EQ(code_of(d.set_msix_eventfds(64, one)), Code::kOutOfRange);
  EXPECT_EQ(code_of(d.set_msix_eventfds(63, two)), Code::kOutOfRange);
  EXPECT_EQ(code_of(d.set_msix_eventfds(65, {})), Code::kOutOfRange);
  EXPECT_EQ(rig.kernel->ioctl_count(uapi::kDeviceSetIrqs), sets) << "caught before the kernel";

  int closed = 40000;
  while (::fcntl(closed, F_GETFD) != -1) ++closed;
  const std::array<int, 1> bad{closed};
  auto r = d.set_msix_eventfds(0, bad);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), Code::kInvalidArgument);
  EXPECT_EQ(r.error().sys_errno(), EBADF);
  EXPECT_EQ(rig.kernel->msix_enabled(Rig::kBdf), 0u) << "nothing enabled on error";
  EXPECT_TRUE(d.set_msix_eventfds(0, one).has_value()) << "the state was not corrupted";
}

TEST_P(VfioIrq, KernelErrorsAndAFailedGrowKeepsTheOldRouting) {
  Rig rig;
  auto o = rig.open(GetParam());
  ASSERT_NE(o.dev, nullptr);
  auto& d = *o.dev;
  const int a = efd(), b = efd();
  const std::array<int, 1> one{a};
  rig.kernel->fail_ioctl(uapi::kDeviceSetIrqs, ENOSPC);
  auto r = d.set_msix_eventfds(0, one);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), Code::kResourceExhausted);
  EXPECT_EQ(r.error().sys_errno(), ENOSPC);
  rig.kernel->fail_ioctl(uapi::kDeviceSetIrqs, ENODEV);
  EXPECT_EQ(code_of(d.set_msix_eventfds(0, one)), Code::kUnavailable);

  ASSERT_TRUE(d.set_msix_eventfds(0, one).has_value());
  // Grow to vector 9: the disable passes, the re-enable fails; vector 0 is routed again.
  rig.kernel->fail_ioctl(uapi::kDeviceSetIrqs, EINVAL, 1, /*skip=*/1);
  const std::array<int, 1> nine{b};
  EXPECT_EQ(code_of(d.set_msix_eventfds(9, nine)), Code::kInvalidArgument);
  EXPECT_EQ(rig.kernel->msix_enabled(Rig::kBdf), 1u);
  EXPECT_EQ(rig.dev.vectors[0], a);
  EXPECT_EQ(rig.dev.vectors[9], -1);
}

// MSI (edu-style devices): VFIO_DEVICE_SET_IRQS on VFIO_PCI_MSI_IRQ_INDEX, exclusive with MSI-X.
TEST_P(VfioIrq, MsiToAnEventfdExclusiveWithMsix) {
  Rig rig;
  const int a = efd(), b = efd(), c = efd();
  {
    auto o = rig.open(GetParam());
    ASSERT_NE(o.dev, nullptr);
    auto& d = *o.dev;
    ASSERT_TRUE(d.set_msi_eventfd(a).has_value());
    EXPECT_TRUE(rig.kernel->msi_enabled(Rig::kBdf));
    EXPECT_EQ(rig.dev.msi_fd, a);
    ASSERT_TRUE(d.set_msi_eventfd(b).has_value()) << "re-routed while enabled";
    EXPECT_EQ(rig.dev.msi_fd, b);

    // MSI-X while MSI is connected: refused before the kernel sees it.
    const auto sets = rig.kernel->ioctl_count(uapi::kDeviceSetIrqs);
    const std::array<int, 1> cc{c};
    EXPECT_EQ(code_of(d.set_msix_eventfds(0, cc)), Code::kFailedPrecondition);
    EXPECT_EQ(rig.kernel->ioctl_count(uapi::kDeviceSetIrqs), sets);

    ASSERT_TRUE(d.set_msi_eventfd(-1).has_value());
    EXPECT_FALSE(rig.kernel->msi_enabled(Rig::kBdf));
    EXPECT_EQ(rig.dev.msi_fd, -1);
    const auto after = rig.kernel->ioctl_count(uapi::kDeviceSetIrqs);
    ASSERT_TRUE(d.set_msi_eventfd(-1).has_value()) << "disconnecting twice is a no-op";
    EXPECT_EQ(rig.kernel->ioctl_count(uapi::kDeviceSetIrqs), after);

    // And the other way round.
    ASSERT_TRUE(d.set_msix_eventfds(0, cc).has_value());
    EXPECT_EQ(code_of(d.set_msi_eventfd(a)), Code::kFailedPrecondition);
    const std::array<int, 1> off{-1};
    ASSERT_TRUE(d.set_msix_eventfds(0, off).has_value());
    ASSERT_TRUE(d.set_msi_eventfd(a).has_value());
    EXPECT_TRUE(rig.kernel->msi_enabled(Rig::kBdf));
  }
  EXPECT_FALSE(rig.kernel->msi_enabled(Rig::kBdf)) << "closing the device turns MSI off";
  EXPECT_EQ(rig.dev.msi_fd, -1);
}

TEST_P(VfioIrq, MsiErrors) {
  Rig rig;
  auto o = rig.open(GetParam());
  ASSERT_NE(o.dev, nullptr);
  auto& d = *o.dev;
  const int a = efd();
  EXPECT_EQ(code_of(d.set_msi_eventfd(-2)), Code::kInvalidArgument);
  int closed = 40000;
  while (::fcntl(closed, F_GETFD) != -1) ++closed;
  auto r = d.set_msi_eventfd(closed);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), Code::kInvalidArgument);
  EXPECT_EQ(r.error().sys_errno(), EBADF);
  EXPECT_FALSE(rig.kernel->msi_enabled(Rig::kBdf));
  rig.kernel->fail_ioctl(uapi::kDeviceSetIrqs, ENODEV);
  EXPECT_EQ(code_of(d.set_msi_eventfd(a)), Code::kUnavailable);
  rig.kernel->fail_ioctl(uapi::kDeviceSetIrqs, ENOSPC);
  EXPECT_EQ(code_of(d.set_msi_eventfd(a)), Code::kResourceExhausted);
  EXPECT_TRUE(d.set_msi_eventfd(a).has_value()) << "the state was not corrupted";
}

TEST_P(VfioIrq, NoMsiCapabilityIsUnimplemented) {
  Rig rig;
  rig.dev.msi = 0;  // VFIO_DEVICE_GET_IRQ_INFO(MSI) reports 0 vectors
  auto o = rig.open(GetParam());
  ASSERT_NE(o.dev, nullptr);
  const int a = efd();
  const auto sets = rig.kernel->ioctl_count(uapi::kDeviceSetIrqs);
  EXPECT_EQ(code_of(o.dev->set_msi_eventfd(a)), Code::kUnimplemented);
  EXPECT_EQ(rig.kernel->ioctl_count(uapi::kDeviceSetIrqs), sets);
}

INSTANTIATE_TEST_SUITE_P(Api, VfioIrq, ::testing::Values(IommuApi::kType1, IommuApi::kIommufd), test::api_param_name);

}  // namespace
}  // namespace npo::vfio
