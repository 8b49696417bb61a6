// SPDX-License-Identifier: Apache-2.0
// drivers/card: the driver state behind npo::Device, bound to one backend::Device.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "card/mailbox.hpp"
#include "card/memory.hpp"
#include "npo/hal/backend/backend.hpp"
#include "npo/hal/device.hpp"

namespace npo {

struct Device::Impl {
  std::unique_ptr<backend::Device> dev;
  backend::Mmio* bar0 = nullptr;
  DeviceInfo info;
  std::unique_ptr<gpu::MailboxClient> mailbox;
  gpu::MemoryState mem;
  std::mutex queues_mu;
  std::vector<bool> queue_open;  ///< per global queue index
  // Window translation table bookkeeping (window.cpp).
  std::mutex windows_mu;
  std::vector<bool> window_used;          ///< per table slot
  std::vector<std::uint16_t> window_gen;  ///< next generation per slot (survives revokes)
  std::atomic<std::uint64_t> aperture_used{0};
  std::uint64_t aperture_bytes = 0;

  /// Probes a freshly opened function: identity, BARs, capabilities, enables memory space
  /// and bus mastering, checks MAGIC/VERSION, reads geometry, asks firmware IDENTIFY and
  /// GET_VERSIONS. Errors: kFailedPrecondition (not our card, unsupported interface major),
  /// kDeadlineExceeded / kDataLoss (mailbox), backend errors.
  static Result<std::unique_ptr<Impl>> probe(std::unique_ptr<backend::Device> dev, std::uint32_t index,
                                             std::uint64_t mailbox_timeout_ns);
};

}  // namespace npo
