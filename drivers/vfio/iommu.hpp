// SPDX-License-Identifier: Apache-2.0
// drivers/vfio: IOMMU address spaces for DMA, over both kernel APIs:
//   - type1v2: a VFIO container (/dev/vfio/vfio) holding an IOMMU group (/dev/vfio/<group>);
//     the device fd comes from VFIO_GROUP_GET_DEVICE_FD.
//   - iommufd: the VFIO device cdev (/dev/vfio/devices/vfioN) bound to /dev/iommu and
//     attached to an IO address space (IOAS).
// A DmaSpace validates every request (alignment, IOVA ranges, overlaps, exact unmaps) before
// the kernel sees it, so both APIs give the same npo::Code for the same mistake.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "npo/hal/backend/backend.hpp"
#include "vfio/sys.hpp"
#include "vfio/sysfs.hpp"

namespace npo::vfio {

/// The kernel IOMMU API a backend uses.
enum class IommuApi : std::uint8_t {
  kAuto,     ///< type1 when the group node /dev/vfio/<group> exists, else iommufd when the cdev does
  kType1,    ///< VFIO container/group, VFIO_TYPE1v2_IOMMU
  kIommufd,  ///< /dev/iommu + VFIO device cdev (Linux >= 6.6, CONFIG_IOMMUFD, CONFIG_VFIO_DEVICE_CDEV)
};
/// "auto", "type1", "iommufd".
[[nodiscard]] std::string_view iommu_api_name(IommuApi api) noexcept;

/// Where the backend finds the kernel's files.
struct Paths {
  std::string sysfs_root = "/sys";
  std::string dev_root = "/dev";
};

/// An IOMMU address space and the DMA mappings made in it. Shared by the devices of one IOMMU
/// group (type1) or owned by one device (iommufd).
/// Thread-safety: map/unmap/unmap_owned_by serialize on an internal mutex; ranges() is
/// immutable after creation.
class DmaSpace {
 public:
  virtual ~DmaSpace() = default;
  DmaSpace(const DmaSpace&) = delete;
  DmaSpace& operator=(const DmaSpace&) = delete;

  /// Which kernel API this space uses (kType1 or kIommufd).
  [[nodiscard]] virtual IommuApi api() const noexcept = 0;
  /// The IOVA ranges the kernel allows, sorted and non-overlapping (VFIO_IOMMU_GET_INFO's
  /// VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE, or IOMMU_IOAS_IOVA_RANGES).
  [[nodiscard]] const std::vector<backend::IovaRange>& ranges() const noexcept { return ranges_; }

  /// Maps [vaddr, vaddr+length) at `iova` (VFIO_IOMMU_MAP_DMA / IOMMU_IOAS_MAP with
  /// FIXED_IOVA). `owner` tags the mapping for unmap_owned_by().
  /// Errors: kInvalidArgument (alignment to 4 KiB, zero length, wrap-around, EINVAL/EFAULT from
  /// the kernel), kOutOfRange (outside ranges()), kAlreadyExists (overlaps a mapping, EEXIST),
  /// kResourceExhausted (ENOMEM: RLIMIT_MEMLOCK; ENOSPC: the type1 mapping limit), kPermissionDenied
  /// (EPERM/EACCES), kUnavailable (ENODEV: device removed). The errno is kept. Nothing is mapped
  /// on error.
  Result<void> map(const void* vaddr, std::uint64_t iova, std::uint64_t length, backend::DmaAccess access,
                   const void* owner);
  /// Unmaps the mapping that starts at `iova` and has exactly `length` bytes
  /// (VFIO_IOMMU_UNMAP_DMA / IOMMU_IOAS_UNMAP). Errors: kNotFound when no such mapping; the
  /// kernel's errno mapped as for map(); kInternal if the kernel unmapped another size.
  Result<void> unmap(std::uint64_t iova, std::uint64_t length);
  /// Unmaps every mapping tagged with `owner` (a closing device); errors are logged.
  void unmap_owned_by(const void* owner) noexcept;
  /// Number of live mappings.
  [[nodiscard]] std::size_t mapping_count() const;

 protected:
  explicit DmaSpace(Sys& sys) : sys_(sys) {}
  /// The kernel calls; arguments are validated. Return the errno on failure.
  virtual SysResult<void> kernel_map(std::uint64_t vaddr, std::uint64_t iova, std::uint64_t length,
                                     backend::DmaAccess access) = 0;
  /// Returns the bytes the kernel unmapped.
  virtual SysResult<std::uint64_t> kernel_unmap(std::uint64_t iova, std::uint64_t length) = 0;
  Sys& sys_;
  std::vector<backend::IovaRange> ranges_;

 private:
  struct Mapping {
    std::uint64_t length;
    const void* owner;
  };
  mutable std::mutex mu_;
  std::map<std::uint64_t, Mapping> maps_;  // by IOVA
};

/// Parses the capability chain of a VFIO_IOMMU_GET_INFO answer (`buf` holds `argsz` bytes)
/// and returns the IOVA ranges of VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE, sorted.
/// Returns nullopt when the chain has no such capability.
/// Errors: kDataLoss for a chain that points outside the buffer, loops, or claims more ranges
/// than fit.
Result<std::optional<std::vector<backend::IovaRange>>> parse_type1_iova_ranges(std::span<const std::byte> buf);

/// A type1v2 container with one IOMMU group in it (VFIO_GROUP_SET_CONTAINER,
/// VFIO_SET_IOMMU(VFIO_TYPE1v2_IOMMU)). Destruction closes the group, then the container,
/// which drops every mapping; devices must be closed first.
class Type1Group final : public DmaSpace {
 public:
  /// Opens the container and group of `fi` and sets up the IOMMU. Follows, in order:
  /// open <dev>/vfio/vfio, VFIO_GET_API_VERSION (== VFIO_API_VERSION), VFIO_CHECK_EXTENSION
  /// (VFIO_TYPE1v2_IOMMU), open <dev>/vfio/<group>, VFIO_GROUP_GET_STATUS (VIABLE),
  /// VFIO_GROUP_SET_CONTAINER, VFIO_SET_IOMMU, VFIO_IOMMU_GET_INFO (+ IOVA range capability).
  /// Errors (errno kept, message naming the fix): kUnavailable (/dev/vfio/vfio missing; group
  /// busy: EBUSY), kPermissionDenied (EACCES/EPERM opening a node), kUnimplemented (API version,
  /// no type1v2), kFailedPrecondition (group node missing, group not viable, EPERM from
  /// VFIO_SET_IOMMU: no interrupt remapping).
  static Result<std::shared_ptr<Type1Group>> open(Sys& sys, const Paths& paths, const Sysfs& sysfs,
                                                  const backend::FunctionInfo& fi);
  ~Type1Group() override;

  /// VFIO_GROUP_GET_DEVICE_FD for `a` (a function of this group). Errors: kNotFound (ENODEV,
  /// ENOENT: not in the group), kUnavailable (EBUSY), others by errno.
  Result<Fd> open_device(const backend::PciAddress& a);

  [[nodiscard]] IommuApi api() const noexcept override { return IommuApi::kType1; }
  /// The IOMMU group number (/dev/vfio/<group>).
  [[nodiscard]] int group() const noexcept { return group_; }
  /// Bitmap of IOMMU page sizes (VFIO_IOMMU_INFO_PGSIZES), 0 when not reported.
  [[nodiscard]] std::uint64_t page_sizes() const noexcept { return pgsizes_; }

 protected:
  SysResult<void> kernel_map(std::uint64_t vaddr, std::uint64_t iova, std::uint64_t length,
                             backend::DmaAccess access) override;
  SysResult<std::uint64_t> kernel_unmap(std::uint64_t iova, std::uint64_t length) override;

 private:
  explicit Type1Group(Sys& sys) : DmaSpace(sys) {}
  Result<void> read_iommu_info();
  Fd container_;
  Fd group_fd_;
  int group_ = -1;
  std::uint64_t pgsizes_ = 0;
};

/// An iommufd context with one IOAS and one VFIO device cdev attached to it.
class IommufdSpace final : public DmaSpace {
 public:
  /// Opens the cdev of `fi` and /dev/iommu, then VFIO_DEVICE_BIND_IOMMUFD, IOMMU_IOAS_ALLOC,
  /// VFIO_DEVICE_ATTACH_IOMMUFD_PT and IOMMU_IOAS_IOVA_RANGES. On success `device_fd` holds the
  /// bound device. Errors (errno kept, message naming the fix): kUnimplemented (no cdev for the
  /// function, /dev/iommu missing, ENOTTY from an ioctl: kernel without iommufd), kPermissionDenied
  /// (EACCES opening a node), kUnavailable (EBUSY: the device is open elsewhere),
  /// kFailedPrecondition (EPERM from the attach: no interrupt remapping).
  static Result<std::shared_ptr<IommufdSpace>> open(Sys& sys, const Paths& paths, const Sysfs& sysfs,
                                                    const backend::FunctionInfo& fi, Fd& device_fd);
  ~IommufdSpace() override;

  [[nodiscard]] IommuApi api() const noexcept override { return IommuApi::kIommufd; }
  /// The IOAS id from IOMMU_IOAS_ALLOC.
  [[nodiscard]] std::uint32_t ioas_id() const noexcept { return ioas_; }
  /// The device id from VFIO_DEVICE_BIND_IOMMUFD.
  [[nodiscard]] std::uint32_t device_id() const noexcept { return devid_; }

 protected:
  SysResult<void> kernel_map(std::uint64_t vaddr, std::uint64_t iova, std::uint64_t length,
                             backend::DmaAccess access) override;
  SysResult<std::uint64_t> kernel_unmap(std::uint64_t iova, std::uint64_t length) override;

 private:
  explicit IommufdSpace(Sys& sys) : DmaSpace(sys) {}
  Result<void> read_ranges();
  Fd iommufd_;
  std::uint32_t ioas_ = 0;
  std::uint32_t devid_ = 0;
};

/// The EPERM of VFIO_SET_IOMMU / VFIO_DEVICE_ATTACH_IOMMUFD_PT: the platform has no interrupt
/// remapping. kFailedPrecondition, errno EPERM, naming intremap and allow_unsafe_interrupts.
[[nodiscard]] Error interrupt_remapping_error(const backend::PciAddress& a, IommuApi api);

}  // namespace npo::vfio
