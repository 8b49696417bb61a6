// SPDX-License-Identifier: Apache-2.0
// npo-hal public API: Device -- one accelerator card.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "npo/hal/dma.hpp"
#include "npo/hal/error.hpp"
#include "npo/hal/power.hpp"

namespace npo {

namespace detail {
struct DriverAccess;
}  // namespace detail

/// One BAR of a card.
struct BarInfo {
  unsigned index = 0;      ///< BAR number 0..5
  std::uint64_t size = 0;  ///< bytes
  bool prefetchable = false;
  bool is_64bit = false;
  bool mappable = false;  ///< can be CPU-mapped (HBM aperture)
};

/// PCIe link as read from the PCI Express capability (PCIe 6.0 §7.5.3.6, §7.5.3.8).
struct PcieLink {
  double max_gts = 0;      ///< LnkCap max speed, GT/s (2.5, 5, 8, 16, 32, 64)
  unsigned max_width = 0;  ///< LnkCap max width, lanes
  double gts = 0;          ///< LnkSta current speed, GT/s
  unsigned width = 0;      ///< LnkSta negotiated width, lanes
};

/// Firmware versions (mailbox GET_VERSIONS, docs/spec/mailbox.md §3.2).
struct FirmwareVersions {
  std::string firmware;  ///< "major.minor.patch"
  std::uint32_t firmware_raw = 0;
  std::uint32_t interface = 0;  ///< register interface version, major<<16|minor<<8|patch
  std::uint32_t protocol = 0;   ///< mailbox protocol version
  std::uint32_t build_id = 0;
};

/// What System::open learned about a card. All values were read from the card: PCI
/// identity from config space, geometry from BAR0 CAP registers, the rest from the mailbox.
struct DeviceInfo {
  std::uint32_t index = 0;  ///< position in the System
  std::string bdf;          ///< "dddd:bb:dd.f"
  std::uint16_t vendor_id = 0;
  std::uint16_t device_id = 0;
  int numa_node = -1;    ///< -1 unknown
  int iommu_group = -1;  ///< -1 none
  std::string driver;    ///< bound driver ("vfio-pci", "emulator")
  std::string model;     ///< mailbox IDENTIFY model string
  std::uint64_t serial = 0;
  std::uint32_t fabric_id = 0;  ///< identity on the optical fabric
  std::uint64_t hbm_bytes = 0;  ///< device memory, bytes
  unsigned num_engines = 0;
  unsigned queues_per_engine = 0;
  unsigned num_ports = 0;
  unsigned lanes_per_port = 0;
  std::uint32_t max_transfer_bytes = 0;  ///< largest single descriptor, bytes
  std::vector<BarInfo> bars;             ///< implemented BARs only
  PcieLink pcie;
  FirmwareVersions firmware;
  /// Attached read-only (an observer of a card another process owns, emu-remote `mode=ro`):
  /// reading works; queues, windows, DMA maps and reset are refused (kPermissionDenied),
  /// register writes are dropped (so training only observes), mailbox reads are served.
  bool read_only = false;
  /// The card was already gone when the System opened it (surprise removal inside a shared
  /// npo-emud: its config space reads ffff:ffff though the backend lists it as an NPO card).
  /// It keeps its index; only index, bdf, ids, numa_node and driver are filled; its registers
  /// read all-ones, so every call fails as on a card removed later (kUnavailable) and the
  /// link monitor reports it removed.
  bool removed = false;
};

/// Heartbeat reply (mailbox HEARTBEAT, docs/spec/mailbox.md §3.4).
struct Heartbeat {
  std::uint64_t uptime_ns = 0;  ///< firmware uptime
  std::uint32_t count = 0;      ///< heartbeats answered since firmware start
  /// Host-measured request->reply time, ns of platform time (System::clock(); on a virtual
  /// clock usually 0, as the firmware answers without emulated time passing).
  std::uint64_t round_trip_ns = 0;
};

/// One entry of the firmware error log (docs/spec/mailbox.md §3.8).
struct FirmwareLogEntry {
  std::uint64_t timestamp_ns = 0;
  std::uint16_t code = 0;
  std::uint8_t severity = 0;  ///< 0 info, 1 warning, 2 error, 3 fatal
  std::uint8_t source = 0;    ///< 0 firmware, 1 dma, 2 iommu, 3 port, 4 mailbox
  std::uint32_t arg0 = 0;
  std::uint64_t arg1 = 0;
  std::uint64_t arg2 = 0;
};

/// Activity counters of one DMA queue, kept by the card's engine (docs/spec/registers.md §9,
/// QUEUE.OPS_OK / OPS_ERROR / BYTES). Monotonic from the card's last reset (Device::reset, an
/// FLR, a mailbox RESET): closing, re-opening or resetting the queue, or its owner's exit, does
/// not clear them. They count completions the card wrote, whichever process drove the queue.
struct QueueCounters {
  unsigned engine = 0;          ///< DMA engine, 0 .. DeviceInfo::num_engines - 1
  unsigned queue = 0;           ///< queue within the engine, 0 .. queues_per_engine - 1
  std::uint64_t ops_ok = 0;     ///< ops completed with status OK (NOP and FENCE included)
  std::uint64_t ops_error = 0;  ///< ops completed with any other status (FENCE_SKIPPED included)
  std::uint64_t bytes = 0;      ///< bytes: the lengths of the data ops completed OK
};

/// Card-wide activity counters (docs/spec/registers.md §9).
struct CardCounters {
  /// Window table entries valid now (GLOBAL.WINDOWS_VALID): exported windows, a gauge.
  std::uint32_t windows_valid = 0;
  /// Requests of the card's mailbox since reset that ended in an error (GLOBAL.MBOX_ERRORS):
  /// replies with a status other than OK, and transport errors. Saturates at 2^32 - 1.
  std::uint32_t mailbox_errors = 0;
};

/// One card. Owned by its System.
/// Thread-safety: info() is immutable after open. Mailbox calls (firmware_versions,
/// heartbeat, error_log, reset) are serialised internally and may be called from any thread.
/// Time: every timeout below is on the platform clock (System::clock()).
class Device {
 public:
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  [[nodiscard]] const DeviceInfo& info() const noexcept;

  /// Re-reads GET_VERSIONS. Errors: kDeadlineExceeded (no reply within the mailbox timeout),
  /// kDataLoss (reply CRC mismatch), kUnavailable (card removed or busy), kInternal (reply
  /// breaks the protocol).
  Result<FirmwareVersions> firmware_versions();
  /// Mailbox HEARTBEAT with a fresh cookie; checks the echoed cookie. Errors as above.
  Result<Heartbeat> heartbeat();
  /// Reads up to `max_entries` firmware error log entries, oldest first. Errors as above.
  Result<std::vector<FirmwareLogEntry>> error_log(std::size_t max_entries = 256);

  /// The partition the card is in now (GLOBAL.PARTITION, registers.md §3.8; 0 = unassigned),
  /// set by fabric management. Remote ops reach only cards with the same ID (others complete
  /// kPartitionDenied). Errors: kUnavailable (card removed). Thread-safe (one register read).
  Result<std::uint32_t> partition();

  /// Reads the card's power state: power now and over 1 s, energy, the enforced limit and its
  /// range, throttling, die temperature (mailbox POWER_READ, mailbox.md §3.9). Works on a
  /// read-only attach. Errors: as firmware_versions(); kInternal (reply of the wrong size).
  /// Thread-safety: safe from any thread (mailbox calls are serialised).
  Result<PowerReading> power();
  /// Per port, the module cage's power, the module's power class and temperature (POWER_READ,
  /// the same reading as power()); one entry per port, in port order. Errors as power().
  Result<std::vector<ModulePower>> module_power();
  /// Sets the power limit the card enforces, mW (POWER_LIMIT set, mailbox.md §3.10): when its
  /// 1 s average power exceeds it, the card throttles its DMA engines until the average holds.
  /// The limit survives a device reset; reset_power_limit() restores the default.
  /// Errors: kInvalidArgument (EINVAL) when `mw` is outside [min_limit_mw, max_limit_mw], the
  /// message naming the range in W; kPermissionDenied (read-only attach); mailbox errors as
  /// firmware_versions(). Thread-safety: safe from any thread.
  Result<void> set_power_limit(std::uint32_t mw);
  /// Restores the default power limit (POWER_LIMIT reset). Errors as set_power_limit().
  Result<void> reset_power_limit();

  /// Resets the card (function level reset through the backend) and waits up to 2 s of
  /// platform time for STATUS.READY.
  /// Every queue and window of the card is invalid afterwards. Errors: kDeadlineExceeded,
  /// kUnimplemented (backend cannot reset), kUnavailable.
  Result<void> reset();

  /// What the card's DMA engines support, read from BAR0 CAP registers.
  [[nodiscard]] DmaCapabilities dma_capabilities() const noexcept;

  /// Opens queue `options.engine` x (first free queue of that engine): allocates its rings in
  /// DMA-able host memory, programs SQ/CQ base, depth, priority and MSI-X, and enables it.
  /// Errors: kInvalidArgument (engine out of range, depth not a power of two in 4..65536,
  /// priority > 7); kResourceExhausted (every queue of the engine is open; memory budgets);
  /// kFailedPrecondition (the card refused the configuration: QUEUE.STATUS.CONFIG_ERROR);
  /// kUnavailable (card removed). Thread-safety: safe from any thread.
  Result<std::unique_ptr<DmaQueue>> open_queue(const QueueOptions& options);

  /// Number of optical ports (0 .. info().num_ports - 1).
  [[nodiscard]] unsigned port_count() const noexcept;

  /// The activity counters of every DMA queue of the card (registers.md §9), engine-major
  /// (index engine * queues_per_engine + queue): GLOBAL.QUEUES_ACTIVE, three 64-bit register
  /// reads per queue that has completed an op since reset (the others are 0 without a read),
  /// then GLOBAL.MAGIC to tell a removed card from saturated counters. Works on a read-only attach
  /// (an observer reads the owner's traffic). Errors: kUnavailable (card removed, or its
  /// backend gone). Thread-safety: safe from any thread; the values of one queue are read one
  /// after the other while the engine may complete ops (registers.md §9).
  Result<std::vector<QueueCounters>> queue_counters() const;
  /// The card-wide counters (registers.md §9): two register reads and GLOBAL.MAGIC. Works on a read-only attach.
  /// Errors: kUnavailable (card removed; or its backend gone: its error). Thread-safety: safe from any thread.
  Result<CardCounters> card_counters() const;

 private:
  // Devices are created by System::open only; their state is the drivers' business.
  struct Impl;
  friend struct detail::DriverAccess;  // the drivers' private way in (drivers/card/device_impl.hpp)
  explicit Device(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace npo
