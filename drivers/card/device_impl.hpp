// SPDX-License-Identifier: Apache-2.0
// drivers/card: the driver state behind npo::Device, bound to one backend::Device, and the
// drivers' private way into the public objects (detail::DriverAccess). Private to drivers/:
// neither installed nor included by tools or the public headers.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "card/access.hpp"
#include "card/mailbox.hpp"
#include "card/memory.hpp"
#include "npo/hal/backend/backend.hpp"
#include "npo/hal/device.hpp"
#include "npo/hal/system.hpp"

namespace npo {

struct Device::Impl {
  std::unique_ptr<backend::Device> dev;
  backend::Mmio* bar0 = nullptr;
  /// The platform clock (Backend::clock()): every deadline of the card's driver is on it.
  backend::Clock* clock = nullptr;
  DeviceInfo info;
  std::unique_ptr<card::MailboxClient> mailbox;
  card::MemoryState mem;
  std::mutex queues_mu;
  std::vector<bool> queue_open;  ///< per global queue index
  // Window translation table bookkeeping (window.cpp).
  std::mutex windows_mu;
  std::vector<bool> window_used;          ///< per table slot
  std::vector<std::uint16_t> window_gen;  ///< next generation per slot (survives revokes)
  std::atomic<std::uint64_t> aperture_used{0};
  std::uint64_t aperture_bytes = 0;

  /// Probes a freshly opened function (`clock`: the backend's, outlives the Impl): identity, BARs, capabilities,
  /// enables memory space and bus mastering, checks MAGIC/VERSION, reads geometry, asks firmware IDENTIFY and
  /// GET_VERSIONS. Errors: kFailedPrecondition (not our card, unsupported interface major),
  /// kDeadlineExceeded / kDataLoss (mailbox), backend errors.
  static Result<std::unique_ptr<Impl>> probe(std::unique_ptr<backend::Device> dev, std::uint32_t index,
                                             backend::Clock& clock, std::uint64_t mailbox_timeout_ns);
};

namespace detail {

/// The drivers' access to what the public API keeps private: a Device's driver state, the
/// System's backend. Device and System befriend it; only drivers/ include this header.
struct DriverAccess {
  using DeviceImpl = Device::Impl;
  static DeviceImpl& device(Device& d) noexcept { return *d.impl_; }
  static const DeviceImpl& device(const Device& d) noexcept { return *d.impl_; }
  /// Wraps probed driver state into a Device (System::open).
  static std::unique_ptr<Device> make_device(std::unique_ptr<DeviceImpl> impl) {
    return std::unique_ptr<Device>(new Device(std::move(impl)));
  }
  /// The backend a System was opened on (system.cpp). Valid while the System lives.
  static backend::Backend& backend(System& s) noexcept;
};

}  // namespace detail

/// The driver state of a card (drivers only).
using DeviceImpl = detail::DriverAccess::DeviceImpl;
/// Driver state of `d`. Valid while `d` lives.
inline DeviceImpl& impl_of(Device& d) noexcept { return detail::DriverAccess::device(d); }

/// kPermissionDenied for `what` (e.g. "opening a DMA queue") on a card attached read-only
/// (DeviceInfo::read_only), naming the fix.
inline std::unexpected<Error> read_only_refusal(const DeviceInfo& info, std::string_view what) {
  return fail(Code::kPermissionDenied,
              fmt::format("card {} is attached read-only (an observer, emu-remote mode=ro): {} needs the owner's "
                          "attach (mode=rw, while no other process holds the card)",
                          info.index, what),
              {.card = info.index});
}

}  // namespace npo
