// SPDX-License-Identifier: Apache-2.0
// npo-fw module query|update: the transceiver firmware of one port's module through CMIS CDB
// (npo/hal/module_firmware.hpp, docs/spec/cdb.md). Free functions, so npo-fw's main (which
// unpacks and verifies the signed image container) can call them with the raw payload.
#pragma once

#include <cstddef>
#include <span>

namespace npo {
class Device;
}  // namespace npo

namespace npo::tools::firmware {

/// Prints both image banks of the module in `port` of `device` (version, build, running,
/// committed, valid): text, or one JSON object with `json`. Returns the exit status: 0, or
/// 1 with the error on stderr.
int module_query(Device& device, unsigned port, bool json = false);

/// Writes `payload` (already verified) with the module's vendor `header` into the inactive
/// bank of the module in `port`, runs it and, with `commit`, commits it; prints one progress
/// line per step and about every 10% of the bytes, then the banks as module_query does.
/// Returns the exit status: 0; 1 with the error on stderr (the message names the CDB command
/// and status); 2 when another call holds the port's CDB (EBUSY).
int module_update(Device& device, unsigned port, std::span<const std::byte> header, std::span<const std::byte> payload,
                  bool commit = true, bool json = false);

}  // namespace npo::tools::firmware
