// SPDX-License-Identifier: Apache-2.0
// drivers/gpu: the driver state behind npo::Device, bound to one backend::Device.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "gpu/mailbox.hpp"
#include "gpu/memory.hpp"
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

  /// Probes a freshly opened function: identity, BARs, capabilities, enables memory space
  /// and bus mastering, checks MAGIC/VERSION, reads geometry, asks firmware IDENTIFY and
  /// GET_VERSIONS. Errors: kFailedPrecondition (not our card, unsupported interface major),
  /// kDeadlineExceeded / kDataLoss (mailbox), backend errors.
  static Result<std::unique_ptr<Impl>> probe(std::unique_ptr<backend::Device> dev, std::uint32_t index,
                                             std::uint64_t mailbox_timeout_ns);
};

}  // namespace npo
