// SPDX-License-Identifier: Apache-2.0
// npo-hal firmware interface: the CMIS 5.2 CDB message interface (Command Data Block, CMIS
// §9) as the emulated module implements it and the HAL drives it: page 9Fh layout, CdbStatus
// codes, the firmware management commands and their payloads, and the vendor header the
// emulated module takes in Start Firmware Download. Spec: docs/spec/cdb.md.
// Byte addresses are CMIS addresses (lower memory 0..127, upper page 128..255); multi-byte
// CDB fields are big-endian, as CMIS has them.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "npo/fw/mailbox.hpp"

namespace npo::fw::cdb {

// ---- Where CDB lives (CMIS 5.2 §8.2, §8.4.7, §9.2) -----------------------------------------
inline constexpr std::uint8_t kPage = 0x9f;          ///< CDB message page (bank 0: instance 1)
inline constexpr std::uint8_t kEplFirstPage = 0xa0;  ///< EPL pages A0h..AFh
inline constexpr std::uint8_t kEplLastPage = 0xaf;
inline constexpr unsigned kLowerFlags = 8;               ///< lower memory byte 8: module flags (latched)
inline constexpr std::uint8_t kFlagCdbComplete1 = 0x40;  ///< bit 6: L-CdbCmdCompleteFlag (instance 1)
inline constexpr unsigned kLowerStatus = 37;             ///< lower memory byte 37: CdbStatus (instance 1)
inline constexpr unsigned kLowerActiveFwMajor = 39;      ///< lower memory 39/40: active firmware revision
inline constexpr unsigned kLowerActiveFwMinor = 40;
inline constexpr unsigned kP01InactiveFwMajor = 128;  ///< page 01h 128/129: inactive firmware revision
inline constexpr unsigned kP01InactiveFwMinor = 129;
inline constexpr unsigned kP01CdbSupport = 163;   ///< 7:6 instances, 5 background, 4 auto paging, 3:0 EPL pages
inline constexpr unsigned kP01CdbRwLenExt = 164;  ///< CdbReadWriteLengthExtension

// ---- Page 9Fh message (CMIS 5.2 Table 9-3) ------------------------------------------------
inline constexpr unsigned kCmdId = 128;         ///< u16 BE; writing byte 129 triggers the command
inline constexpr unsigned kEplLength = 130;     ///< u16 BE
inline constexpr unsigned kLplLength = 132;     ///< u8, 0..120
inline constexpr unsigned kCheckCode = 133;     ///< CdbChkCode
inline constexpr unsigned kRplLength = 134;     ///< reply length (module)
inline constexpr unsigned kRplCheckCode = 135;  ///< reply check code (module)
inline constexpr unsigned kLpl = 136;           ///< LPL (command payload) and RPL (reply) 136..255
inline constexpr unsigned kLplMax = 120;
inline constexpr unsigned kEplMax = 2048;  ///< 16 pages of 128 bytes
static_assert(kLpl + kLplMax == 256);
static_assert(kEplMax == (kEplLastPage - kEplFirstPage + 1) * 128);
static_assert(kLplMax <= mbox::xcvr::kMaxLength, "one XCVR_WRITE carries a whole LPL");

/// CdbChkCode (CMIS 5.2 §9.3.5): ones' complement of the sum of bytes 128..132 and the LPL
/// (bytes 133..135 counted as zero). `hdr` = bytes 128..132.
[[nodiscard]] constexpr std::uint8_t check_code(std::span<const std::uint8_t, 5> hdr,
                                                std::span<const std::uint8_t> lpl) noexcept {
  unsigned sum = 0;
  for (auto b : hdr) sum += b;
  for (auto b : lpl) sum += b;
  return static_cast<std::uint8_t>(~sum & 0xffu);
}
/// Reply check code: ones' complement of the sum of the RPL bytes.
[[nodiscard]] constexpr std::uint8_t reply_check_code(std::span<const std::uint8_t> rpl) noexcept {
  unsigned sum = 0;
  for (auto b : rpl) sum += b;
  return static_cast<std::uint8_t>(~sum & 0xffu);
}
// CMIS 5.2's worked examples: zero-payload 0041h has CdbChkCode BEh, 0107h F7h.
static_assert(check_code(std::array<std::uint8_t, 5>{0x00, 0x41, 0, 0, 0}, {}) == 0xbe);
static_assert(check_code(std::array<std::uint8_t, 5>{0x01, 0x07, 0, 0, 0}, {}) == 0xf7);

// ---- CdbStatus (CMIS 5.2 Table 8-13): bit 7 busy, bit 6 failed, 5:0 result ---------------
inline constexpr std::uint8_t kStatusBusy = 0x80;
inline constexpr std::uint8_t kStatusFailed = 0x40;
inline constexpr std::uint8_t kResultMask = 0x3f;
// In progress (busy):
inline constexpr std::uint8_t kBusyCapturing = 0x81;
inline constexpr std::uint8_t kBusyChecking = 0x82;
inline constexpr std::uint8_t kBusyExecuting = 0x83;
// Success:
inline constexpr std::uint8_t kSuccess = 0x01;
// Failed (0x40 | reason):
inline constexpr std::uint8_t kFailedNoReason = 0x40;
inline constexpr std::uint8_t kFailedUnknownCmd = 0x41;
inline constexpr std::uint8_t kFailedParameter = 0x42;
inline constexpr std::uint8_t kFailedCheckCode = 0x45;
inline constexpr std::uint8_t kFailedState = 0x47;  ///< command not compatible with operating status
// Failed, vendor reasons of the emulated module (CMIS reserves 30h..3Fh for custom codes):
inline constexpr std::uint8_t kFailedImageIncomplete = 0x70;  ///< Complete: bytes of the image never written
inline constexpr std::uint8_t kFailedImageCheck = 0x71;       ///< Complete: image CRC-32C differs from the header's
inline constexpr std::uint8_t kFailedImageInvalid = 0x72;     ///< Run: the target image is not valid
/// Status 0x00 (no busy, no failure, result 0): no command since power-up.
inline constexpr std::uint8_t kIdle = 0x00;

/// "busy executing", "success", "failed: CdbChkCode error", "failed: image check (CRC)", ...
[[nodiscard]] constexpr std::string_view status_name(std::uint8_t s) noexcept {
  switch (s) {
    case kIdle: return "idle (no command since power-up)";
    case kBusyCapturing: return "busy capturing";
    case kBusyChecking: return "busy checking";
    case kBusyExecuting: return "busy executing";
    case kSuccess: return "success";
    case kFailedNoReason: return "failed: no specific failure";
    case kFailedUnknownCmd: return "failed: CMDID unknown";
    case kFailedParameter: return "failed: parameter range error or not supported";
    case kFailedCheckCode: return "failed: CdbChkCode error";
    case kFailedState: return "failed: command not compatible with operating status";
    case kFailedImageIncomplete: return "failed: image incomplete";
    case kFailedImageCheck: return "failed: image check (CRC-32C) mismatch";
    case kFailedImageInvalid: return "failed: target image invalid";
    default: break;
  }
  if (s & kStatusBusy) return "busy";
  if (s & kStatusFailed) return "failed";
  return "unknown";
}

// ---- Commands (CMIS 5.2 §9.4, §9.7) ---------------------------------------------------------
enum class Command : std::uint16_t {
  kQueryStatus = 0x0000,
  kFwMgmtFeatures = 0x0041,  ///< Get Firmware Management Features
  kGetFwInfo = 0x0100,
  kStartDownload = 0x0101,
  kWriteLpl = 0x0103,
  kWriteEpl = 0x0104,
  kCompleteDownload = 0x0107,
  kRunImage = 0x0109,
  kCommitImage = 0x010a,
};
[[nodiscard]] constexpr std::string_view command_name(std::uint16_t id) noexcept {
  switch (static_cast<Command>(id)) {
    case Command::kQueryStatus: return "Query Status";
    case Command::kFwMgmtFeatures: return "Get Firmware Management Features";
    case Command::kGetFwInfo: return "Get Firmware Info";
    case Command::kStartDownload: return "Start Firmware Download";
    case Command::kWriteLpl: return "Write Firmware Block LPL";
    case Command::kWriteEpl: return "Write Firmware Block EPL";
    case Command::kCompleteDownload: return "Complete Firmware Download";
    case Command::kRunImage: return "Run Firmware Image";
    case Command::kCommitImage: return "Commit Firmware Image";
  }
  return "unknown command";
}

/// 0041h reply (RPL offsets from byte 136; CMIS 5.2 Table 9-16). Durations in ms (byte 137
/// bit 3 MaxDurationCoding = 0).
namespace features {
inline constexpr unsigned kFlags = 1;             ///< byte 137
inline constexpr unsigned kStartPayloadSize = 2;  ///< byte 138: vendor header bytes Start takes
inline constexpr unsigned kErasedByte = 3;
inline constexpr unsigned kRwLenExt = 4;        ///< byte 140: LPL/EPL access = 8 x (1 + ext) bytes
inline constexpr unsigned kWriteMechanism = 5;  ///< byte 141: 01h LPL, 10h EPL, 11h both
inline constexpr unsigned kReadMechanism = 6;
inline constexpr unsigned kHitlessRestart = 7;    ///< byte 143 bit 0: Run can restart without traffic loss
inline constexpr unsigned kMaxDurationStart = 8;  ///< u16 BE
inline constexpr unsigned kMaxDurationAbort = 10;
inline constexpr unsigned kMaxDurationWrite = 12;
inline constexpr unsigned kMaxDurationComplete = 14;
inline constexpr unsigned kMaxDurationCopy = 16;
inline constexpr unsigned kSize = 18;
inline constexpr std::uint8_t kWriteLplOnly = 0x01, kWriteEplOnly = 0x10, kWriteBoth = 0x11;
}  // namespace features

/// 0100h reply (CMIS 5.2 Table 9-26): firmware status, then image A and B (version, build,
/// 32-byte extra string).
namespace info {
inline constexpr unsigned kStatus = 0;  ///< byte 136
inline constexpr std::uint8_t kARunning = 0x01, kACommitted = 0x02, kAInvalid = 0x04;
inline constexpr std::uint8_t kBRunning = 0x10, kBCommitted = 0x20, kBInvalid = 0x40;
inline constexpr unsigned kImageInfo = 1;  ///< byte 137: bit 0 A info present, bit 1 B
inline constexpr unsigned kA = 2;          ///< A: major, minor, build (u16 BE), extra[32]
inline constexpr unsigned kB = 38;
inline constexpr unsigned kImageBytes = 36;
inline constexpr unsigned kExtraLen = 32;
inline constexpr unsigned kSize = kB + kImageBytes;  ///< 74
}  // namespace info

/// 0101h LPL: image size (u32 BE), 4 reserved, then the vendor header.
namespace start {
inline constexpr unsigned kImageSize = 0;
inline constexpr unsigned kHeader = 8;
}  // namespace start
/// 0103h / 0104h LPL: block address (u32 BE: byte offset in the image), then (LPL) the data.
namespace block {
inline constexpr unsigned kAddress = 0;
inline constexpr unsigned kData = 4;
}  // namespace block
/// 0109h LPL: reserved, mode, delay to reset (u16 BE, ms).
namespace run {
inline constexpr unsigned kMode = 1;
inline constexpr unsigned kDelay = 2;
inline constexpr unsigned kSize = 4;
inline constexpr std::uint8_t kResetInactive = 0x00;    ///< traffic affecting reset to the inactive image
inline constexpr std::uint8_t kHitlessInactive = 0x01;  ///< attempt a hitless reset to the inactive image
}  // namespace run

// ---- The emulated module's vendor header (docs/spec/cdb.md §4) -----------------------------
/// 16 bytes the emulated module takes in Start: "NPOM", major, minor, build (u16 BE),
/// CRC-32C of the image (u32 BE, mbox::crc32c), 4 reserved zero bytes.
namespace emu_header {
inline constexpr unsigned kSize = 16;
inline constexpr std::array<std::uint8_t, 4> kMagic{'N', 'P', 'O', 'M'};
inline constexpr unsigned kMajor = 4;
inline constexpr unsigned kMinor = 5;
inline constexpr unsigned kBuild = 6;
inline constexpr unsigned kCrc = 8;
/// The header for `image` at version major.minor.build.
[[nodiscard]] inline std::array<std::byte, kSize> make(std::span<const std::byte> image, std::uint8_t major,
                                                       std::uint8_t minor, std::uint16_t build) noexcept {
  std::array<std::byte, kSize> h{};
  for (unsigned i = 0; i < 4; ++i) h[i] = static_cast<std::byte>(kMagic[i]);
  h[kMajor] = static_cast<std::byte>(major);
  h[kMinor] = static_cast<std::byte>(minor);
  h[kBuild] = static_cast<std::byte>(build >> 8);
  h[kBuild + 1] = static_cast<std::byte>(build & 0xff);
  const std::uint32_t crc = mbox::crc32c(image);
  for (unsigned i = 0; i < 4; ++i) h[kCrc + i] = static_cast<std::byte>(crc >> (24 - 8 * i));
  return h;
}
}  // namespace emu_header

}  // namespace npo::fw::cdb
