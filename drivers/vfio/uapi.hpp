// SPDX-License-Identifier: Apache-2.0
// drivers/vfio: the kernel ABI the backend speaks. VFIO's container/group/device ioctls come
// from the system's <linux/vfio.h>. Debian 12's headers (linux-libc-dev 6.1) lack
// <linux/iommufd.h> and the VFIO device cdev ioctls (VFIO_DEVICE_BIND_IOMMUFD,
// VFIO_DEVICE_ATTACH_IOMMUFD_PT, Linux 6.6): this header declares the few structures and
// request numbers the backend uses, written from the kernel's documented ABI, and only when
// the system headers lack them. Either way the layouts are checked with static_asserts, so a
// mismatch with a newer system header fails the build instead of corrupting an ioctl.
//
// Everything is in npo::vfio::uapi under our own names (IoasAlloc, kIoasAlloc, ...), aliases
// of the system's definitions when those exist.
#pragma once

#include <linux/vfio.h>
#include <sys/ioctl.h>

#include <cstddef>
#include <cstdint>

#if __has_include(<linux/iommufd.h>)
#include <linux/iommufd.h>
#define NPO_VFIO_HAVE_SYSTEM_IOMMUFD 1
#else
#define NPO_VFIO_HAVE_SYSTEM_IOMMUFD 0
#endif

#if defined(VFIO_DEVICE_BIND_IOMMUFD) && defined(VFIO_DEVICE_ATTACH_IOMMUFD_PT)
#define NPO_VFIO_HAVE_SYSTEM_CDEV 1
#else
#define NPO_VFIO_HAVE_SYSTEM_CDEV 0
#endif

namespace npo::vfio::uapi {

// ---- type1 container/group API and device API (always in <linux/vfio.h>) -----------------
using GroupStatus = ::vfio_group_status;
using DeviceInfo = ::vfio_device_info;
using RegionInfo = ::vfio_region_info;
using IrqInfo = ::vfio_irq_info;
using IrqSet = ::vfio_irq_set;
using InfoCapHeader = ::vfio_info_cap_header;
using SparseMmapArea = ::vfio_region_sparse_mmap_area;
using SparseMmapCap = ::vfio_region_info_cap_sparse_mmap;
using Type1Info = ::vfio_iommu_type1_info;
using Type1IovaRangeCap = ::vfio_iommu_type1_info_cap_iova_range;
using Type1IovaRange = ::vfio_iova_range;
using Type1DmaMap = ::vfio_iommu_type1_dma_map;
using Type1DmaUnmap = ::vfio_iommu_type1_dma_unmap;

inline constexpr unsigned long kGetApiVersion = VFIO_GET_API_VERSION;
inline constexpr unsigned long kCheckExtension = VFIO_CHECK_EXTENSION;
inline constexpr unsigned long kSetIommu = VFIO_SET_IOMMU;
inline constexpr unsigned long kGroupGetStatus = VFIO_GROUP_GET_STATUS;
inline constexpr unsigned long kGroupSetContainer = VFIO_GROUP_SET_CONTAINER;
inline constexpr unsigned long kGroupGetDeviceFd = VFIO_GROUP_GET_DEVICE_FD;
inline constexpr unsigned long kIommuGetInfo = VFIO_IOMMU_GET_INFO;
inline constexpr unsigned long kIommuMapDma = VFIO_IOMMU_MAP_DMA;
inline constexpr unsigned long kIommuUnmapDma = VFIO_IOMMU_UNMAP_DMA;
inline constexpr unsigned long kDeviceGetInfo = VFIO_DEVICE_GET_INFO;
inline constexpr unsigned long kDeviceGetRegionInfo = VFIO_DEVICE_GET_REGION_INFO;
inline constexpr unsigned long kDeviceGetIrqInfo = VFIO_DEVICE_GET_IRQ_INFO;
inline constexpr unsigned long kDeviceSetIrqs = VFIO_DEVICE_SET_IRQS;
inline constexpr unsigned long kDeviceReset = VFIO_DEVICE_RESET;

// The fixed vfio-pci region and IRQ indexes (linux/vfio.h, "VFIO-PCI bus driver").
inline constexpr unsigned kPciBar0Region = VFIO_PCI_BAR0_REGION_INDEX;
inline constexpr unsigned kPciConfigRegion = VFIO_PCI_CONFIG_REGION_INDEX;
inline constexpr unsigned kPciMsiIrq = VFIO_PCI_MSI_IRQ_INDEX;
inline constexpr unsigned kPciMsixIrq = VFIO_PCI_MSIX_IRQ_INDEX;
static_assert(kPciBar0Region == 0 && kPciConfigRegion == 7 && kPciMsixIrq == 2);

// The ABI these structures must keep (the kernel's layout; a newer header may only append).
static_assert(sizeof(GroupStatus) == 8);
static_assert(sizeof(DeviceInfo) >= 16 && offsetof(DeviceInfo, num_regions) == 8 &&
              offsetof(DeviceInfo, num_irqs) == 12);
static_assert(sizeof(RegionInfo) == 32 && offsetof(RegionInfo, cap_offset) == 12 && offsetof(RegionInfo, size) == 16 &&
              offsetof(RegionInfo, offset) == 24);
static_assert(sizeof(IrqInfo) == 16 && offsetof(IrqInfo, count) == 12);
static_assert(sizeof(IrqSet) == 20 && offsetof(IrqSet, data) == 20);
static_assert(sizeof(InfoCapHeader) == 8 && offsetof(InfoCapHeader, next) == 4);
static_assert(sizeof(SparseMmapArea) == 16 && sizeof(SparseMmapCap) == 16 && offsetof(SparseMmapCap, nr_areas) == 8);
static_assert(offsetof(Type1Info, iova_pgsizes) == 8 && offsetof(Type1Info, cap_offset) == 16);
static_assert(sizeof(Type1IovaRangeCap) == 16 && offsetof(Type1IovaRangeCap, nr_iovas) == 8);
static_assert(sizeof(Type1IovaRange) == 16);
static_assert(sizeof(Type1DmaMap) == 32 && offsetof(Type1DmaMap, vaddr) == 8 && offsetof(Type1DmaMap, iova) == 16 &&
              offsetof(Type1DmaMap, size) == 24);
static_assert(sizeof(Type1DmaUnmap) == 24 && offsetof(Type1DmaUnmap, iova) == 8 && offsetof(Type1DmaUnmap, size) == 16);

// ---- iommufd (/dev/iommu): linux/iommufd.h, Linux 6.2 --------------------------------------
#if NPO_VFIO_HAVE_SYSTEM_IOMMUFD
using IoasAlloc = ::iommu_ioas_alloc;
using IovaRange = ::iommu_iova_range;
using IoasIovaRanges = ::iommu_ioas_iova_ranges;
using IoasMap = ::iommu_ioas_map;
using IoasUnmap = ::iommu_ioas_unmap;
inline constexpr unsigned long kIoasAlloc = IOMMU_IOAS_ALLOC;
inline constexpr unsigned long kIoasIovaRanges = IOMMU_IOAS_IOVA_RANGES;
inline constexpr unsigned long kIoasMap = IOMMU_IOAS_MAP;
inline constexpr unsigned long kIoasUnmap = IOMMU_IOAS_UNMAP;
inline constexpr std::uint32_t kIoasMapFixedIova = IOMMU_IOAS_MAP_FIXED_IOVA;
inline constexpr std::uint32_t kIoasMapWriteable = IOMMU_IOAS_MAP_WRITEABLE;
inline constexpr std::uint32_t kIoasMapReadable = IOMMU_IOAS_MAP_READABLE;
#else
/// iommufd's ioctl type (the same ';' as VFIO) and command numbers (IOMMUFD_CMD_*).
inline constexpr unsigned kIommufdType = ';';
inline constexpr unsigned kIommufdCmdIoasAlloc = 0x81;
inline constexpr unsigned kIommufdCmdIoasIovaRanges = 0x84;
inline constexpr unsigned kIommufdCmdIoasMap = 0x85;
inline constexpr unsigned kIommufdCmdIoasUnmap = 0x86;

/// IOMMU_IOAS_ALLOC: allocates an IO address space; returns its id.
struct IoasAlloc {
  std::uint32_t size;   ///< sizeof(IoasAlloc)
  std::uint32_t flags;  ///< must be 0
  std::uint32_t out_ioas_id;
};
/// One allowed IOVA interval [start, last] (inclusive).
struct IovaRange {
  alignas(8) std::uint64_t start;
  alignas(8) std::uint64_t last;
};
/// IOMMU_IOAS_IOVA_RANGES: the allowed IOVA intervals of an IOAS. EMSGSIZE with num_iovas set
/// to the needed count when the array is too small.
struct IoasIovaRanges {
  std::uint32_t size;
  std::uint32_t ioas_id;
  std::uint32_t num_iovas;  ///< in: array capacity; out: total number of ranges
  std::uint32_t reserved;
  alignas(8) std::uint64_t allowed_iovas;  ///< user pointer to IovaRange[num_iovas]
  alignas(8) std::uint64_t out_iova_alignment;
};
/// IOMMU_IOAS_MAP: maps user memory into an IOAS (at `iova` with kIoasMapFixedIova).
struct IoasMap {
  std::uint32_t size;
  std::uint32_t flags;
  std::uint32_t ioas_id;
  std::uint32_t reserved;
  alignas(8) std::uint64_t user_va;
  alignas(8) std::uint64_t length;
  alignas(8) std::uint64_t iova;
};
/// IOMMU_IOAS_UNMAP: removes the mappings inside [iova, iova+length); length returns the bytes.
struct IoasUnmap {
  std::uint32_t size;
  std::uint32_t ioas_id;
  alignas(8) std::uint64_t iova;
  alignas(8) std::uint64_t length;
};
inline constexpr unsigned long kIoasAlloc = _IO(kIommufdType, kIommufdCmdIoasAlloc);
inline constexpr unsigned long kIoasIovaRanges = _IO(kIommufdType, kIommufdCmdIoasIovaRanges);
inline constexpr unsigned long kIoasMap = _IO(kIommufdType, kIommufdCmdIoasMap);
inline constexpr unsigned long kIoasUnmap = _IO(kIommufdType, kIommufdCmdIoasUnmap);
inline constexpr std::uint32_t kIoasMapFixedIova = 1u << 0;
inline constexpr std::uint32_t kIoasMapWriteable = 1u << 1;
inline constexpr std::uint32_t kIoasMapReadable = 1u << 2;
#endif

static_assert(sizeof(IoasAlloc) == 12 && offsetof(IoasAlloc, out_ioas_id) == 8);
static_assert(sizeof(IovaRange) == 16 && offsetof(IovaRange, last) == 8);
static_assert(sizeof(IoasIovaRanges) == 32 && offsetof(IoasIovaRanges, num_iovas) == 8 &&
              offsetof(IoasIovaRanges, allowed_iovas) == 16 && offsetof(IoasIovaRanges, out_iova_alignment) == 24);
static_assert(sizeof(IoasMap) == 40 && offsetof(IoasMap, ioas_id) == 8 && offsetof(IoasMap, user_va) == 16 &&
              offsetof(IoasMap, length) == 24 && offsetof(IoasMap, iova) == 32);
static_assert(sizeof(IoasUnmap) == 24 && offsetof(IoasUnmap, iova) == 8 && offsetof(IoasUnmap, length) == 16);
static_assert(kIoasAlloc == 0x3b81 && kIoasIovaRanges == 0x3b84 && kIoasMap == 0x3b85 && kIoasUnmap == 0x3b86);

// ---- VFIO device cdev (/dev/vfio/devices/vfioN): linux/vfio.h, Linux 6.6 ------------------
#if NPO_VFIO_HAVE_SYSTEM_CDEV
using DeviceBindIommufd = ::vfio_device_bind_iommufd;
using DeviceAttachIommufdPt = ::vfio_device_attach_iommufd_pt;
inline constexpr unsigned long kDeviceBindIommufd = VFIO_DEVICE_BIND_IOMMUFD;
inline constexpr unsigned long kDeviceAttachIommufdPt = VFIO_DEVICE_ATTACH_IOMMUFD_PT;
#else
/// VFIO_DEVICE_BIND_IOMMUFD: binds a cdev-opened device to an iommufd; returns the device id.
/// The cdev fd accepts no other device ioctl before this call succeeds.
struct DeviceBindIommufd {
  std::uint32_t argsz;
  std::uint32_t flags;  ///< 0
  std::int32_t iommufd;
  std::uint32_t out_devid;
};
/// VFIO_DEVICE_ATTACH_IOMMUFD_PT: attaches the bound device to an IOAS (or a HWPT).
struct DeviceAttachIommufdPt {
  std::uint32_t argsz;
  std::uint32_t flags;  ///< 0
  std::uint32_t pt_id;  ///< in: IOAS id; out: the attached page table id
};
inline constexpr unsigned long kDeviceBindIommufd = _IO(VFIO_TYPE, VFIO_BASE + 18);
inline constexpr unsigned long kDeviceAttachIommufdPt = _IO(VFIO_TYPE, VFIO_BASE + 19);
#endif

// Newer kernels append fields (token_uuid_ptr, pasid) behind a flag; the prefix is fixed.
static_assert(sizeof(DeviceBindIommufd) >= 16 && offsetof(DeviceBindIommufd, iommufd) == 8 &&
              offsetof(DeviceBindIommufd, out_devid) == 12);
static_assert(sizeof(DeviceAttachIommufdPt) >= 12 && offsetof(DeviceAttachIommufdPt, pt_id) == 8);
static_assert(kDeviceBindIommufd == 0x3b76 && kDeviceAttachIommufdPt == 0x3b77);

}  // namespace npo::vfio::uapi
