// SPDX-License-Identifier: Apache-2.0
// PCI discovery through sysfs, and the diagnostics naming the fix for each setup problem.
#include "vfio/sysfs.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

#include <fmt/format.h>

namespace npo::vfio {

namespace {

using backend::PciAddress;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  return s;
}

/// Parses "0x1ee7" (sysfs hex IDs) or "-1"/"0" (decimal, numa_node).
template <typename T>
std::optional<T> parse_number(std::string_view s, int base) {
  s = trim(s);
  if (base == 16 && (s.starts_with("0x") || s.starts_with("0X"))) s.remove_prefix(2);
  T v{};
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v, base);
  if (ec != std::errc{} || p != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

std::string_view basename(std::string_view path) {
  const auto slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

}  // namespace

bool PciFilter::matches(const backend::FunctionInfo& f) const noexcept {
  if (vendor_id && f.vendor_id != *vendor_id) return false;
  if (device_id && f.device_id != *device_id) return false;
  if (address && f.address != *address) return false;
  return true;
}

Sysfs::Sysfs(Sys& sys, std::string sysfs_root) : sys_(sys), root_(std::move(sysfs_root)) {
  while (root_.size() > 1 && root_.back() == '/') root_.pop_back();
}

std::string Sysfs::devices_dir() const { return root_ + "/bus/pci/devices"; }

std::string Sysfs::function_dir(const PciAddress& a) const { return devices_dir() + "/" + a.to_string(); }

Result<std::string> Sysfs::attr(const PciAddress& a, const char* name) const {
  const std::string path = function_dir(a) + "/" + name;
  auto r = sys_.read_file(path, 256);
  if (!r) {
    const int err = r.error();
    const Code code = (err == EACCES || err == EPERM) ? Code::kPermissionDenied
                      : err == ENOENT                 ? Code::kNotFound
                                                      : Code::kUnavailable;
    return std::unexpected(Error(code, fmt::format("{}: cannot read {}", a.to_string(), path), err));
  }
  return std::string(trim(*r));
}

Result<backend::FunctionInfo> Sysfs::function(const PciAddress& a) const {
  if (auto ok = sys_.access(function_dir(a), F_OK); !ok) {
    return std::unexpected(Error(Code::kNotFound,
                                 fmt::format("no PCI function {} ({} does not exist; `lspci -D` lists the functions)",
                                             a.to_string(), function_dir(a)),
                                 ok.error()));
  }
  backend::FunctionInfo fi;
  fi.address = a;
  const auto hex16 = [&](const char* name, std::uint16_t& out) -> Result<void> {
    auto s = attr(a, name);
    if (!s) return std::unexpected(s.error());
    auto v = parse_number<std::uint16_t>(*s, 16);
    if (!v) {
      return fail(Code::kDataLoss,
                  fmt::format("{}: sysfs attribute {} reads '{}', not a 16-bit hex ID", a.to_string(), name, *s));
    }
    out = *v;
    return {};
  };
  if (auto r = hex16("vendor", fi.vendor_id); !r) return std::unexpected(r.error());
  if (auto r = hex16("device", fi.device_id); !r) return std::unexpected(r.error());
  // Optional attributes: absent on some kernels or bus types; keep the defaults then.
  if (auto r = hex16("subsystem_vendor", fi.subsystem_vendor_id); !r && r.error().code() != Code::kNotFound) {
    return std::unexpected(r.error());
  }
  if (auto r = hex16("subsystem_device", fi.subsystem_id); !r && r.error().code() != Code::kNotFound) {
    return std::unexpected(r.error());
  }
  if (auto s = attr(a, "class")) {
    auto v = parse_number<std::uint32_t>(*s, 16);
    if (!v) return fail(Code::kDataLoss, fmt::format("{}: class reads '{}'", a.to_string(), *s));
    fi.class_code = *v & 0xffffffu;
  }
  if (auto s = attr(a, "numa_node")) {
    auto v = parse_number<int>(*s, 10);
    fi.numa_node = v && *v >= 0 ? *v : -1;
  }
  if (auto link = sys_.readlink(function_dir(a) + "/iommu_group")) {
    auto g = parse_number<int>(basename(*link), 10);
    fi.iommu_group = g ? *g : -1;
  }
  if (auto link = sys_.readlink(function_dir(a) + "/driver")) fi.driver = std::string(basename(*link));
  return fi;
}

Result<std::vector<backend::FunctionInfo>> Sysfs::list(const PciFilter& filter) const {
  std::vector<PciAddress> addrs;
  if (filter.address) {
    addrs.push_back(*filter.address);
  } else {
    auto names = sys_.list_dir(devices_dir());
    if (!names) {
      return std::unexpected(Error(
          Code::kUnavailable,
          fmt::format("cannot list {}: is sysfs mounted (mount -t sysfs sysfs /sys) and readable?", devices_dir()),
          names.error()));
    }
    for (const auto& n : *names) {
      if (auto a = PciAddress::parse(n)) addrs.push_back(*a);
    }
  }
  std::sort(addrs.begin(), addrs.end());
  std::vector<backend::FunctionInfo> out;
  for (const auto& a : addrs) {
    auto fi = function(a);
    if (!fi) {
      if (filter.address) return std::unexpected(fi.error());
      continue;  // vanished or unreadable: not ours to report during a scan
    }
    if (filter.matches(*fi)) out.push_back(std::move(*fi));
  }
  return out;
}

Result<std::vector<GroupMember>> Sysfs::group_members(int group) const {
  const std::string dir = fmt::format("{}/kernel/iommu_groups/{}/devices", root_, group);
  auto names = sys_.list_dir(dir);
  if (!names) {
    return std::unexpected(
        Error(Code::kNotFound, fmt::format("IOMMU group {}: cannot list {}", group, dir), names.error()));
  }
  std::vector<GroupMember> out;
  for (const auto& n : *names) {
    auto a = PciAddress::parse(n);
    if (!a) continue;
    GroupMember m{*a, {}};
    if (auto link = sys_.readlink(dir + "/" + n + "/driver")) m.driver = std::string(basename(*link));
    out.push_back(std::move(m));
  }
  std::sort(out.begin(), out.end(), [](const GroupMember& x, const GroupMember& y) { return x.address < y.address; });
  return out;
}

std::optional<std::string> Sysfs::vfio_cdev(const PciAddress& a) const {
  auto names = sys_.list_dir(function_dir(a) + "/vfio-dev");
  if (!names) return std::nullopt;
  for (const auto& n : *names) {
    if (n.starts_with("vfio") && n.size() > 4 && parse_number<unsigned>(std::string_view(n).substr(4), 10)) return n;
  }
  return std::nullopt;
}

// ---- Diagnostics ------------------------------------------------------------------------------

Error not_bound_error(const PciAddress& a, const std::string& driver, const std::string& sysfs_root) {
  const std::string bdf = a.to_string();
  const std::string dir = fmt::format("{}/bus/pci/devices/{}", sysfs_root, bdf);
  std::string unbind;
  if (!driver.empty()) unbind = fmt::format("echo {} | sudo tee {}/driver/unbind; ", bdf, dir);
  return Error(Code::kFailedPrecondition,
               fmt::format("{} is {}, not to vfio-pci. Fix: sudo npo-vfio-bind bind {} (udev/README.md), or by hand: "
                           "sudo modprobe vfio-pci; echo vfio-pci | sudo tee {}/driver_override; {}"
                           "echo {} | sudo tee {}/bus/pci/drivers_probe",
                           bdf, driver.empty() ? "bound to no driver" : "bound to " + driver, bdf, dir, unbind, bdf,
                           sysfs_root));
}

Error no_iommu_group_error(const PciAddress& a) {
  return Error(Code::kFailedPrecondition,
               fmt::format("{} has no IOMMU group: the IOMMU is off. Fix: boot with intel_iommu=on (Intel) or "
                           "amd_iommu=on (AMD) on the kernel command line and enable VT-d/AMD-Vi in the firmware",
                           a.to_string()));
}

Error group_not_viable_error(const PciAddress& a, int group, const std::vector<GroupMember>& members) {
  std::string others;
  for (const auto& m : members) {
    if (m.address == a || m.driver == "vfio-pci" || m.driver == "pci-stub") continue;
    others += fmt::format("{}{} ({})", others.empty() ? "" : ", ", m.address.to_string(),
                          m.driver.empty() ? "no driver" : m.driver);
  }
  if (others.empty()) others = "none found in sysfs";
  return Error(Code::kFailedPrecondition,
               fmt::format("{}: IOMMU group {} is not viable: every function of a group must be bound to vfio-pci "
                           "(or to no driver) before any can be used. Other functions still bound elsewhere: {}. "
                           "Fix: sudo npo-vfio-bind bind <each of them>, or move the card to a slot with its own "
                           "group (ACS)",
                           a.to_string(), group, others));
}

Error no_dev_vfio_error(const std::string& dev_root, std::string_view uri) {
  return Error(Code::kUnavailable,
               fmt::format("{}: {}/vfio does not exist: load vfio-pci (sudo modprobe vfio-pci) and enable the IOMMU "
                           "(intel_iommu=on / amd_iommu=on on the kernel command line)",
                           uri, dev_root));
}

Error permission_error(const std::string& path, int err) {
  return Error(Code::kPermissionDenied,
               fmt::format("permission denied opening {}: add the user to group npo (sudo usermod -aG npo $USER, "
                           "then log in again) and install the udev rule 70-npo-vfio.rules (udev/README.md), or run "
                           "as root",
                           path),
               err);
}

Error sys_error(int err, std::string what) {
  return Error(errno_code(err), fmt::format("{}: {}", what, std::strerror(err)), err);
}

}  // namespace npo::vfio
