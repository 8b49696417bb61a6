// SPDX-License-Identifier: Apache-2.0
// npo-hal firmware interface: the host <-> firmware mailbox protocol.
// Spec: docs/spec/mailbox.md. Transport: BAR0 mailbox block (regs.hpp, namespace mbox):
// the host writes a request (header + payload) into REQ_BUF, its length into REQ_LEN,
// and 1 to CTRL.SEND; the firmware sets STATUS.BUSY, then writes a response into
// RSP_BUF and RSP_LEN, clears BUSY and sets STATUS.DONE (and raises MSI-X vector 0).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "npo/fw/bits.hpp"
#include "npo/fw/regs.hpp"

namespace npo::fw::mbox {

/// Protocol version carried in every header.
inline constexpr std::uint8_t kProtocolVersion = 1;

/// Message header, 16 bytes, little-endian (mailbox.md §2).
namespace hdr {
inline constexpr std::size_t kSize = 16;
inline constexpr std::size_t kVersion = 0x00;     // u8 kProtocolVersion
inline constexpr std::size_t kFlags = 0x01;       // u8 bit0 = response
inline constexpr std::size_t kOpcode = 0x02;      // u16 Command
inline constexpr std::size_t kSequence = 0x04;    // u32 chosen by the host, echoed in the response
inline constexpr std::size_t kPayloadLen = 0x08;  // u16 bytes following the header
inline constexpr std::size_t kStatus = 0x0a;      // u16 Status (responses), 0 in requests
inline constexpr std::size_t kCrc = 0x0c;         // u32 CRC32C of header (this field zero) + payload
inline constexpr std::uint8_t kFlagResponse = 1u << 0;
}  // namespace hdr

/// Largest payload of one message.
inline constexpr std::size_t kMaxPayload = regs::mbox::kBufSize - hdr::kSize;

/// Commands (mailbox.md §3). 0x0100..0x01ff belong to firmware update (§5): 0x0100..0x0106
/// are defined, the rest of the range is reserved.
enum class Command : std::uint16_t {
  kIdentify = 0x0001,
  kGetVersions = 0x0002,
  kReset = 0x0003,
  kHeartbeat = 0x0004,
  kXcvrRead = 0x0010,
  kXcvrWrite = 0x0011,
  kLinkControl = 0x0020,
  kTelemetry = 0x0030,
  kErrorLogRead = 0x0040,
  kErrorLogClear = 0x0041,
  kPowerRead = 0x0050,   ///< card power, energy, limit, die temperature, per-port module power (§3.9)
  kPowerLimit = 0x0051,  ///< get / set / reset the enforced power limit (§3.10)
  kFwQuery = 0x0100,     ///< §5.2 flash slots, versions, update state
  kFwBegin = 0x0101,     ///< §5.3 start staging an image into the inactive slot (erases it)
  kFwWrite = 0x0102,     ///< §5.4 one chunk, in order
  kFwFinish = 0x0103,    ///< §5.5 the card verifies the staged image
  kFwActivate = 0x0104,  ///< §5.6 reset into the staged slot on trial
  kFwCommit = 0x0105,    ///< §5.7 make the trial slot permanent, raise the security version
  kFwAbort = 0x0106,     ///< §5.8 drop a staged image, or leave a trial for the committed slot
};

/// The firmware-update opcode range (mailbox.md §5); opcodes in it that Command does not name
/// are answered UNKNOWN_COMMAND.
inline constexpr std::uint16_t kFwUpdateFirst = 0x0100;
inline constexpr std::uint16_t kFwUpdateLast = 0x01ff;

/// Reply status (mailbox.md §4).
enum class Status : std::uint16_t {
  kOk = 0,
  kBadVersion = 1,        ///< header version not supported
  kBadCrc = 2,            ///< CRC32C mismatch
  kBadLength = 3,         ///< REQ_LEN / payload_len inconsistent, or payload wrong size for the command
  kUnknownCommand = 4,    ///< opcode not implemented
  kBadArgument = 5,       ///< a field is out of range (port, lane, length, action)
  kBusy = 6,              ///< firmware cannot take the command now; retry later
  kNoModule = 7,          ///< no transceiver present in that port
  kPageNotSupported = 8,  ///< module does not advertise that bank/page
  kInternal = 9,          ///< firmware internal error
  kReadOnly = 10,         ///< transceiver write to a read-only byte
  kBadState = 11,         ///< firmware update: the command does not fit the update state (§5.1)
  kImageInvalid = 12,     ///< firmware update: the staged image is malformed or for another card
  kImageCorrupt = 13,     ///< firmware update: payload digest mismatch
  kImageSignature = 14,   ///< firmware update: unknown signer key or bad signature
  kRollbackRefused = 15,  ///< firmware update: security version below the card's counter
};

[[nodiscard]] constexpr std::string_view status_name(Status s) noexcept {
  switch (s) {
    case Status::kOk: return "ok";
    case Status::kBadVersion: return "bad_version";
    case Status::kBadCrc: return "bad_crc";
    case Status::kBadLength: return "bad_length";
    case Status::kUnknownCommand: return "unknown_command";
    case Status::kBadArgument: return "bad_argument";
    case Status::kBusy: return "busy";
    case Status::kNoModule: return "no_module";
    case Status::kPageNotSupported: return "page_not_supported";
    case Status::kInternal: return "internal";
    case Status::kReadOnly: return "read_only";
    case Status::kBadState: return "bad_state";
    case Status::kImageInvalid: return "image_invalid";
    case Status::kImageCorrupt: return "image_corrupt";
    case Status::kImageSignature: return "image_signature";
    case Status::kRollbackRefused: return "rollback_refused";
  }
  return "unknown";
}

// ---- Payloads (mailbox.md §3): byte offsets inside the payload ----------------------
/// IDENTIFY response.
namespace identify {
inline constexpr std::size_t kVendorId = 0x00;         // u16
inline constexpr std::size_t kDeviceId = 0x02;         // u16
inline constexpr std::size_t kFabricId = 0x04;         // u32
inline constexpr std::size_t kSerial = 0x08;           // u64
inline constexpr std::size_t kHbmBytes = 0x10;         // u64
inline constexpr std::size_t kNumEngines = 0x18;       // u8
inline constexpr std::size_t kQueuesPerEngine = 0x19;  // u8
inline constexpr std::size_t kNumPorts = 0x1a;         // u8
inline constexpr std::size_t kLanesPerPort = 0x1b;     // u8
inline constexpr std::size_t kModel = 0x1c;            // char[32], NUL padded
inline constexpr std::size_t kSize = 0x3c;
}  // namespace identify

/// GET_VERSIONS response.
namespace versions {
inline constexpr std::size_t kFirmware = 0x00;        // u32 major<<16 | minor<<8 | patch
inline constexpr std::size_t kInterface = 0x04;       // u32 register interface (regs::kInterfaceVersion)
inline constexpr std::size_t kProtocol = 0x08;        // u32 mailbox protocol version
inline constexpr std::size_t kBuildId = 0x0c;         // u32
inline constexpr std::size_t kFirmwareString = 0x10;  // char[32], e.g. "1.4.2"
inline constexpr std::size_t kSize = 0x30;
}  // namespace versions

/// RESET request.
namespace reset {
inline constexpr std::size_t kScope = 0x00;  // u32: 0 = firmware restart, 1 = whole card
inline constexpr std::size_t kSize = 0x04;
}  // namespace reset

/// HEARTBEAT request (cookie) and response (cookie, uptime_ns, count).
namespace heartbeat {
inline constexpr std::size_t kCookie = 0x00;  // u64
inline constexpr std::size_t kReqSize = 0x08;
inline constexpr std::size_t kUptimeNs = 0x08;  // u64 (response)
inline constexpr std::size_t kCount = 0x10;     // u32 (response)
inline constexpr std::size_t kRspSize = 0x14;
}  // namespace heartbeat

/// XCVR_READ / XCVR_WRITE request: CMIS 5.2 §8.1 addressing. Offsets 0..127 are the
/// lower memory, 128..255 the upper page `page` of bank `bank`. WRITE appends `length` bytes.
/// The READ response payload is the `length` bytes read.
namespace xcvr {
inline constexpr std::size_t kPort = 0x00;    // u8
inline constexpr std::size_t kBank = 0x01;    // u8
inline constexpr std::size_t kPage = 0x02;    // u8
inline constexpr std::size_t kOffset = 0x03;  // u8 0..255
inline constexpr std::size_t kLength = 0x04;  // u8 1..128; offset + length <= 256
inline constexpr std::size_t kHdrSize = 0x08;
inline constexpr std::size_t kData = 0x08;  // WRITE only
inline constexpr unsigned kMaxLength = 128;
}  // namespace xcvr

/// LINK_CONTROL request; the response is the port's STATUS register value (u32).
namespace link {
inline constexpr std::size_t kPort = 0x00;    // u8
inline constexpr std::size_t kAction = 0x01;  // u8 Action
inline constexpr std::size_t kArg = 0x02;     // u8 (PRBS pattern for kPrbsStart)
inline constexpr std::size_t kSize = 0x04;
inline constexpr std::size_t kRspStatus = 0x00;  // u32
inline constexpr std::size_t kRspSize = 0x04;
enum class Action : std::uint8_t {
  kDown = 0,
  kUp = 1,
  kRetrain = 2,
  kPrbsStart = 3,
  kPrbsStop = 4,
  kLoopbackOn = 5,
  kLoopbackOff = 6
};
inline constexpr unsigned kNumActions = 7;
}  // namespace link

/// TELEMETRY response: card sensors plus 16 bytes per port (NUM_PORTS of them).
namespace telemetry {
inline constexpr std::size_t kTimestampNs = 0x00;  // u64
inline constexpr std::size_t kTempQ8 = 0x08;       // i16 die temperature, 1/256 °C
inline constexpr std::size_t kPowerMw = 0x0c;      // u32 card power, mW
inline constexpr std::size_t kPorts = 0x10;        // start of per-port records
inline constexpr std::size_t kPortRecord = 16;
inline constexpr std::size_t kPortStatus = 0x00;     // u32 PORT.STATUS
inline constexpr std::size_t kPortFlaps = 0x04;      // u32 PORT.FLAP_COUNT
inline constexpr std::size_t kPortModTempQ8 = 0x08;  // i16 module temperature, 1/256 °C (CMIS 5.2 §8.2.5)
inline constexpr std::size_t kPortModVcc = 0x0a;     // u16 module Vcc, 100 µV units
inline constexpr std::size_t kPortMaxBer = 0x0c;     // u32 worst lane pre-FEC BER as -log10 * 1000 (0 = none)
}  // namespace telemetry

/// ERROR_LOG_READ request (start index, max entries) and response (total, count, entries).
namespace errlog {
inline constexpr std::size_t kStart = 0x00;  // u16
inline constexpr std::size_t kMax = 0x02;    // u16
inline constexpr std::size_t kReqSize = 0x04;
inline constexpr std::size_t kTotal = 0x00;  // u16 entries held by firmware
inline constexpr std::size_t kCount = 0x02;  // u16 entries in this reply
inline constexpr std::size_t kEntries = 0x04;
inline constexpr std::size_t kEntrySize = 32;
inline constexpr std::size_t kEntryTimestamp = 0x00;  // u64 ns
inline constexpr std::size_t kEntryCode = 0x08;       // u16
inline constexpr std::size_t kEntrySeverity = 0x0a;   // u8 0 info, 1 warning, 2 error, 3 fatal
inline constexpr std::size_t kEntrySource = 0x0b;     // u8 0 firmware, 1 dma, 2 iommu, 3 port, 4 mailbox
inline constexpr std::size_t kEntryArg0 = 0x0c;       // u32
inline constexpr std::size_t kEntryArg1 = 0x10;       // u64
inline constexpr std::size_t kEntryArg2 = 0x18;       // u64
inline constexpr std::size_t kMaxPerReply = (kMaxPayload - kEntries) / kEntrySize;
inline constexpr std::size_t kCapacity = 256;  ///< ring held by firmware; oldest dropped
}  // namespace errlog

/// Firmware update (mailbox.md §5). Slots: 0 = A, 1 = B.
namespace fwu {
inline constexpr unsigned kNumSlots = 2;
inline constexpr std::uint32_t kMaxChunk = 512;  ///< largest WRITE chunk, bytes
/// Update state (QUERY kState).
enum class State : std::uint8_t {
  kIdle = 0,       ///< no update in progress; the committed slot runs
  kReceiving = 1,  ///< BEGIN done; WRITE chunks being received
  kStaged = 2,     ///< FINISH verified the image; ACTIVATE next
  kTrial = 3,      ///< running the new slot on trial; COMMIT or ABORT next
};
inline constexpr std::uint8_t kFlagReady = 1u << 0;       ///< the running image reported ready
inline constexpr std::uint8_t kFlagRolledBack = 1u << 1;  ///< the last trial ended by a rollback
// QUERY response.
inline constexpr std::size_t kActiveSlot = 0x00;       // u8 slot running now
inline constexpr std::size_t kCommittedSlot = 0x01;    // u8 slot booted at power-up
inline constexpr std::size_t kState = 0x02;            // u8 State
inline constexpr std::size_t kFlags = 0x03;            // u8 kFlag*
inline constexpr std::size_t kSecurityVersion = 0x04;  // u32 the card's anti-rollback counter
inline constexpr std::size_t kQueryMaxChunk = 0x08;    // u32 largest WRITE chunk
inline constexpr std::size_t kMaxImage = 0x0c;         // u32 largest image (header + payload)
inline constexpr std::size_t kVendorId = 0x10;         // u16 the card's PCI vendor ID
inline constexpr std::size_t kDeviceId = 0x12;         // u16 the card's PCI device ID
inline constexpr std::size_t kReceived = 0x14;         // u32 bytes received since BEGIN
inline constexpr std::size_t kBoardModel = 0x18;       // char[32] board model an image must name (or none)
inline constexpr std::size_t kTrustedKey = 0x38;       // u8[32] Ed25519 public key the card trusts
inline constexpr std::size_t kSlots = 0x58;            // kNumSlots slot records
inline constexpr std::size_t kSlotRecord = 0x18;
inline constexpr std::size_t kSlotValid = 0x00;            // u8 1: holds a verified image
inline constexpr std::size_t kSlotVersion = 0x04;          // u32 firmware version
inline constexpr std::size_t kSlotSecurityVersion = 0x08;  // u32
inline constexpr std::size_t kSlotBytes = 0x10;            // u64 image bytes (header + payload)
inline constexpr std::size_t kQuerySize = kSlots + kNumSlots * kSlotRecord;
// BEGIN request / response.
inline constexpr std::size_t kBeginTotal = 0x00;  // u64 image bytes to come
inline constexpr std::size_t kBeginSlot = 0x08;   // u8 target slot (must be the inactive one)
inline constexpr std::size_t kBeginReqSize = 0x10;
inline constexpr std::size_t kBeginRspSlot = 0x00;  // u8
inline constexpr std::size_t kBeginRspSize = 0x04;
// WRITE request / response.
inline constexpr std::size_t kWriteOffset = 0x00;  // u32 must equal the bytes received so far
inline constexpr std::size_t kWriteLength = 0x04;  // u16 1..kMaxChunk
inline constexpr std::size_t kWriteHdrSize = 0x08;
inline constexpr std::size_t kWriteData = 0x08;
inline constexpr std::size_t kWriteRspReceived = 0x00;  // u32
inline constexpr std::size_t kWriteRspSize = 0x04;
// FINISH response.
inline constexpr std::size_t kFinishSlot = 0x00;             // u8
inline constexpr std::size_t kFinishVersion = 0x04;          // u32
inline constexpr std::size_t kFinishSecurityVersion = 0x08;  // u32
inline constexpr std::size_t kFinishRspSize = 0x0c;
// COMMIT response.
inline constexpr std::size_t kCommitSecurityVersion = 0x00;  // u32 the card's counter now
inline constexpr std::size_t kCommitRspSize = 0x04;
}  // namespace fwu

/// POWER_READ response (mailbox.md §3.9): card power state, then 16 bytes per port.
namespace power {
inline constexpr std::size_t kTimestampNs = 0x00;     // u64 sample time, GLOBAL.TIMESTAMP clock
inline constexpr std::size_t kPowerMw = 0x08;         // u32 instantaneous card power (last 10 ms), mW
inline constexpr std::size_t kPowerAvgMw = 0x0c;      // u32 card power averaged over the last 1 s, mW
inline constexpr std::size_t kEnergyMj = 0x10;        // u64 energy since the card powered on, mJ (monotonic)
inline constexpr std::size_t kLimitMw = 0x18;         // u32 enforced power limit, mW
inline constexpr std::size_t kDefaultLimitMw = 0x1c;  // u32 default limit, mW
inline constexpr std::size_t kMinLimitMw = 0x20;      // u32 lowest settable limit, mW
inline constexpr std::size_t kMaxLimitMw = 0x24;      // u32 highest settable limit, mW
inline constexpr std::size_t kThrottle = 0x28;        // u32 throttle reasons now (kThrottle* bits)
inline constexpr std::size_t kThrottledNs = 0x30;     // u64 time spent throttled since power-on, ns
inline constexpr std::size_t kTempQ8 = 0x38;          // i16 die temperature, 1/256 °C
inline constexpr std::size_t kEnginesActive = 0x3a;   // u8 DMA engines that moved data in the last 10 ms
inline constexpr std::size_t kNumPorts = 0x3b;        // u8 port records that follow (CAP0.NUM_PORTS)
inline constexpr std::size_t kIdleMw = 0x3c;          // u32 share of kPowerMw: idle (always-on) power, mW
inline constexpr std::size_t kDmaMw = 0x40;           // u32 share: DMA engines, mW
inline constexpr std::size_t kSerdesMw = 0x44;        // u32 share: SerDes of trained lanes, mW
inline constexpr std::size_t kModulesMw = 0x48;       // u32 share: module cages (sum of port draw_mw), mW
inline constexpr std::size_t kPorts = 0x50;           // start of per-port records
inline constexpr std::size_t kPortRecord = 16;
inline constexpr std::size_t kPortFlags = 0x00;         // u8 kPort* bits
inline constexpr std::size_t kPortPowerClass = 0x01;    // u8 CMIS power class 1..8 (page 00h byte 200 bits 7:5 + 1)
inline constexpr std::size_t kPortMaxPowerQ = 0x02;     // u16 module max power, 0.25 W units (page 00h byte 201)
inline constexpr std::size_t kPortDrawMw = 0x04;        // u32 cage rail draw now, mW
inline constexpr std::size_t kPortTempQ8 = 0x08;        // i16 module temperature, 1/256 °C (DDM TempMonValue)
inline constexpr std::size_t kPortTrainedLanes = 0x0a;  // u8 lanes of the link in FecLock/Up (SerDes powered)
inline constexpr std::uint32_t kThrottlePowerLimit = 1u << 0;  ///< the 1 s average exceeded the limit: DMA throttled
inline constexpr std::uint8_t kPortPresent = 1u << 0;          ///< a module is plugged
inline constexpr std::uint8_t kPortLowPower = 1u << 1;         ///< the module is in CMIS ModuleLowPwr
[[nodiscard]] constexpr std::size_t size(unsigned num_ports) noexcept { return kPorts + num_ports * kPortRecord; }
}  // namespace power

/// POWER_LIMIT request and response (mailbox.md §3.10).
namespace power_limit {
inline constexpr std::size_t kAction = 0x00;   // u8 Action
inline constexpr std::size_t kLimitMw = 0x04;  // u32 kSet: the new limit, mW; otherwise 0
inline constexpr std::size_t kReqSize = 0x08;
inline constexpr std::size_t kRspLimitMw = 0x00;    // u32 enforced limit after the action, mW
inline constexpr std::size_t kRspDefaultMw = 0x04;  // u32
inline constexpr std::size_t kRspMinMw = 0x08;      // u32
inline constexpr std::size_t kRspMaxMw = 0x0c;      // u32
inline constexpr std::size_t kRspSize = 0x10;
enum class Action : std::uint8_t { kGet = 0, kSet = 1, kReset = 2 };
}  // namespace power_limit

static_assert(identify::kSize <= kMaxPayload);
static_assert(fwu::kQuerySize <= kMaxPayload);
static_assert(fwu::kWriteData + fwu::kMaxChunk <= kMaxPayload);
static_assert(power::kPortTrainedLanes < power::kPortRecord && power::kModulesMw + 4 <= power::kPorts);
static_assert(power::size(regs::kMaxPorts) <= kMaxPayload);
static_assert(telemetry::kPorts + regs::kMaxPorts * telemetry::kPortRecord <= kMaxPayload);
static_assert(xcvr::kData + xcvr::kMaxLength <= kMaxPayload);

// ---- CRC32C (Castagnoli, reflected polynomial 0x82F63B78; RFC 3720 §B.4) --------------
namespace detail {
constexpr std::array<std::uint32_t, 256> make_crc32c_table() {
  std::array<std::uint32_t, 256> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ 0x82f63b78u : (c >> 1);
    t[i] = c;
  }
  return t;
}
inline constexpr auto kCrc32cTable = make_crc32c_table();
}  // namespace detail

/// Continues a CRC32C over `data`. Start with `crc = 0`; the result is final (already
/// inverted). crc32c("123456789") == 0xE3069283.
[[nodiscard]] constexpr std::uint32_t crc32c(std::span<const std::byte> data, std::uint32_t crc = 0) noexcept {
  crc = ~crc;
  for (std::byte b : data) crc = detail::kCrc32cTable[(crc ^ static_cast<std::uint8_t>(b)) & 0xffu] ^ (crc >> 8);
  return ~crc;
}

/// CRC of a whole message (header + payload) with the header's CRC field taken as zero.
/// `msg` must be at least hdr::kSize bytes.
[[nodiscard]] inline std::uint32_t message_crc(std::span<const std::byte> msg) noexcept {
  std::array<std::byte, hdr::kSize> h{};
  for (std::size_t i = 0; i < hdr::kSize; ++i) h[i] = msg[i];
  store_le<std::uint32_t>(h.data(), hdr::kCrc, 0);
  return crc32c(msg.subspan(hdr::kSize), crc32c(h));
}

}  // namespace npo::fw::mbox
