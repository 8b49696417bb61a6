// SPDX-License-Identifier: Apache-2.0
// drivers/optics: LinkMonitor -- one batched register snapshot of every port and lane of
// every card. Health verdicts arrive with the optics issue's channel model.
#include "npo/hal/link_monitor.hpp"

#include <chrono>

#include "npo/hal/system.hpp"

namespace npo {

Result<LinkSnapshot> LinkMonitor::snapshot() {
  LinkSnapshot s;
  s.timestamp_ns = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
  s.cards.reserve(system_->device_count());
  for (std::size_t c = 0; c < system_->device_count(); ++c) {
    auto& dev = system_->device(c);
    LinkSnapshot::CardPorts cp;
    cp.card = static_cast<std::uint32_t>(c);
    cp.ports.reserve(dev.port_count());
    for (unsigned p = 0; p < dev.port_count(); ++p) {
      auto ps = read_port(dev, p);
      if (!ps) return std::unexpected(ps.error());
      cp.ports.push_back(std::move(*ps));
    }
    s.cards.push_back(std::move(cp));
  }
  return s;
}

}  // namespace npo
