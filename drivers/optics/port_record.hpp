// SPDX-License-Identifier: Apache-2.0
// drivers/optics (private): one decode path for port data, whether it came from the card's
// statistics DMA block (fw/stats.hpp) or from register reads.
#pragma once

#include <cstdint>

#include "npo/fw/stats.hpp"
#include "npo/hal/backend/backend.hpp"
#include "npo/hal/port.hpp"

namespace npo::optics {

/// Fills `rec` from the PORT block of `port` and its first `lanes` LANE blocks by register
/// reads (the fallback of the stats DMA). With `counters` false only the PORT block is read.
void read_port_record(backend::Mmio& m, unsigned port, unsigned lanes, fw::stats::PortRecord& rec,
                      bool counters = true);

/// Decodes a port record into a PortStatus with `lanes` lanes.
[[nodiscard]] PortStatus decode_port_record(const fw::stats::PortRecord& rec, unsigned port, unsigned lanes);

}  // namespace npo::optics
