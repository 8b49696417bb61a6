// SPDX-License-Identifier: Apache-2.0
// The VFIO backend: enumeration through sysfs, opening functions through type1 or iommufd.
#include "vfio/backend.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <charconv>
#include <map>
#include <mutex>
#include <set>

#include <fmt/format.h>

#include "npo/fw/pci.hpp"
#include "npo/hal/log.hpp"
#include "vfio/device.hpp"

namespace npo::vfio {

namespace {

using backend::PciAddress;

constexpr std::string_view kForms =
    "vfio:all, vfio:BDF (e.g. vfio:0000:3b:00.0), with optional ?iommu=type1|iommufd|auto and &ids=VVVV:DDDD (hex)";

std::optional<std::uint16_t> parse_hex16(std::string_view s) {
  if (s.starts_with("0x") || s.starts_with("0X")) s.remove_prefix(2);
  std::uint16_t v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 16);
  if (s.empty() || ec != std::errc{} || p != s.data() + s.size()) return std::nullopt;
  return v;
}

/// Which functions are open; shared with the devices so a device closing after its backend
/// is still safe.
struct OpenSet {
  std::mutex mu;
  std::set<PciAddress> open;
};

class VfioBackend final : public backend::Backend {
 public:
  explicit VfioBackend(Options o)
      : opts_(std::move(o)),
        sys_(opts_.sys != nullptr ? *opts_.sys : real_sys()),
        sysfs_(sys_, opts_.paths.sysfs_root),
        open_set_(std::make_shared<OpenSet>()) {}

  std::string_view name() const noexcept override { return "vfio"; }
  const std::string& uri() const noexcept override { return opts_.uri; }

  Result<std::vector<backend::FunctionInfo>> enumerate() override { return sysfs_.list(opts_.filter); }

  Result<std::unique_ptr<backend::Device>> open(const PciAddress& address) override {
    const std::string bdf = address.to_string();
    if (opts_.filter.address && *opts_.filter.address != address) {
      return fail(Code::kNotFound,
                  fmt::format("{}: {} opens only {}", bdf, opts_.uri, opts_.filter.address->to_string()));
    }
    auto fi = sysfs_.function(address);
    if (!fi) return std::unexpected(fi.error());
    if (!opts_.filter.matches(*fi)) {
      return fail(Code::kNotFound, fmt::format("{} ({:04x}:{:04x}) is not a function {} drives", bdf, fi->vendor_id,
                                               fi->device_id, opts_.uri));
    }
    std::lock_guard open_lock(open_mu_);  // serializes opens: group sharing and the open set
    {
      std::lock_guard lock(open_set_->mu);
      if (open_set_->open.contains(address)) {
        return fail(Code::kAlreadyExists, fmt::format("{} is already open in this backend", bdf));
      }
    }
    if (fi->driver != "vfio-pci") return std::unexpected(not_bound_error(address, fi->driver, opts_.paths.sysfs_root));

    DeviceSetup setup;
    setup.sys = &sys_;
    setup.info = *fi;
    IommuApi api = opts_.api;
    if (api == IommuApi::kAuto) {
      const bool group_node =
          fi->iommu_group >= 0 &&
          sys_.access(fmt::format("{}/vfio/{}", opts_.paths.dev_root, fi->iommu_group), F_OK).has_value();
      // sysfs lists vfio-dev/vfioN from Linux 6.1, the character device exists from 6.6.
      const auto cdev_name = sysfs_.vfio_cdev(address);
      const bool cdev =
          cdev_name &&
          sys_.access(fmt::format("{}/vfio/devices/{}", opts_.paths.dev_root, *cdev_name), F_OK).has_value() &&
          sys_.access(opts_.paths.dev_root + "/iommu", F_OK).has_value();
      api = (!group_node && cdev) ? IommuApi::kIommufd : IommuApi::kType1;
    }
    if (api == IommuApi::kType1) {
      std::shared_ptr<Type1Group> group;
      if (auto it = groups_.find(fi->iommu_group); it != groups_.end()) group = it->second.lock();
      if (!group) {
        auto g = Type1Group::open(sys_, opts_.paths, sysfs_, *fi);
        if (!g) return std::unexpected(g.error());
        group = *g;
        groups_[fi->iommu_group] = group;
      }
      auto dfd = group->open_device(address);
      if (!dfd) return std::unexpected(dfd.error());
      setup.device_fd = std::move(*dfd);
      setup.space = std::move(group);
    } else {
      auto s = IommufdSpace::open(sys_, opts_.paths, sysfs_, *fi, setup.device_fd);
      if (!s) return std::unexpected(s.error());
      setup.space = std::move(*s);
    }
    setup.on_close = [set = open_set_, address] {
      std::lock_guard lock(set->mu);
      set->open.erase(address);
    };
    {
      std::lock_guard lock(open_set_->mu);
      open_set_->open.insert(address);
    }
    auto dev = VfioDevice::create(std::move(setup));  // on failure its destructor releases `address`
    if (!dev) return std::unexpected(dev.error());
    return std::unique_ptr<backend::Device>(std::move(*dev));
  }

 private:
  Options opts_;
  Sys& sys_;
  Sysfs sysfs_;
  std::shared_ptr<OpenSet> open_set_;
  std::mutex open_mu_;
  std::map<int, std::weak_ptr<Type1Group>> groups_;  // type1 groups shared by their functions
};

}  // namespace

Result<void> parse_uri(std::string_view rest, std::string_view uri, Options& out) {
  const auto bad = [&](std::string_view why) {
    return fail(Code::kInvalidArgument, fmt::format("{}: {} (accepted: {})", uri, why, kForms));
  };
  out.uri = std::string(uri);
  std::string_view head = rest;
  std::string_view query;
  if (const auto q = rest.find('?'); q != std::string_view::npos) {
    head = rest.substr(0, q);
    query = rest.substr(q + 1);
  }
  out.filter = {};
  if (head == "all") {
    out.filter.vendor_id = fw::pci::kVendorId;
    out.filter.device_id = fw::pci::kDeviceId;
  } else {
    // PciAddress::parse's message lists its own accepted forms: say it once, with the URI's.
    auto a = PciAddress::parse(head);
    if (!a) {
      return fail(Code::kInvalidArgument,
                  fmt::format("{}: '{}' is neither 'all' nor a PCI address dddd:bb:dd.f or bb:dd.f (hex); accepted: {}",
                              uri, head, kForms));
    }
    out.filter.address = *a;
  }
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view kv = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    const auto eq = kv.find('=');
    if (eq == std::string_view::npos) return bad(fmt::format("option '{}' has no value", kv));
    const std::string_view key = kv.substr(0, eq);
    const std::string_view value = kv.substr(eq + 1);
    if (key == "iommu") {
      if (value == "auto") {
        out.api = IommuApi::kAuto;
      } else if (value == "type1") {
        out.api = IommuApi::kType1;
      } else if (value == "iommufd") {
        out.api = IommuApi::kIommufd;
      } else {
        return bad(fmt::format("unknown iommu '{}'", value));
      }
    } else if (key == "ids") {
      const auto colon = value.find(':');
      auto v = colon == std::string_view::npos ? std::nullopt : parse_hex16(value.substr(0, colon));
      auto d = colon == std::string_view::npos ? std::nullopt : parse_hex16(value.substr(colon + 1));
      if (!v || !d) return bad(fmt::format("ids '{}' is not VVVV:DDDD", value));
      out.filter.vendor_id = *v;
      out.filter.device_id = *d;
    } else {
      return bad(fmt::format("unknown option '{}'", key));
    }
  }
  return {};
}

Result<std::unique_ptr<backend::Backend>> open_backend(Options options) {
  Sys& sys = options.sys != nullptr ? *options.sys : real_sys();
  const std::string vfio_dir = options.paths.dev_root + "/vfio";
  if (auto r = sys.access(vfio_dir, F_OK); !r) {
    if (r.error() == EACCES) return std::unexpected(permission_error(vfio_dir, r.error()));
    Error e = no_dev_vfio_error(options.paths.dev_root, options.uri);
    return std::unexpected(Error(e.code(), e.message(), r.error()));
  }
  Sysfs sysfs(sys, options.paths.sysfs_root);
  if (options.filter.address) {
    if (auto fi = sysfs.function(*options.filter.address); !fi) {
      return std::unexpected(std::move(fi.error()).prefixed(options.uri));
    }
  } else if (auto r = sys.access(sysfs.devices_dir(), R_OK); !r) {
    return std::unexpected(Error(Code::kUnavailable,
                                 fmt::format("{}: cannot read {}: is sysfs mounted?", options.uri, sysfs.devices_dir()),
                                 r.error()));
  }
  return std::unique_ptr<backend::Backend>(std::make_unique<VfioBackend>(std::move(options)));
}

}  // namespace npo::vfio
