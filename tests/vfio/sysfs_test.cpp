// SPDX-License-Identifier: Apache-2.0
// sysfs discovery on a fake tree, and the diagnostics that name the fix.
#include "vfio/sysfs.hpp"

#include <cerrno>

#include <gtest/gtest.h>

#include "fake_kernel.hpp"
#include "rig.hpp"

namespace npo::vfio {
namespace {

using backend::PciAddress;
using test::FakeTree;

PciAddress addr(const char* s) { return *PciAddress::parse(s); }

class SysfsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FakeTree::Function card;
    card.bdf = "0000:3b:00.0";
    card.numa_node = 1;
    card.iommu_group = 12;
    card.cdev = "vfio3";
    tree.add_function(card);
    FakeTree::Function audio;  // same group, another driver
    audio.bdf = "0000:3b:00.1";
    audio.vendor = 0x10de;
    audio.device = 0x22ba;
    audio.class_code = 0x040300;
    audio.iommu_group = 12;
    audio.driver = "snd_hda_intel";
    tree.add_function(audio);
    FakeTree::Function unbound;  // a second card: no driver, no IOMMU group
    unbound.bdf = "0001:00:02.0";
    unbound.driver = "";
    tree.add_function(unbound);
    FakeTree::Function virtio;
    virtio.bdf = "0000:00:03.0";
    virtio.vendor = 0x1af4;
    virtio.device = 0x1041;
    virtio.class_code = 0x020000;
    virtio.driver = "virtio-pci";
    tree.add_function(virtio);
    tree.write("sys/bus/pci/devices/not-a-bdf", "");  // ignored
  }
  FakeTree tree;
  Sysfs sysfs{real_sys(), tree.sys_root()};
};

TEST_F(SysfsTest, ListsFunctionsByIdsSortedWithAttributesAndLinks) {
  PciFilter f;
  f.vendor_id = 0x1ee7;
  f.device_id = 0x0a01;
  auto fns = sysfs.list(f);
  ASSERT_TRUE(fns.has_value()) << fns.error().to_string();
  ASSERT_EQ(fns->size(), 2u);
  const auto& a = (*fns)[0];
  EXPECT_EQ(a.address, addr("0000:3b:00.0"));
  EXPECT_EQ(a.vendor_id, 0x1ee7);
  EXPECT_EQ(a.device_id, 0x0a01);
  EXPECT_EQ(a.subsystem_vendor_id, 0x1ee7);
  EXPECT_EQ(a.subsystem_id, 0x0001);
  EXPECT_EQ(a.class_code, 0x120000u);
  EXPECT_EQ(a.numa_node, 1);
  EXPECT_EQ(a.iommu_group, 12);
  EXPECT_EQ(a.driver, "vfio-pci");
  const auto& b = (*fns)[1];
  EXPECT_EQ(b.address, addr("0001:00:02.0"));
  EXPECT_EQ(b.numa_node, -1);
  EXPECT_EQ(b.iommu_group, -1);
  EXPECT_EQ(b.driver, "");

  auto all = sysfs.list({});
  ASSERT_TRUE(all.has_value());
  EXPECT_EQ(all->size(), 4u);
  EXPECT_EQ(all->front().address, addr("0000:00:03.0"));
}

TEST_F(SysfsTest, FilterByAddressAndUnknownAddress) {
  PciFilter f;
  f.address = addr("0000:3b:00.1");
  auto one = sysfs.list(f);
  ASSERT_TRUE(one.has_value());
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ(one->front().driver, "snd_hda_intel");
  f.vendor_id = 0x1ee7;  // IDs still apply
  EXPECT_TRUE(sysfs.list(f)->empty());

  auto missing = sysfs.function(addr("0000:99:00.0"));
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code(), Code::kNotFound);
  EXPECT_EQ(missing.error().sys_errno(), ENOENT);
  EXPECT_NE(missing.error().message().find("lspci"), std::string::npos);
  PciFilter g;
  g.address = addr("0000:99:00.0");
  EXPECT_EQ(test::code_of(sysfs.list(g)), Code::kNotFound);
}

TEST_F(SysfsTest, NoSysfsIsUnavailable) {
  Sysfs none(real_sys(), (tree.dir() / "nothing").string());
  auto r = none.list({});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), Code::kUnavailable);
  EXPECT_EQ(r.error().sys_errno(), ENOENT);
  EXPECT_NE(r.error().message().find("sysfs mounted"), std::string::npos);
}

TEST_F(SysfsTest, CorruptAttributeIsDataLossAndSkippedInScans) {
  tree.write("sys/devices/pci0000:00/0000:00:03.0/vendor", "virtio\n");
  auto r = sysfs.function(addr("0000:00:03.0"));
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), Code::kDataLoss);
  auto all = sysfs.list({});
  ASSERT_TRUE(all.has_value());
  EXPECT_EQ(all->size(), 3u) << "the unreadable function is skipped, not fatal";
}

TEST_F(SysfsTest, GroupMembersAndCdev) {
  auto m = sysfs.group_members(12);
  ASSERT_TRUE(m.has_value()) << m.error().to_string();
  ASSERT_EQ(m->size(), 2u);
  EXPECT_EQ((*m)[0].address, addr("0000:3b:00.0"));
  EXPECT_EQ((*m)[0].driver, "vfio-pci");
  EXPECT_EQ((*m)[1].driver, "snd_hda_intel");
  EXPECT_EQ(test::code_of(sysfs.group_members(99)), Code::kNotFound);
  EXPECT_EQ(sysfs.vfio_cdev(addr("0000:3b:00.0")).value_or(""), "vfio3");
  EXPECT_FALSE(sysfs.vfio_cdev(addr("0000:3b:00.1")).has_value());
}

TEST(VfioDiagnostics, NotBoundNamesTheCommands) {
  const auto a = addr("0000:3b:00.0");
  const Error e = not_bound_error(a, "nvme", "/sys");
  EXPECT_EQ(e.code(), Code::kFailedPrecondition);
  const std::string& m = e.message();
  EXPECT_NE(m.find("bound to nvme"), std::string::npos) << m;
  EXPECT_NE(m.find("npo-vfio-bind bind 0000:3b:00.0"), std::string::npos) << m;
  EXPECT_NE(m.find("echo vfio-pci | sudo tee /sys/bus/pci/devices/0000:3b:00.0/driver_override"), std::string::npos)
      << m;
  EXPECT_NE(m.find("echo 0000:3b:00.0 | sudo tee /sys/bus/pci/devices/0000:3b:00.0/driver/unbind"), std::string::npos)
      << m;
  EXPECT_NE(m.find("echo 0000:3b:00.0 | sudo tee /sys/bus/pci/drivers_probe"), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << "one line";
  const Error none = not_bound_error(a, "", "/sys");
  EXPECT_NE(none.message().find("bound to no driver"), std::string::npos);
  EXPECT_EQ(none.message().find("unbind"), std::string::npos) << "nothing to unbind";
}

TEST(VfioDiagnostics, OtherFixes) {
  const auto a = addr("0000:3b:00.0");
  const Error g = group_not_viable_error(a, 12,
                                         {{a, "vfio-pci"},
                                          {addr("0000:3b:00.1"), "snd_hda_intel"},
                                          {addr("0000:3b:00.2"), ""},
                                          {addr("0000:3b:00.3"), "vfio-pci"}});
  EXPECT_EQ(g.code(), Code::kFailedPrecondition);
  EXPECT_NE(g.message().find("group 12 is not viable"), std::string::npos) << g.message();
  EXPECT_NE(g.message().find("0000:3b:00.1 (snd_hda_intel), 0000:3b:00.2 (no driver)"), std::string::npos)
      << g.message();
  EXPECT_EQ(g.message().find("0000:3b:00.3"), std::string::npos) << "functions on vfio-pci are fine";

  const Error d = no_dev_vfio_error("/dev", "vfio:all");
  EXPECT_EQ(d.code(), Code::kUnavailable);
  EXPECT_NE(d.message().find("modprobe vfio-pci"), std::string::npos);
  EXPECT_NE(d.message().find("intel_iommu=on"), std::string::npos);
  EXPECT_NE(d.message().find("amd_iommu=on"), std::string::npos);

  const Error p = permission_error("/dev/vfio/12", EACCES);
  EXPECT_EQ(p.code(), Code::kPermissionDenied);
  EXPECT_EQ(p.sys_errno(), EACCES);
  EXPECT_NE(p.message().find("group npo"), std::string::npos);
  EXPECT_NE(p.message().find("70-npo-vfio.rules"), std::string::npos);

  const Error n = no_iommu_group_error(a);
  EXPECT_EQ(n.code(), Code::kFailedPrecondition);
  EXPECT_NE(n.message().find("intel_iommu=on"), std::string::npos);

  const Error s = sys_error(EBUSY, "open /dev/vfio/12");
  EXPECT_EQ(s.code(), Code::kUnavailable);
  EXPECT_EQ(s.sys_errno(), EBUSY);
}

}  // namespace
}  // namespace npo::vfio
