// SPDX-License-Identifier: Apache-2.0
// npo-hal public API: System -- every card a backend exposes, opened and identified.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "npo/hal/clock.hpp"
#include "npo/hal/device.hpp"
#include "npo/hal/error.hpp"

namespace npo {

namespace backend {
class Registry;
}  // namespace backend

/// The default backend URI of the tools and of System::open without a URI.
inline constexpr std::string_view kDefaultUri = "emu:mesh8";

/// The NPO cards `vfio:all` opens: the PCI functions under `<sysfs_root>/bus/pci/devices`
/// with the reference card's vendor/device IDs that are bound to vfio-pci, as PCI addresses
/// ("0000:3b:00.0") in address order. Reads sysfs only: opens no device and needs neither
/// /dev/vfio nor privileges. `sysfs_root` is "/sys" on a live system; tests pass a fake tree
/// (drivers/vfio/sysfs.hpp). Cards bound to another driver (or to none) are not listed.
/// Errors: kUnavailable (errno kept) when the devices folder cannot be listed (no sysfs).
/// Thread-safety: safe from any thread.
[[nodiscard]] Result<std::vector<std::string>> vfio_bound_cards(std::string_view sysfs_root = "/sys");

/// The URI to open when the user named none: "vfio:all" when vfio_bound_cards(sysfs_root)
/// finds a card (real cards are there to be used), else kDefaultUri (the emulator), also when
/// sysfs cannot be read. The tools' default (tools/README.md); System::open's own default
/// stays kDefaultUri. Thread-safety: safe from any thread.
[[nodiscard]] std::string default_uri(std::string_view sysfs_root = "/sys");

/// Options of System::open.
struct SystemOptions {
  /// Registry to resolve the URI with; null: backend::builtin_registry().
  const backend::Registry* registry = nullptr;
  /// Mailbox reply timeout per command, in ns of platform time (System::clock(); default 1 s).
  /// On the emulator's virtual clock a command the firmware never answers fails with
  /// kDeadlineExceeded after this much emulated time, in a few ms of wall time (the firmware
  /// first gets 20 ms of wall time to answer).
  std::uint64_t mailbox_timeout_ns = 1'000'000'000;
};

/// A set of cards reached through one backend. Owns its backend and devices; destroying
/// it closes every device (queues stopped, DMA unmapped) before the backend.
/// Thread-safety: const methods may be called concurrently; devices have their own rules.
class System {
 public:
  /// Opens the backend named by `uri` and every NPO card it enumerates, reading each card's
  /// identity through config space, BAR0 and the firmware mailbox (IDENTIFY, GET_VERSIONS).
  /// The optical links are left as they are: on a fresh emulator every port is disabled and
  /// no route is programmed, so host DMA works at once but remote DMA to another card does
  /// not. Call bring_up_fabric (bring_up.hpp) next to train every port and program routes;
  /// docs/getting-started.md walks a whole program.
  /// Accepted URIs: "emu:mesh8", "emu:N" (1..1024), "emu:file=PATH", "vfio:all", "vfio:BDF".
  /// Errors: kInvalidArgument for an unknown URI (the message lists the accepted forms);
  /// the backend's errors (kUnavailable, kPermissionDenied, kNotFound); errors of a card that
  /// does not answer (kDeadlineExceeded with the card index in the context).
  static Result<std::unique_ptr<System>> open(std::string_view uri = kDefaultUri, const SystemOptions& options = {});

  ~System();
  System(const System&) = delete;
  System& operator=(const System&) = delete;

  /// The URI the system was opened from.
  [[nodiscard]] const std::string& uri() const noexcept;
  /// The backend's name: "emulator" or "vfio".
  [[nodiscard]] std::string_view backend_name() const noexcept;
  /// Number of cards, in PCI address order.
  [[nodiscard]] std::size_t device_count() const noexcept;
  /// Card `index` (0 .. device_count()-1). Precondition: index in range (checked: out of
  /// range aborts with a message, as std::vector::at would throw).
  [[nodiscard]] Device& device(std::size_t index);
  /// Card by fabric ID. Errors: kNotFound.
  [[nodiscard]] Result<Device*> device_by_fabric_id(std::uint32_t fabric_id);

  /// The platform clock every deadline of the drivers is taken from (mailbox, reset, window
  /// revoke, DMA watchdog, link training): CLOCK_MONOTONIC on real cards and on the emulator
  /// by default, the emulator's virtual clock with `clock=virtual`, where sleeping advances
  /// emulated time. The returned handle is valid while the System lives.
  /// Thread-safety: safe from any thread.
  [[nodiscard]] Clock clock() const noexcept;

 private:
  struct Impl;
  friend struct detail::DriverAccess;  // the drivers' private way in (drivers/card/device_impl.hpp)
  explicit System(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace npo
