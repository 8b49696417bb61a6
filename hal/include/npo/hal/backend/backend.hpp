// SPDX-License-Identifier: Apache-2.0
// npo-hal: the backend interface -- the one seam between device logic (drivers/) and the
// platform (VFIO on a real kernel, or the in-process emulator). It is shaped like VFIO
// (linux/vfio.h) so both paths run the same driver code. DESIGN.md "The backend interface".
//
// Every operation states its guarantee. Unless a method says otherwise, a backend object
// may be used from several threads at once, except that one BAR's Mmio accessors order
// only the accesses made from one thread (as MMIO does on real hardware).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "npo/hal/error.hpp"

namespace npo::backend {

/// A PCI function address: domain:bus:device.function, e.g. "0000:3b:00.0".
struct PciAddress {
  std::uint16_t domain = 0;
  std::uint8_t bus = 0;
  std::uint8_t device = 0;    ///< 0..31
  std::uint8_t function = 0;  ///< 0..7
  friend constexpr bool operator==(const PciAddress&, const PciAddress&) = default;
  friend constexpr auto operator<=>(const PciAddress&, const PciAddress&) = default;
  /// Canonical lower-case form "dddd:bb:dd.f".
  [[nodiscard]] std::string to_string() const;
  /// Parses "dddd:bb:dd.f" or "bb:dd.f" (domain 0). Errors: kInvalidArgument naming the accepted forms.
  static Result<PciAddress> parse(std::string_view text);
};

/// What enumeration reports about one PCI function (sysfs on Linux).
struct FunctionInfo {
  PciAddress address;
  std::uint16_t vendor_id = 0;
  std::uint16_t device_id = 0;
  std::uint16_t subsystem_vendor_id = 0;
  std::uint16_t subsystem_id = 0;
  std::uint32_t class_code = 0;  ///< 24-bit class/subclass/prog-if
  int numa_node = -1;            ///< -1: unknown / no NUMA
  int iommu_group = -1;          ///< -1: none (no IOMMU, or emulator without groups)
  std::string driver;            ///< bound kernel driver ("vfio-pci"), "emulator" for emulated cards
  /// Opened as an observer (emu-remote `mode=ro`, docs/spec/emud-protocol.md §2): reads work,
  /// register writes are dropped, DMA mapping, interrupts and reset are refused
  /// (kPermissionDenied); mailbox reads go through the daemon's side channel.
  bool read_only = false;
};

/// A BAR or config region as the backend describes it (VFIO_DEVICE_GET_REGION_INFO).
struct RegionInfo {
  unsigned index = 0;      ///< BAR number 0..5
  std::uint64_t size = 0;  ///< bytes; 0 = BAR not implemented
  bool mappable = false;   ///< can be mapped for direct CPU access (map_aperture)
  bool prefetchable = false;
  bool is_64bit = false;
};

/// Ordered MMIO accessors for one BAR. Offsets are bytes from the BAR start and must be
/// naturally aligned and inside the BAR; a violation returns all-ones on reads and drops
/// writes (as a PCIe unsupported request would), and is logged once.
/// Guarantee: accesses from one thread reach the device in program order; a write is
/// visible to the device before a later read from the same thread returns
/// (non-posted semantics are not guaranteed: read back to flush). Every write is a release
/// operation: host-memory stores the thread made before it (descriptors) are visible to the
/// device before the write (a doorbell) reaches it -- implementations issue the store
/// barrier (sfence / dmb oshst) real hardware needs.
/// Reads of a removed device return all-ones.
class Mmio {
 public:
  virtual ~Mmio() = default;
  [[nodiscard]] virtual std::uint32_t read32(std::uint64_t offset) noexcept = 0;
  [[nodiscard]] virtual std::uint64_t read64(std::uint64_t offset) noexcept = 0;
  virtual void write32(std::uint64_t offset, std::uint32_t value) noexcept = 0;
  virtual void write64(std::uint64_t offset, std::uint64_t value) noexcept = 0;
  /// Bytes of the BAR.
  [[nodiscard]] virtual std::uint64_t size() const noexcept = 0;
};

/// Access rights of a DMA mapping, as seen from the device.
enum class DmaAccess : std::uint8_t {
  kRead = 1,   ///< the device may read host memory (host -> device)
  kWrite = 2,  ///< the device may write host memory (device -> host)
  kReadWrite = 3,
};

/// An IOVA range [first, last] (inclusive, like VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE).
struct IovaRange {
  std::uint64_t first = 0;
  std::uint64_t last = 0;
};

/// One opened PCI function. Created by Backend::open; closing it (destruction) unmaps its
/// DMA mappings and BARs and releases its interrupts.
class Device {
 public:
  virtual ~Device() = default;

  [[nodiscard]] virtual const FunctionInfo& info() const noexcept = 0;

  /// Reads `out.size()` bytes of configuration space at `offset` (0..4095).
  /// Errors: kOutOfRange past 4096; kUnavailable if the device was removed (reads as all-ones
  /// are still stored into `out`). Guarantee: 1, 2 and 4-byte aligned reads are single accesses.
  virtual Result<void> config_read(std::uint32_t offset, std::span<std::byte> out) = 0;
  /// Writes configuration space. Read-only bits are left unchanged by the device, as in hardware.
  /// Errors: kOutOfRange, kUnavailable (removed), kPermissionDenied (VFIO refused the write).
  virtual Result<void> config_write(std::uint32_t offset, std::span<const std::byte> data) = 0;

  /// Describes BAR `index` (0..5). Errors: kInvalidArgument for index > 5.
  virtual Result<RegionInfo> region_info(unsigned index) = 0;
  /// MMIO accessors for BAR `index`, valid while the Device lives. Errors: kNotFound if the
  /// BAR is not implemented; kUnavailable if it cannot be mapped (VFIO mmap failure).
  virtual Result<Mmio*> mmio(unsigned index) = 0;
  /// Direct CPU mapping of a mappable BAR (e.g. the HBM aperture), valid while the Device
  /// lives. Stores and loads reach device memory; on real hardware the mapping is
  /// write-combined for prefetchable BARs. Errors: kUnimplemented if not mappable.
  virtual Result<std::span<std::byte>> map_aperture(unsigned index) = 0;

  /// A file descriptor another process can mmap to reach mappable BAR `index` (the VFIO
  /// device fd for real cards, the HBM memfd for the emulator), with the BAR's offset in it.
  /// The fd stays owned by the backend (SCM_RIGHTS duplicates it when sent).
  /// Errors: kUnimplemented if the BAR cannot be shared.
  struct ApertureFd {
    int fd = -1;
    std::uint64_t offset = 0;  ///< mmap offset of the BAR's first byte
    std::uint64_t size = 0;    ///< bytes
  };
  virtual Result<ApertureFd> aperture_fd(unsigned index) = 0;
  /// The same for [offset, offset+size) of BAR `index` alone (one window's bytes): an fd whose
  /// mmap at ApertureFd::offset reaches that range, and ideally nothing else. The default is
  /// aperture_fd()'s, with `offset` added (a VFIO device fd reaches the whole BAR); npo-emud
  /// hands the window's own memfd (docs/spec/emud-protocol.md §5.13). Owned by the backend.
  /// Errors: aperture_fd's; kOutOfRange past the BAR.
  virtual Result<ApertureFd> aperture_range_fd(unsigned index, std::uint64_t offset, std::uint64_t size) {
    auto a = aperture_fd(index);
    if (!a) return a;
    if (offset > a->size || size > a->size - offset) {
      return std::unexpected(Error(Code::kOutOfRange, "aperture range past the BAR"));
    }
    return ApertureFd{a->fd, a->offset + offset, size};
  }

  /// IOVA ranges the IOMMU accepts for this device, sorted, non-overlapping.
  [[nodiscard]] virtual std::vector<IovaRange> iova_ranges() const = 0;
  /// Maps host virtual range [vaddr, vaddr+length) at `iova` with `access`. The memory must
  /// stay valid until dma_unmap. vaddr, iova and length must be 4 KiB aligned.
  /// Errors: kInvalidArgument (alignment, zero length), kOutOfRange (IOVA outside
  /// iova_ranges()), kAlreadyExists (overlaps a mapping), kResourceExhausted (ENOMEM/ENOSPC,
  /// RLIMIT_MEMLOCK), kPermissionDenied. Guarantee: after return, device accesses to the
  /// range translate to the memory; nothing is mapped on error.
  virtual Result<void> dma_map(const void* vaddr, std::uint64_t iova, std::uint64_t length, DmaAccess access) = 0;
  /// Maps this process's virtual addresses [vaddr, vaddr+length) at `iova` WITHOUT sharing or
  /// pinning the memory: each device access reaches whatever the process has mapped at that
  /// address at that moment, and an address it has not mapped is an IOMMU fault (the op
  /// completes IOMMU_FAULT; nothing crashes). Meant for large ranges (a whole address space)
  /// that a zero-copy data path uses without registering each buffer. Rings and completion
  /// queues must not live there (their accesses fault). Alignment and IOVA rules as dma_map;
  /// remove it with dma_unmap(iova, length).
  /// Offered by the emulator: in-process it copies with process_vm_readv/writev on its own pid,
  /// npo-emud on the client's (emud-protocol.md §5.2 "Process memory", ptrace rules apply).
  /// Errors: kUnimplemented (VFIO: a real IOMMU needs pinned pages; use dma_map), those of
  /// dma_map, kPermissionDenied (the daemon may not read this process).
  virtual Result<void> dma_map_process(std::uint64_t vaddr, std::uint64_t iova, std::uint64_t length,
                                       DmaAccess access) {
    (void)vaddr, (void)iova, (void)length, (void)access;
    return fail(Code::kUnimplemented, "dma_map_process: this backend maps pinned memory only (dma_map)");
  }
  /// Removes the mapping that starts at `iova` with exactly `length` bytes.
  /// Errors: kNotFound if no such mapping. Guarantee: after return the device can no longer
  /// reach the memory (in-flight accesses have finished or faulted).
  virtual Result<void> dma_unmap(std::uint64_t iova, std::uint64_t length) = 0;

  /// Number of MSI-X vectors the function has.
  [[nodiscard]] virtual unsigned msix_vectors() const noexcept = 0;
  /// Routes MSI-X vectors [first, first+fds.size()) to eventfds (VFIO_DEVICE_SET_IRQS with
  /// DATA_EVENTFD | ACTION_TRIGGER); an fd of -1 disconnects that vector. The backend does not
  /// take ownership of the fds. Errors: kOutOfRange (vector past msix_vectors()),
  /// kInvalidArgument (bad fd), kUnavailable.
  virtual Result<void> set_msix_eventfds(unsigned first, std::span<const int> fds) = 0;
  /// Routes the function's MSI (one message) to an eventfd (VFIO_DEVICE_SET_IRQS on
  /// VFIO_PCI_MSI_IRQ_INDEX with DATA_EVENTFD | ACTION_TRIGGER), for devices that signal MSI
  /// rather than MSI-X; -1 disconnects it and turns MSI off. MSI and MSI-X exclude each other.
  /// The backend does not take ownership of the fd. Errors: kUnimplemented (the function has
  /// no MSI capability), kFailedPrecondition (MSI-X vectors are connected), kInvalidArgument
  /// (bad fd), kUnavailable.
  virtual Result<void> set_msi_eventfd(int fd) = 0;

  /// Function level reset (VFIO_DEVICE_RESET). Guarantee: on success every register, queue
  /// and engine is in its reset state, and DMA mappings are kept (as VFIO keeps them).
  /// Errors: kUnimplemented if the function cannot reset; kUnavailable if removed.
  virtual Result<void> reset() = 0;

  /// Whether the path from this process to the function still works, apart from the card
  /// itself: a removed card is not an error here. Registers that read all-ones mean a removed
  /// card when this succeeds; when it fails they mean the path is gone. Default: always works
  /// (in-process and VFIO functions have no separate path). The emu-remote client returns
  /// kUnavailable naming npo-emud once its daemon is gone. Thread-safe.
  virtual Result<void> check_connection() { return {}; }
};

/// The platform's time base for driver timeouts and polling (training deadlines, flap
/// windows, monitor intervals). Real platforms use CLOCK_MONOTONIC. The emulator's virtual
/// clock moves only when someone waits: sleep_until() advances emulated time, so a driver
/// state machine with a 5 s timeout runs in microseconds of wall time and replays exactly.
/// Thread-safety: both methods may be called from any thread; on a virtual clock concurrent
/// sleepers are serialised (time moves to the later of their deadlines).
class Clock {
 public:
  virtual ~Clock() = default;
  /// Current time in ns (monotonic; epoch unspecified).
  [[nodiscard]] virtual std::uint64_t now_ns() noexcept = 0;
  /// Returns once now_ns() >= t_ns (at once if it already is). Real clocks sleep; the
  /// virtual clock advances emulated time to t_ns, firing the events due on the way, and
  /// first (also when t_ns has been reached) waits for the mailbox requests its firmwares
  /// are handling: a reply takes no emulated time.
  virtual void sleep_until(std::uint64_t t_ns) noexcept = 0;
  /// True for the emulator's virtual clock.
  [[nodiscard]] virtual bool is_virtual() const noexcept { return false; }
};

/// CLOCK_MONOTONIC (std::chrono::steady_clock). The default Backend::clock().
[[nodiscard]] Clock& monotonic_clock() noexcept;

/// A platform: finds PCI functions and opens them. Thread-safety: enumerate() and open()
/// may be called concurrently.
class Backend {
 public:
  virtual ~Backend() = default;
  /// Short name, e.g. "emulator" or "vfio".
  [[nodiscard]] virtual std::string_view name() const noexcept = 0;
  /// The URI this backend was opened from, e.g. "emu:mesh8".
  [[nodiscard]] virtual const std::string& uri() const noexcept = 0;
  /// Functions this backend can drive, sorted by address. Errors: kUnavailable when the
  /// platform cannot be read (sysfs missing).
  virtual Result<std::vector<FunctionInfo>> enumerate() = 0;
  /// Opens one function for exclusive use. Errors: kNotFound (no such function),
  /// kAlreadyExists (already open), kPermissionDenied, kFailedPrecondition (wrong driver bound,
  /// IOMMU group not viable; the message names the fix).
  virtual Result<std::unique_ptr<Device>> open(const PciAddress& address) = 0;
  /// The time base drivers use for timeouts on this platform (see Clock). Valid while the
  /// Backend lives. Default: monotonic_clock().
  [[nodiscard]] virtual Clock& clock() noexcept { return monotonic_clock(); }
};

}  // namespace npo::backend
