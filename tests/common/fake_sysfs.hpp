// SPDX-License-Identifier: Apache-2.0
// Test helper: a fake sysfs tree in a temporary directory, <root>/bus/pci/devices/<bdf> with
// vendor, device and the driver link, as drivers/vfio/sysfs.cpp reads them (tests/vfio's
// FakeTree in small, for tests that see only the public API: npo::vfio_bound_cards and the
// tools' default backend through NPO_SYSFS_ROOT).
#pragma once

#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace npo_test {

class FakeSysfs {
 public:
  FakeSysfs() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "npo-sysfs-XXXXXX").string();
    root_ = ::mkdtemp(tmpl.data());
    std::filesystem::create_directories(root_ / "bus/pci/devices");
    std::filesystem::create_directories(root_ / "bus/pci/drivers");
  }
  ~FakeSysfs() {
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }
  FakeSysfs(const FakeSysfs&) = delete;
  FakeSysfs& operator=(const FakeSysfs&) = delete;

  /// Adds function `bdf` ("0000:3b:00.0") with IDs `vendor`:`device`, bound to `driver`
  /// ("vfio-pci"; empty: bound to none).
  void add(const std::string& bdf, unsigned vendor, unsigned device, const std::string& driver) {
    const auto dir = root_ / "bus/pci/devices" / bdf;
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "vendor") << hex16(vendor);
    std::ofstream(dir / "device") << hex16(device);
    if (!driver.empty()) {
      std::filesystem::create_directories(root_ / "bus/pci/drivers" / driver);
      std::filesystem::create_directory_symlink(root_ / "bus/pci/drivers" / driver, dir / "driver");
    }
  }
  /// The root to pass as sysfs_root (or NPO_SYSFS_ROOT).
  [[nodiscard]] std::string root() const { return root_.string(); }

 private:
  static std::string hex16(unsigned v) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "0x%04x\n", v & 0xffffu);
    return buf;
  }
  std::filesystem::path root_;
};

}  // namespace npo_test
