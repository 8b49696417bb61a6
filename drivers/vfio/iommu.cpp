// SPDX-License-Identifier: Apache-2.0
// IOMMU address spaces: request validation shared by both APIs, the type1v2 container/group
// setup, and the iommufd cdev setup.
#include "vfio/iommu.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include <fmt/format.h>

#include "npo/hal/log.hpp"
#include "vfio/uapi.hpp"

namespace npo::vfio {

namespace {

using backend::DmaAccess;
using backend::IovaRange;

constexpr std::uint64_t kPage = 4096;

auto& logger() { return npo::log::get(npo::log::Subsystem::kVfio); }

void sort_ranges(std::vector<IovaRange>& r) {
  std::sort(r.begin(), r.end(), [](const IovaRange& a, const IovaRange& b) { return a.first < b.first; });
}

/// The canonical code of a failed map/unmap and the fix to name.
Error dma_error(int err, std::string_view what, std::uint64_t iova, std::uint64_t length) {
  std::string fix;
  Code code = errno_code(err);
  switch (err) {
    case ENOMEM:
      code = Code::kResourceExhausted;
      fix =
          ": pinned memory exceeds RLIMIT_MEMLOCK; raise it (ulimit -l, LimitMEMLOCK= in the systemd unit, "
          "memlock in /etc/security/limits.conf) or map less";
      break;
    case ENOSPC:
      code = Code::kResourceExhausted;
      fix =
          ": the IOMMU driver's mapping limit is reached (vfio_iommu_type1 dma_entry_limit, default 65535); map "
          "fewer, larger buffers or raise the module parameter";
      break;
    case EEXIST: code = Code::kAlreadyExists; break;
    case EINVAL:
      code = Code::kInvalidArgument;
      fix = ": the kernel refused the address, size or page size";
      break;
    case EFAULT:
      code = Code::kInvalidArgument;
      fix = ": the host range is not mapped memory of this process";
      break;
    case EPERM:
    case EACCES: code = Code::kPermissionDenied; break;
    case ENODEV:
    case EIO:
      code = Code::kUnavailable;
      fix = ": the device is gone (surprise removal?)";
      break;
    case ENOENT: code = Code::kNotFound; break;
    default: break;
  }
  return Error(code, fmt::format("{} IOVA 0x{:x}+0x{:x}: {}{}", what, iova, length, std::strerror(err), fix), err);
}

Error open_node_error(const std::string& path, int err, std::string_view missing_fix) {
  if (err == EACCES || err == EPERM) return permission_error(path, err);
  if (err == ENOENT) {
    return Error(Code::kFailedPrecondition, fmt::format("{} does not exist: {}", path, missing_fix), err);
  }
  if (err == EBUSY) {
    return Error(Code::kUnavailable,
                 fmt::format("{} is busy: another process (an npo tool, QEMU, DPDK) holds it; close that first", path),
                 err);
  }
  return sys_error(err, "open " + path);
}

}  // namespace

std::string_view iommu_api_name(IommuApi api) noexcept {
  switch (api) {
    case IommuApi::kAuto: return "auto";
    case IommuApi::kType1: return "type1";
    case IommuApi::kIommufd: return "iommufd";
  }
  return "?";
}

Error interrupt_remapping_error(const backend::PciAddress& a, IommuApi api) {
  const char* param = api == IommuApi::kIommufd ? "sudo modprobe iommufd allow_unsafe_interrupts=1"
                                                : "sudo modprobe vfio_iommu_type1 allow_unsafe_interrupts=1";
  return Error(Code::kFailedPrecondition,
               fmt::format("{}: the kernel refused the IOMMU ({}: EPERM) because the platform has no interrupt "
                           "remapping. Fix: enable interrupt remapping (VT-d/AMD-Vi with x2APIC in the firmware; "
                           "intremap=on for QEMU's intel-iommu), or, accepting that the device can forge "
                           "interrupts: {}",
                           a.to_string(), iommu_api_name(api), param),
               EPERM);
}

// ---- DmaSpace ---------------------------------------------------------------------------------

Result<void> DmaSpace::map(const void* vaddr, std::uint64_t iova, std::uint64_t length, DmaAccess access,
                           const void* owner) {
  const auto va = reinterpret_cast<std::uintptr_t>(vaddr);
  if (length == 0 || length % kPage != 0 || iova % kPage != 0 || va % kPage != 0) {
    return fail(Code::kInvalidArgument,
                fmt::format("dma_map: vaddr {}, IOVA 0x{:x} and length 0x{:x} must be 4 KiB aligned and non-zero",
                            vaddr, iova, length));
  }
  if (iova + length - 1 < iova) {
    return fail(Code::kOutOfRange, fmt::format("dma_map: IOVA 0x{:x}+0x{:x} wraps around", iova, length));
  }
  const std::uint64_t last = iova + length - 1;
  const bool inside = std::any_of(ranges_.begin(), ranges_.end(),
                                  [&](const IovaRange& r) { return iova >= r.first && last <= r.last; });
  if (!inside) {
    std::string allowed;
    for (const auto& r : ranges_)
      allowed += fmt::format("{}[0x{:x}, 0x{:x}]", allowed.empty() ? "" : " ", r.first, r.last);
    return fail(Code::kOutOfRange,
                fmt::format("dma_map: IOVA [0x{:x}, 0x{:x}] is outside the ranges the IOMMU allows: {}", iova, last,
                            allowed.empty() ? "none" : allowed));
  }
  std::lock_guard lock(mu_);
  auto next = maps_.lower_bound(iova);
  if (next != maps_.end() && next->first <= last) {
    return fail(Code::kAlreadyExists, fmt::format("dma_map: IOVA 0x{:x}+0x{:x} overlaps the mapping at 0x{:x}+0x{:x}",
                                                  iova, length, next->first, next->second.length));
  }
  if (next != maps_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second.length > iova) {
      return fail(Code::kAlreadyExists, fmt::format("dma_map: IOVA 0x{:x}+0x{:x} overlaps the mapping at 0x{:x}+0x{:x}",
                                                    iova, length, prev->first, prev->second.length));
    }
  }
  if (auto r = kernel_map(va, iova, length, access); !r) {
    return std::unexpected(
        dma_error(r.error(), api() == IommuApi::kType1 ? "VFIO_IOMMU_MAP_DMA" : "IOMMU_IOAS_MAP", iova, length));
  }
  maps_.emplace(iova, Mapping{length, owner});
  return {};
}

Result<void> DmaSpace::unmap(std::uint64_t iova, std::uint64_t length) {
  std::lock_guard lock(mu_);
  auto it = maps_.find(iova);
  if (it == maps_.end() || it->second.length != length) {
    return fail(
        Code::kNotFound,
        fmt::format("dma_unmap: no mapping at IOVA 0x{:x} with length 0x{:x}{}", iova, length,
                    it == maps_.end() ? "" : fmt::format(" (the mapping there has 0x{:x} bytes)", it->second.length)));
  }
  const char* what = api() == IommuApi::kType1 ? "VFIO_IOMMU_UNMAP_DMA" : "IOMMU_IOAS_UNMAP";
  auto r = kernel_unmap(iova, length);
  if (!r) return std::unexpected(dma_error(r.error(), what, iova, length));
  maps_.erase(it);
  if (*r != length) {
    return fail(Code::kInternal,
                fmt::format("{} IOVA 0x{:x}: the kernel unmapped 0x{:x} bytes, not 0x{:x}", what, iova, *r, length));
  }
  return {};
}

void DmaSpace::unmap_owned_by(const void* owner) noexcept {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> mine;
  {
    std::lock_guard lock(mu_);
    for (const auto& [iova, m] : maps_) {
      if (m.owner == owner) mine.emplace_back(iova, m.length);
    }
  }
  for (const auto& [iova, len] : mine) {
    if (auto r = unmap(iova, len); !r) logger().warn("closing device: {}", r.error().to_string());
  }
}

std::size_t DmaSpace::mapping_count() const {
  std::lock_guard lock(mu_);
  return maps_.size();
}

// ---- type1 ------------------------------------------------------------------------------------

Result<std::optional<std::vector<IovaRange>>> parse_type1_iova_ranges(std::span<const std::byte> buf) {
  uapi::Type1Info info{};
  if (buf.size() < sizeof info) return fail(Code::kDataLoss, "VFIO_IOMMU_GET_INFO: answer shorter than its header");
  std::memcpy(&info, buf.data(), sizeof info);
  if ((info.flags & VFIO_IOMMU_INFO_CAPS) == 0 || info.cap_offset == 0) return std::optional<std::vector<IovaRange>>{};
  std::set<std::uint32_t> seen;
  std::uint32_t off = info.cap_offset;
  while (off != 0) {
    if (off < sizeof info || off % 4 != 0 || off > buf.size() || buf.size() - off < sizeof(uapi::InfoCapHeader) ||
        !seen.insert(off).second || seen.size() > 64) {
      return fail(Code::kDataLoss, fmt::format("VFIO_IOMMU_GET_INFO: capability chain corrupt at offset {}", off));
    }
    uapi::InfoCapHeader hdr{};
    std::memcpy(&hdr, buf.data() + off, sizeof hdr);
    if (hdr.id == VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE) {
      uapi::Type1IovaRangeCap cap{};
      if (buf.size() - off < sizeof cap) return fail(Code::kDataLoss, "VFIO_IOMMU_GET_INFO: IOVA capability truncated");
      std::memcpy(&cap, buf.data() + off, sizeof cap);
      const std::size_t room = (buf.size() - off - sizeof cap) / sizeof(uapi::Type1IovaRange);
      if (cap.nr_iovas > room) {
        return fail(Code::kDataLoss,
                    fmt::format("VFIO_IOMMU_GET_INFO: {} IOVA ranges claimed, {} fit the answer", cap.nr_iovas, room));
      }
      std::vector<IovaRange> out;
      for (std::uint32_t i = 0; i < cap.nr_iovas; ++i) {
        uapi::Type1IovaRange r{};
        std::memcpy(&r, buf.data() + off + sizeof cap + i * sizeof r, sizeof r);
        if (r.end < r.start) return fail(Code::kDataLoss, "VFIO_IOMMU_GET_INFO: IOVA range ends before it starts");
        out.push_back({r.start, r.end});
      }
      sort_ranges(out);
      return std::optional<std::vector<IovaRange>>(std::move(out));
    }
    off = hdr.next;
  }
  return std::optional<std::vector<IovaRange>>{};
}

Result<std::shared_ptr<Type1Group>> Type1Group::open(Sys& sys, const Paths& paths, const Sysfs& sysfs,
                                                     const backend::FunctionInfo& fi) {
  const std::string bdf = fi.address.to_string();
  if (fi.iommu_group < 0) return std::unexpected(no_iommu_group_error(fi.address));
  std::shared_ptr<Type1Group> g(new Type1Group(sys));
  g->group_ = fi.iommu_group;

  const std::string cpath = paths.dev_root + "/vfio/vfio";
  auto c = sys.open(cpath, O_RDWR);
  if (!c) {
    return std::unexpected(open_node_error(
        cpath, c.error(),
        "load VFIO (sudo modprobe vfio-pci) and enable the IOMMU (intel_iommu=on / amd_iommu=on); a kernel built "
        "without CONFIG_VFIO_GROUP needs iommu=iommufd"));
  }
  g->container_ = Fd(sys, *c);
  auto ver = sys.ioctl_int(*c, uapi::kGetApiVersion, 0);
  if (!ver) return std::unexpected(sys_error(ver.error(), "VFIO_GET_API_VERSION on " + cpath));
  if (*ver != VFIO_API_VERSION) {
    return fail(Code::kUnimplemented,
                fmt::format("{}: VFIO API version {}, this build speaks {}", cpath, *ver, VFIO_API_VERSION));
  }
  auto ext = sys.ioctl_int(*c, uapi::kCheckExtension, VFIO_TYPE1v2_IOMMU);
  if (!ext || *ext <= 0) {
    return std::unexpected(Error(Code::kUnimplemented,
                                 fmt::format("{}: the kernel has no VFIO type1v2 IOMMU driver (VFIO_CHECK_EXTENSION "
                                             "VFIO_TYPE1v2_IOMMU = {}): sudo modprobe vfio_iommu_type1, or use "
                                             "iommu=iommufd",
                                             cpath, ext ? std::to_string(*ext) : std::strerror(ext.error())),
                                 ext ? 0 : ext.error()));
  }

  const std::string gpath = fmt::format("{}/vfio/{}", paths.dev_root, fi.iommu_group);
  auto gfd = sys.open(gpath, O_RDWR);
  if (!gfd) {
    return std::unexpected(open_node_error(
        gpath, gfd.error(),
        fi.driver == "vfio-pci"
            ? fmt::format("{} is bound to vfio-pci but its group node is missing: check `ls -l {}/vfio` and the "
                          "udev log (udevadm monitor)",
                          bdf, paths.dev_root)
            : not_bound_error(fi.address, fi.driver, paths.sysfs_root).message()));
  }
  g->group_fd_ = Fd(sys, *gfd);

  uapi::GroupStatus st{};
  st.argsz = sizeof st;
  if (auto r = sys.ioctl(*gfd, uapi::kGroupGetStatus, &st); !r) {
    return std::unexpected(sys_error(r.error(), "VFIO_GROUP_GET_STATUS on " + gpath));
  }
  if ((st.flags & VFIO_GROUP_FLAGS_VIABLE) == 0) {
    auto members = sysfs.group_members(fi.iommu_group);
    return std::unexpected(
        group_not_viable_error(fi.address, fi.iommu_group, members ? *members : std::vector<GroupMember>{}));
  }
  int cfd = *c;
  if (auto r = sys.ioctl(*gfd, uapi::kGroupSetContainer, &cfd); !r) {
    return std::unexpected(sys_error(r.error(), "VFIO_GROUP_SET_CONTAINER of " + gpath));
  }
  if (auto r = sys.ioctl_int(*c, uapi::kSetIommu, VFIO_TYPE1v2_IOMMU); !r) {
    if (r.error() == EPERM) return std::unexpected(interrupt_remapping_error(fi.address, IommuApi::kType1));
    return std::unexpected(sys_error(r.error(), "VFIO_SET_IOMMU(VFIO_TYPE1v2_IOMMU) for group " + gpath));
  }
  if (auto r = g->read_iommu_info(); !r) return std::unexpected(r.error());
  logger().debug("{}: type1v2 container, group {}, {} IOVA range(s)", bdf, g->group_, g->ranges_.size());
  return g;
}

Result<void> Type1Group::read_iommu_info() {
  // First with the bare header: the kernel raises argsz to what the capability chain needs.
  std::vector<std::byte> buf(sizeof(uapi::Type1Info));
  for (int attempt = 0; attempt < 4; ++attempt) {
    uapi::Type1Info info{};
    info.argsz = static_cast<std::uint32_t>(buf.size());
    std::memset(buf.data(), 0, buf.size());
    std::memcpy(buf.data(), &info, sizeof info);
    if (auto r = sys_.ioctl(container_.get(), uapi::kIommuGetInfo, buf.data()); !r) {
      return std::unexpected(sys_error(r.error(), "VFIO_IOMMU_GET_INFO"));
    }
    std::memcpy(&info, buf.data(), sizeof info);
    if (info.argsz > buf.size()) {
      if (info.argsz > (1u << 20)) return fail(Code::kDataLoss, "VFIO_IOMMU_GET_INFO asks for more than 1 MiB");
      buf.resize(info.argsz);
      continue;
    }
    pgsizes_ = (info.flags & VFIO_IOMMU_INFO_PGSIZES) != 0 ? info.iova_pgsizes : 0;
    auto ranges = parse_type1_iova_ranges(buf);
    if (!ranges) return std::unexpected(ranges.error());
    if (*ranges) {
      ranges_ = std::move(**ranges);
    } else {
      // Kernels before 5.4 do not report ranges: assume the 48-bit space minus nothing.
      ranges_ = {{0, (std::uint64_t{1} << 48) - 1}};
      logger().info("VFIO_IOMMU_GET_INFO reports no IOVA ranges (kernel < 5.4?): assuming [0, 2^48)");
    }
    if (ranges_.empty()) return fail(Code::kUnavailable, "VFIO_IOMMU_GET_INFO: the IOMMU allows no IOVA at all");
    return {};
  }
  return fail(Code::kDataLoss, "VFIO_IOMMU_GET_INFO keeps asking for a larger buffer");
}

Type1Group::~Type1Group() {
  group_fd_.reset();   // implies VFIO_GROUP_UNSET_CONTAINER
  container_.reset();  // the last group gone: the IOMMU mappings go with it
}

Result<Fd> Type1Group::open_device(const backend::PciAddress& a) {
  std::string name = a.to_string();
  auto fd = sys_.ioctl(group_fd_.get(), uapi::kGroupGetDeviceFd, name.data());
  if (!fd) {
    const int err = fd.error();
    if (err == ENODEV || err == ENOENT) {
      return std::unexpected(
          Error(Code::kNotFound,
                fmt::format("VFIO_GROUP_GET_DEVICE_FD({}): not a device of IOMMU group {}", name, group_), err));
    }
    if (err == EBUSY) {
      return std::unexpected(Error(Code::kUnavailable,
                                   fmt::format("VFIO_GROUP_GET_DEVICE_FD({}): device busy (opened elsewhere, or "
                                               "still resetting)",
                                               name),
                                   err));
    }
    return std::unexpected(sys_error(err, fmt::format("VFIO_GROUP_GET_DEVICE_FD({})", name)));
  }
  return Fd(sys_, *fd);
}

SysResult<void> Type1Group::kernel_map(std::uint64_t vaddr, std::uint64_t iova, std::uint64_t length,
                                       DmaAccess access) {
  uapi::Type1DmaMap m{};
  m.argsz = sizeof m;
  m.flags = ((static_cast<unsigned>(access) & static_cast<unsigned>(DmaAccess::kRead)) ? VFIO_DMA_MAP_FLAG_READ : 0u) |
            ((static_cast<unsigned>(access) & static_cast<unsigned>(DmaAccess::kWrite)) ? VFIO_DMA_MAP_FLAG_WRITE : 0u);
  m.vaddr = vaddr;
  m.iova = iova;
  m.size = length;
  if (auto r = sys_.ioctl(container_.get(), uapi::kIommuMapDma, &m); !r) return std::unexpected(r.error());
  return {};
}

SysResult<std::uint64_t> Type1Group::kernel_unmap(std::uint64_t iova, std::uint64_t length) {
  uapi::Type1DmaUnmap u{};
  u.argsz = sizeof u;
  u.iova = iova;
  u.size = length;
  if (auto r = sys_.ioctl(container_.get(), uapi::kIommuUnmapDma, &u); !r) return std::unexpected(r.error());
  return u.size;
}

// ---- iommufd ----------------------------------------------------------------------------------

Result<std::shared_ptr<IommufdSpace>> IommufdSpace::open(Sys& sys, const Paths& paths, const Sysfs& sysfs,
                                                         const backend::FunctionInfo& fi, Fd& device_fd) {
  const std::string bdf = fi.address.to_string();
  auto cdev = sysfs.vfio_cdev(fi.address);
  if (!cdev) {
    if (fi.driver != "vfio-pci") return std::unexpected(not_bound_error(fi.address, fi.driver, paths.sysfs_root));
    return fail(Code::kUnimplemented,
                fmt::format("{}: no VFIO device cdev ({}/vfio-dev/vfioN): the kernel is older than 6.6 or built "
                            "without CONFIG_VFIO_DEVICE_CDEV. Fix: use iommu=type1",
                            bdf, sysfs.function_dir(fi.address)));
  }
  std::shared_ptr<IommufdSpace> s(new IommufdSpace(sys));
  const std::string dpath = fmt::format("{}/vfio/devices/{}", paths.dev_root, *cdev);
  auto dfd = sys.open(dpath, O_RDWR);
  if (!dfd) {
    if (dfd.error() == ENOENT) {
      // Linux 6.1..6.5 list <function>/vfio-dev/vfioN in sysfs but create no character device.
      return std::unexpected(Error(Code::kUnimplemented,
                                   fmt::format("{} does not exist: the kernel has no VFIO device cdev (Linux < 6.6 or "
                                               "CONFIG_VFIO_DEVICE_CDEV off). Fix: use iommu=type1",
                                               dpath),
                                   ENOENT));
    }
    return std::unexpected(open_node_error(dpath, dfd.error(), ""));
  }
  Fd dev(sys, *dfd);
  const std::string ipath = paths.dev_root + "/iommu";
  auto ifd = sys.open(ipath, O_RDWR);
  if (!ifd) {
    if (ifd.error() == ENOENT) {
      return std::unexpected(Error(Code::kUnimplemented,
                                   fmt::format("{} does not exist: the kernel has no iommufd (CONFIG_IOMMUFD); "
                                               "sudo modprobe iommufd, or use iommu=type1",
                                               ipath),
                                   ENOENT));
    }
    return std::unexpected(open_node_error(ipath, ifd.error(), ""));
  }
  s->iommufd_ = Fd(sys, *ifd);

  uapi::DeviceBindIommufd bind{};
  bind.argsz = sizeof bind;
  bind.iommufd = *ifd;
  if (auto r = sys.ioctl(*dfd, uapi::kDeviceBindIommufd, &bind); !r) {
    if (r.error() == ENOTTY) {
      return std::unexpected(Error(Code::kUnimplemented,
                                   fmt::format("VFIO_DEVICE_BIND_IOMMUFD on {}: not supported by this kernel", dpath),
                                   ENOTTY));
    }
    if (r.error() == EBUSY || r.error() == EEXIST) {
      return std::unexpected(Error(Code::kUnavailable,
                                   fmt::format("VFIO_DEVICE_BIND_IOMMUFD on {}: the device is already in use (its "
                                               "group is open through /dev/vfio/<group>, or another process bound it)",
                                               dpath),
                                   r.error()));
    }
    return std::unexpected(sys_error(r.error(), "VFIO_DEVICE_BIND_IOMMUFD on " + dpath));
  }
  s->devid_ = bind.out_devid;

  uapi::IoasAlloc alloc{};
  alloc.size = sizeof alloc;
  if (auto r = sys.ioctl(*ifd, uapi::kIoasAlloc, &alloc); !r) {
    return std::unexpected(sys_error(r.error(), "IOMMU_IOAS_ALLOC on " + ipath));
  }
  s->ioas_ = alloc.out_ioas_id;

  uapi::DeviceAttachIommufdPt attach{};
  attach.argsz = sizeof attach;
  attach.pt_id = s->ioas_;
  if (auto r = sys.ioctl(*dfd, uapi::kDeviceAttachIommufdPt, &attach); !r) {
    if (r.error() == EPERM) return std::unexpected(interrupt_remapping_error(fi.address, IommuApi::kIommufd));
    return std::unexpected(
        sys_error(r.error(), fmt::format("VFIO_DEVICE_ATTACH_IOMMUFD_PT(IOAS {}) on {}", s->ioas_, dpath)));
  }
  if (auto r = s->read_ranges(); !r) return std::unexpected(r.error());
  device_fd = std::move(dev);
  logger().debug("{}: iommufd, device id {}, IOAS {}, {} IOVA range(s)", bdf, s->devid_, s->ioas_, s->ranges_.size());
  return s;
}

Result<void> IommufdSpace::read_ranges() {
  std::vector<uapi::IovaRange> buf(4);
  for (int attempt = 0; attempt < 4; ++attempt) {
    uapi::IoasIovaRanges q{};
    q.size = sizeof q;
    q.ioas_id = ioas_;
    q.num_iovas = static_cast<std::uint32_t>(buf.size());
    q.allowed_iovas = reinterpret_cast<std::uintptr_t>(buf.data());
    auto r = sys_.ioctl(iommufd_.get(), uapi::kIoasIovaRanges, &q);
    if (!r && r.error() == EMSGSIZE) {
      if (q.num_iovas <= buf.size() || q.num_iovas > 4096) {
        return fail(Code::kDataLoss, fmt::format("IOMMU_IOAS_IOVA_RANGES: EMSGSIZE with num_iovas {}", q.num_iovas));
      }
      buf.resize(q.num_iovas);
      continue;
    }
    if (!r) return std::unexpected(sys_error(r.error(), "IOMMU_IOAS_IOVA_RANGES"));
    if (q.num_iovas > buf.size()) return fail(Code::kDataLoss, "IOMMU_IOAS_IOVA_RANGES: more ranges than room");
    ranges_.clear();
    for (std::uint32_t i = 0; i < q.num_iovas; ++i) {
      if (buf[i].last < buf[i].start)
        return fail(Code::kDataLoss, "IOMMU_IOAS_IOVA_RANGES: range ends before it starts");
      ranges_.push_back({buf[i].start, buf[i].last});
    }
    sort_ranges(ranges_);
    if (ranges_.empty()) return fail(Code::kUnavailable, "IOMMU_IOAS_IOVA_RANGES: the IOAS allows no IOVA at all");
    return {};
  }
  return fail(Code::kDataLoss, "IOMMU_IOAS_IOVA_RANGES keeps growing");
}

IommufdSpace::~IommufdSpace() { iommufd_.reset(); }  // destroys the IOAS and its mappings

SysResult<void> IommufdSpace::kernel_map(std::uint64_t vaddr, std::uint64_t iova, std::uint64_t length,
                                         DmaAccess access) {
  uapi::IoasMap m{};
  m.size = sizeof m;
  m.flags = uapi::kIoasMapFixedIova |
            ((static_cast<unsigned>(access) & static_cast<unsigned>(DmaAccess::kRead)) ? uapi::kIoasMapReadable : 0u) |
            ((static_cast<unsigned>(access) & static_cast<unsigned>(DmaAccess::kWrite)) ? uapi::kIoasMapWriteable : 0u);
  m.ioas_id = ioas_;
  m.user_va = vaddr;
  m.length = length;
  m.iova = iova;
  if (auto r = sys_.ioctl(iommufd_.get(), uapi::kIoasMap, &m); !r) return std::unexpected(r.error());
  return {};
}

SysResult<std::uint64_t> IommufdSpace::kernel_unmap(std::uint64_t iova, std::uint64_t length) {
  uapi::IoasUnmap u{};
  u.size = sizeof u;
  u.ioas_id = ioas_;
  u.iova = iova;
  u.length = length;
  if (auto r = sys_.ioctl(iommufd_.get(), uapi::kIoasUnmap, &u); !r) return std::unexpected(r.error());
  return u.length;
}

}  // namespace npo::vfio
