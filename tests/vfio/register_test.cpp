// SPDX-License-Identifier: Apache-2.0
// The "vfio" scheme: URIs, the one-line failure on a machine without VFIO, open_backend's
// checks, and enumeration/opening through a registry.
#include "vfio/register.hpp"

#include <unistd.h>

#include <cerrno>

#include <gtest/gtest.h>

#include "npo/hal/backend/registry.hpp"
#include "rig.hpp"

namespace npo::vfio {
namespace {

using test::code_of;
using test::Rig;

TEST(VfioRegistry, FormsAreListed) {
  const auto forms = backend::builtin_registry().forms();
  EXPECT_NE(std::find(forms.begin(), forms.end(), "vfio:all"), forms.end());
  backend::Registry r;
  ASSERT_TRUE(register_backend(r).has_value());
  EXPECT_EQ(code_of(register_backend(r)), Code::kAlreadyExists);
}

TEST(VfioRegistry, NoVfioOnThisMachineIsOneClearLine) {
  if (::access("/dev/vfio", F_OK) == 0) GTEST_SKIP() << "/dev/vfio exists here: the no-VFIO failure cannot be shown";
  for (const char* uri : {"vfio:all", "vfio:0000:3b:00.0", "vfio:all?iommu=iommufd"}) {
    auto be = backend::builtin_registry().open(uri);
    ASSERT_FALSE(be.has_value()) << uri;
    const Error& e = be.error();
    EXPECT_EQ(e.code(), Code::kUnavailable) << uri;
    EXPECT_EQ(e.sys_errno(), ENOENT);
    const std::string line = e.to_string();
    EXPECT_EQ(line.find('\n'), std::string::npos) << line;
    EXPECT_NE(line.find("/dev/vfio does not exist"), std::string::npos) << line;
    EXPECT_NE(line.find("modprobe vfio-pci"), std::string::npos) << line;
    EXPECT_NE(line.find("intel_iommu=on"), std::string::npos) << line;
    EXPECT_NE(line.find(uri), std::string::npos) << "names the URI: " << line;
  }
}

TEST(VfioRegistry, BadUrisListTheForms) {
  for (const char* uri : {"vfio:", "vfio:everything", "vfio:0000:3b:00.0?iommu=vtd", "vfio:all?ids=1ee7",
                          "vfio:all?x=1", "vfio:all?iommu"}) {
    auto be = backend::builtin_registry().open(uri);
    ASSERT_FALSE(be.has_value()) << uri;
    EXPECT_EQ(be.error().code(), Code::kInvalidArgument) << uri;
    EXPECT_NE(be.error().message().find("vfio:all"), std::string::npos) << be.error().message();
  }
}

TEST(VfioRegistry, ParseUri) {
  Options o;
  ASSERT_TRUE(parse_uri("all", "vfio:all", o).has_value());
  EXPECT_EQ(o.uri, "vfio:all");
  EXPECT_EQ(o.filter.vendor_id, std::optional<std::uint16_t>(0x1ee7));
  EXPECT_EQ(o.filter.device_id, std::optional<std::uint16_t>(0x0a01));
  EXPECT_FALSE(o.filter.address.has_value());
  EXPECT_EQ(o.api, IommuApi::kAuto);

  ASSERT_TRUE(parse_uri("3b:00.0?iommu=iommufd", "vfio:3b:00.0?iommu=iommufd", o).has_value());
  EXPECT_EQ(o.filter.address->to_string(), "0000:3b:00.0");
  EXPECT_FALSE(o.filter.vendor_id.has_value()) << "one function: any IDs";
  EXPECT_EQ(o.api, IommuApi::kIommufd);

  ASSERT_TRUE(parse_uri("all?ids=8086:0b25&iommu=type1", "vfio:all?ids=8086:0b25&iommu=type1", o).has_value());
  EXPECT_EQ(o.filter.vendor_id, std::optional<std::uint16_t>(0x8086));
  EXPECT_EQ(o.filter.device_id, std::optional<std::uint16_t>(0x0b25));
  EXPECT_EQ(o.api, IommuApi::kType1);
}

TEST(VfioBackend, OpenChecksTheMachine) {
  {
    Rig rig;
    std::filesystem::remove_all(rig.tree.dir() / "dev/vfio");
    auto be = rig.backend(IommuApi::kAuto);
    ASSERT_FALSE(be.has_value());
    EXPECT_EQ(be.error().code(), Code::kUnavailable);
    EXPECT_NE(be.error().message().find("modprobe vfio-pci"), std::string::npos);
  }
  {
    Rig rig;
    auto o = rig.options(IommuApi::kAuto, "0000:99:00.0");
    auto be = open_backend(o);
    ASSERT_FALSE(be.has_value());
    EXPECT_EQ(be.error().code(), Code::kNotFound);
    EXPECT_NE(be.error().message().find("vfio:0000:99:00.0"), std::string::npos) << be.error().message();
  }
  {
    Rig rig;
    std::filesystem::remove_all(rig.tree.dir() / "sys/bus");
    EXPECT_EQ(code_of(rig.backend(IommuApi::kAuto)), Code::kUnavailable);
  }
}

TEST(VfioBackend, EnumerateAndOpenRespectTheFilter) {
  Rig rig;
  auto other = Rig::default_function();
  other.bdf = "0000:00:03.0";
  other.vendor = 0x1af4;
  other.device = 0x1041;
  other.iommu_group = 3;
  other.cdev.reset();
  rig.tree.add_function(other);

  auto be = rig.backend(IommuApi::kType1);
  ASSERT_TRUE(be.has_value());
  EXPECT_EQ((*be)->name(), "vfio");
  EXPECT_EQ((*be)->uri(), "vfio:all");
  auto fns = (*be)->enumerate();
  ASSERT_TRUE(fns.has_value());
  ASSERT_EQ(fns->size(), 1u) << "vfio:all lists the card, not the virtio function";
  EXPECT_EQ(fns->front().address.to_string(), Rig::kBdf);
  EXPECT_EQ(code_of((*be)->open(*backend::PciAddress::parse("0000:00:03.0"))), Code::kNotFound);
  EXPECT_EQ(code_of((*be)->open(*backend::PciAddress::parse("0000:77:00.0"))), Code::kNotFound);

  auto one = open_backend(rig.options(IommuApi::kType1, "0000:00:03.0"));
  ASSERT_TRUE(one.has_value());
  auto listed = (*one)->enumerate();
  ASSERT_TRUE(listed.has_value());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ(listed->front().vendor_id, 0x1af4);
  EXPECT_EQ(code_of((*one)->open(*backend::PciAddress::parse(Rig::kBdf))), Code::kNotFound)
      << "vfio:BDF opens BDF only";
}

TEST(VfioBackend, DeviceMayOutliveItsBackend) {
  Rig rig;
  auto o = rig.open(IommuApi::kType1);
  ASSERT_NE(o.dev, nullptr);
  o.be.reset();
  std::array<std::byte, 2> b{};
  EXPECT_TRUE(o.dev->config_read(0, b).has_value());
  o.dev.reset();
  EXPECT_EQ(rig.kernel->open_fds(), 0u);
}

}  // namespace
}  // namespace npo::vfio
