// SPDX-License-Identifier: Apache-2.0
// npo-hal public API: transceiver (optical module) firmware through the CMIS 5.2 CDB message
// interface (CMIS §9; the emulated module's subset: docs/spec/cdb.md), reached with
// XCVR_READ / XCVR_WRITE (mailbox.md §3.5). Query the two image banks, and update: Start,
// Write LPL blocks, Complete, Run, Commit, each polled on CdbStatus (lower byte 37) with a
// bounded wait on the platform clock.
//
// Payloads are raw: the caller has verified the image (signature, vendor, model) before; the
// module checks only its own vendor header and image checksum.
//
// Thread-safety: every function is safe from any thread. A module's CDB is exclusive: while
// one call runs CDB commands on (device, port), another call on the same port fails at once
// with kUnavailable and errno EBUSY (within one process; the card's mailbox serialises the
// byte accesses, not the command sequences). Different ports run in parallel.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "npo/hal/error.hpp"

namespace npo {

class Device;

/// One image bank of a module (CMIS 5.2 0100h Get Firmware Info).
struct ModuleImage {
  bool valid = false;      ///< holds a complete, checked image
  bool running = false;    ///< the module runs it now
  bool committed = false;  ///< the module boots it at power-up
  std::uint8_t major = 0;
  std::uint8_t minor = 0;
  std::uint16_t build = 0;
  std::string extra;  ///< vendor string (up to 32 characters)
};

/// Both banks; index 0 = image A, 1 = image B.
struct ModuleFirmwareInfo {
  std::array<ModuleImage, 2> images;
  unsigned running = 0;    ///< bank running (0 = A, 1 = B)
  unsigned committed = 0;  ///< bank committed
  [[nodiscard]] const ModuleImage& running_image() const noexcept { return images[running]; }
};

/// What the module's firmware management supports (CMIS 5.2 0041h).
struct ModuleFirmwareFeatures {
  unsigned header_bytes = 0;  ///< vendor header bytes Start takes (StartCmdPayloadSize)
  unsigned block_bytes = 0;   ///< image bytes per Write LPL block: 8 x (1 + ext), at most 120, less 4
  bool lpl_write = false;     ///< Write Firmware Block LPL (0103h) supported
  bool epl_write = false;     ///< Write Firmware Block EPL (0104h) supported
  /// Image bytes per Write EPL block: 128 x the EPL pages page 01h byte 163 advertises (3:0:
  /// 1 = A0h, 2 = A0h-A1h, 3 = 4 pages, 4 = 8, 5 = A0h-AFh), 0 without EPL.
  unsigned epl_block_bytes = 0;
  bool hitless_run = false;               ///< Run can restart the firmware without disturbing traffic
  std::uint64_t start_timeout_ns = 0;     ///< MaxDurationStart (CMIS default kCdbDefaultTimeoutNs when 0)
  std::uint64_t write_timeout_ns = 0;     ///< MaxDurationWrite
  std::uint64_t complete_timeout_ns = 0;  ///< MaxDurationComplete
};

/// Wait for commands without an advertised maximum (0000h, 0041h, 0100h, 010Ah) and for a
/// field 0041h leaves 0: 1 s of platform time.
inline constexpr std::uint64_t kCdbDefaultTimeoutNs = 1'000'000'000;
/// Wait for Run (0109h), which CMIS gives no maximum: 5 s, then the module's state and image.
inline constexpr std::uint64_t kCdbRunTimeoutNs = 5'000'000'000;

/// Reads both image banks (0100h). Errors: kNotFound (no module), kUnavailable/EBUSY (the
/// port's CDB is in use), kDeadlineExceeded (the module stayed busy past the wait: message
/// names the command and the CDB status), kAborted (the module reset under the command),
/// CDB failures as update_module_firmware, mailbox errors.
Result<ModuleFirmwareInfo> query_module_firmware(Device& device, unsigned port);

/// Reads the firmware management features (0041h). Errors as query_module_firmware.
Result<ModuleFirmwareFeatures> query_module_firmware_features(Device& device, unsigned port);

/// Where an update is.
enum class ModuleUpdateStep : std::uint8_t { kStart, kWrite, kComplete, kRun, kCommit, kDone };
/// "start", "write", "complete", "run", "commit", "done".
[[nodiscard]] const char* module_update_step_name(ModuleUpdateStep s) noexcept;

/// One progress report: called before each step and after every block written.
struct ModuleUpdateProgress {
  ModuleUpdateStep step = ModuleUpdateStep::kStart;
  std::size_t bytes_written = 0;  ///< image bytes the module accepted so far
  std::size_t total_bytes = 0;
};

/// How an update runs.
struct ModuleUpdateOptions {
  bool run = true;     ///< Run the new image (hitless when the module supports it)
  bool commit = true;  ///< Commit it once it runs (the module then boots it at power-up)
  /// Write the image with 0104h (EPL blocks of epl_block_bytes, through pages A0h..AFh)
  /// instead of 0103h, when the module supports it (else the LPL is used).
  bool epl = false;
  /// Called from the updating thread with the CDB held: it must not start CDB on the same port.
  std::function<void(const ModuleUpdateProgress&)> progress;
  std::uint64_t poll_interval_ns = 1'000'000;  ///< CdbStatus poll period, platform clock
};

/// What an update did.
struct ModuleUpdateResult {
  ModuleFirmwareInfo before;
  ModuleFirmwareInfo after;
  unsigned blocks = 0;           ///< Write LPL / Write EPL commands sent
  bool used_epl = false;         ///< the blocks went through the EPL (0104h)
  bool hitless = false;          ///< Run used the hitless mode
  std::uint64_t elapsed_ns = 0;  ///< platform time
};

/// Downloads `payload` into the module's inactive bank and (options) runs and commits it:
/// 0041h (block size, timeouts), 0100h, 0101h Start with `header` (exactly the module's
/// StartCmdPayloadSize bytes, at most 112), 0103h blocks of block_bytes (or, with
/// options.epl, 0104h blocks of epl_block_bytes), 0107h Complete
/// (the module checks the image), 0109h Run (hitless if advertised, else a traffic-affecting
/// reset: the link then retrains), 0100h to confirm the new image runs, 010Ah Commit.
/// Each command waits for CdbStatus on the platform clock, at most its 0041h maximum (or the
/// defaults above). Errors (message: "CDB 0107h (Complete Firmware Download): status 0x71
/// (failed: image check (CRC-32C) mismatch)", context value = the CDB status):
/// kInvalidArgument (empty payload, header size; CDB parameter error 0x42),
/// kDataLoss (image check failed at Complete; CdbChkCode or reply check code error),
/// kFailedPrecondition (command not compatible with the module state 0x47, target image
/// invalid), kUnimplemented (no LPL write, unknown command), kDeadlineExceeded (busy past
/// the wait), kAborted (the module reset under a command: status idle), kUnavailable/EBUSY
/// (the port's CDB is in use), kUnavailable without errno (the module is still busy with an
/// earlier command, e.g. one that timed out: power-cycle or wait), kNotFound (no module),
/// mailbox errors.
/// A failed update leaves the running image running; a bank half written stays invalid.
Result<ModuleUpdateResult> update_module_firmware(Device& device, unsigned port, std::span<const std::byte> header,
                                                  std::span<const std::byte> payload,
                                                  const ModuleUpdateOptions& options = {});

}  // namespace npo
