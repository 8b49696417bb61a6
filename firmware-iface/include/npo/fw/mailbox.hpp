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

/// Commands (mailbox.md §3). 0x0100..0x01ff are reserved for firmware update.
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
  kPowerRead = 0x0050,      ///< card power, energy, limit, die temperature, per-port module power (§3.9)
  kPowerLimit = 0x0051,     ///< get / set / reset the enforced power limit (§3.10)
  kFwUpdateFirst = 0x0100,  ///< reserved range start (not implemented by firmware 1.x)
  kFwUpdateLast = 0x01ff,
};

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
