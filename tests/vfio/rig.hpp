// SPDX-License-Identifier: Apache-2.0
// A test rig: a fake sysfs//dev tree with one card (0000:3b:00.0, IOMMU group 12, cdev
// vfio3, bound to vfio-pci), a MemoryDevice behind it and the fake kernel, plus helpers to
// open the VFIO backend over them with either IOMMU API.
#pragma once

#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "fake_kernel.hpp"
#include "vfio/backend.hpp"
#include "vfio/device.hpp"

namespace npo::vfio::test {

/// Code of a Result, kOk on success (for EXPECT_EQ).
template <typename T>
Code code_of(const Result<T>& r) {
  return r ? Code::kOk : r.error().code();
}

struct Rig {
  static constexpr const char* kBdf = "0000:3b:00.0";
  static constexpr int kGroup = 12;

  FakeTree tree;
  MemoryDevice dev{0x1ee7, 0x0a01};
  std::unique_ptr<FakeKernel> kernel;

  /// `function`: how the card looks in sysfs (defaults: bound to vfio-pci, group 12, vfio3).
  explicit Rig(FakeTree::Function function = default_function(), bool iommufd_nodes = true) {
    tree.add_vfio_nodes(iommufd_nodes);
    tree.add_function(function);
    kernel = std::make_unique<FakeKernel>(tree.dev_root());
    if (function.iommu_group >= 0) kernel->add_group(function.iommu_group, {function.bdf});
    kernel->add_device(function.bdf, &dev, function.cdev);
  }

  static FakeTree::Function default_function() {
    FakeTree::Function f;
    f.bdf = kBdf;
    f.numa_node = 1;
    f.iommu_group = kGroup;
    f.cdev = "vfio3";
    return f;
  }

  [[nodiscard]] Options options(IommuApi api, std::string rest = "all") const {
    Options o;
    const std::string uri = "vfio:" + rest;
    EXPECT_TRUE(parse_uri(rest, uri, o).has_value());
    o.sys = kernel.get();
    o.paths = {tree.sys_root(), tree.dev_root()};
    o.api = api;
    return o;
  }

  [[nodiscard]] Result<std::unique_ptr<backend::Backend>> backend(IommuApi api) const {
    return open_backend(options(api));
  }

  /// Opens the backend and the card; fails the test (returning nulls) on error.
  struct Opened {
    std::unique_ptr<backend::Backend> be;
    std::unique_ptr<backend::Device> dev;
    [[nodiscard]] VfioDevice& vfio() const { return static_cast<VfioDevice&>(*dev); }
  };
  Opened open(IommuApi api) const {
    Opened o;
    auto be = backend(api);
    EXPECT_TRUE(be.has_value()) << be.error().to_string();
    if (!be) return o;
    o.be = std::move(*be);
    auto d = o.be->open(*backend::PciAddress::parse(kBdf));
    EXPECT_TRUE(d.has_value()) << d.error().to_string();
    if (d) o.dev = std::move(*d);
    return o;
  }

  /// Opening the card fails: returns the error (a success fails the test).
  Error open_error(IommuApi api) const {
    auto be = backend(api);
    if (!be) return be.error();
    auto d = (*be)->open(*backend::PciAddress::parse(kBdf));
    EXPECT_FALSE(d.has_value()) << "opening succeeded";
    return d ? Error() : d.error();
  }
};

/// Parameter name printer for IommuApi-parameterized suites.
inline std::string api_param_name(const ::testing::TestParamInfo<IommuApi>& info) {
  return std::string(iommu_api_name(info.param));
}

}  // namespace npo::vfio::test
