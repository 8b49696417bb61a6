// SPDX-License-Identifier: Apache-2.0
// npo-hal firmware interface: the BAR0 register map of the NPO reference card.
// Spec: docs/spec/registers.md (this header and that document are checked against
// each other by tests/spec/spec_agreement_test.cpp: every row of kRegisters and
// kFields appears in the document with the same offset, width, access and bits).
//
// Conventions (spec registers.md §1):
//  - All registers are little-endian. 32-bit registers are accessed with 32-bit
//    accesses, 64-bit registers with one 64-bit access or two 32-bit accesses,
//    low dword first.
//  - RO: writes ignored. RW: read/write. RW1C: write 1 to clear. WO: reads return 0.
//    DB: doorbell, a write has a side effect; reads return the last value written.
//  - Reserved bits read 0 and writes to them are ignored.
#pragma once

#include <cstdint>
#include <string_view>

#include "npo/fw/bits.hpp"

namespace npo::fw::regs {

/// Register interface version implemented by this header (major.minor.patch).
inline constexpr std::uint32_t kInterfaceVersion = (1u << 16) | (0u << 8) | 0u;
/// Value of the MAGIC register: ASCII "NPO1" little-endian.
inline constexpr std::uint32_t kMagic = 0x314f504e;

// ---- Fixed geometry of the reference card (spec registers.md §2) ----------------------
inline constexpr unsigned kNumEngines = 4;       ///< DMA engines per card.
inline constexpr unsigned kQueuesPerEngine = 8;  ///< queues per engine.
inline constexpr unsigned kNumQueues = kNumEngines * kQueuesPerEngine;
inline constexpr unsigned kMaxPorts = 16;                     ///< port blocks in the map; CAP0 says how many exist.
inline constexpr unsigned kLanesPerPort = 8;                  ///< lanes per optical port.
inline constexpr unsigned kWindowEntries = 1024;              ///< window translation table entries.
inline constexpr unsigned kMaxQueueDepthLog2 = 16;            ///< max 65536 descriptors per ring.
inline constexpr unsigned kMinQueueDepthLog2 = 2;             ///< min 4 descriptors per ring.
inline constexpr std::uint32_t kMaxTransferBytes = 1u << 30;  ///< max bytes of one descriptor.
inline constexpr unsigned kFecBins = 16;                      ///< FEC histogram bins (0..15 symbol errors).

// ---- Blocks ----------------------------------------------------------------------------
inline constexpr std::uint32_t kGlobalBase = 0x00000;
inline constexpr std::uint32_t kMailboxBase = 0x01000;
inline constexpr std::uint32_t kQueueBase = 0x10000;
inline constexpr std::uint32_t kQueueStride = 0x100;
inline constexpr std::uint32_t kWindowBase = 0x20000;
inline constexpr std::uint32_t kWindowStride = 0x20;
inline constexpr std::uint32_t kPortBase = 0x40000;
inline constexpr std::uint32_t kPortStride = 0x1000;
inline constexpr std::uint32_t kLaneBase = 0x100;  ///< lane blocks inside a port block
inline constexpr std::uint32_t kLaneStride = 0x100;

static_assert(kQueueBase + kNumQueues * kQueueStride <= kWindowBase);
static_assert(kWindowBase + kWindowEntries * kWindowStride <= 0x30000);
static_assert(0x30000 + 2048 * 4 <= kPortBase);
static_assert(kLaneBase + kLanesPerPort * kLaneStride <= kPortStride);
static_assert(kPortBase + kMaxPorts * kPortStride <= (1u << 20), "BAR0 is 1 MiB");

// ---- Global block (spec registers.md §3) -----------------------------------------------
namespace global {
inline constexpr std::uint32_t kMagic = 0x000;       // RO32 "NPO1"
inline constexpr std::uint32_t kVersion = 0x004;     // RO32 interface version
inline constexpr std::uint32_t kCap0 = 0x008;        // RO32 geometry
inline constexpr std::uint32_t kCap1 = 0x00c;        // RO32 features
inline constexpr std::uint32_t kHbmSize = 0x010;     // RO64 bytes of HBM
inline constexpr std::uint32_t kMaxXfer = 0x018;     // RO32 max bytes per descriptor
inline constexpr std::uint32_t kFabricId = 0x01c;    // RO32 card's fabric identity
inline constexpr std::uint32_t kSerial = 0x020;      // RO64 serial number
inline constexpr std::uint32_t kStatus = 0x040;      // RO32
inline constexpr std::uint32_t kErrStatus = 0x044;   // RW1C32
inline constexpr std::uint32_t kErrMask = 0x048;     // RW32 1 = do not raise MSI-X vector 0
inline constexpr std::uint32_t kFaultCount = 0x04c;  // RO32 IOMMU faults since reset (saturating)
inline constexpr std::uint32_t kFaultIova = 0x050;   // RO64 IOVA of the first unread fault
inline constexpr std::uint32_t kFaultInfo = 0x058;   // RC32 requester/access of that fault; read pops it
inline constexpr std::uint32_t kReset = 0x060;       // DB32 write kResetKey to reset the card
inline constexpr std::uint32_t kScratch = 0x064;     // RW32 free for software
inline constexpr std::uint32_t kTimestamp = 0x068;   // RO64 device time in ns
inline constexpr std::uint32_t kScratch64 = 0x070;   // RW64 free for software
inline constexpr std::uint32_t kStatsAddr = 0x078;   // RW64 IOVA of the port statistics block (stats.hpp), 64 B aligned
inline constexpr std::uint32_t kStatsCtrl = 0x080;   // DB32 write a nonzero sequence: card DMAs the stats block
inline constexpr std::uint32_t kStatsSeq = 0x084;    // RO32 sequence of the last stats block written
inline constexpr std::uint32_t kWindowsValid = 0x090;  // RO32 window entries with CTRL.VALID = 1 (§9)
inline constexpr std::uint32_t kMboxErrors = 0x094;    // RO32 mailbox requests ended in an error since reset (§9)
inline constexpr std::uint32_t kQueuesActive = 0x098;  // RO32 bit q: queue q wrote a completion since reset (§9)
inline constexpr std::uint32_t kPartition = 0x09c;  // RO32 partition ID set by fabric management (§3.8); 0 unassigned

inline constexpr Field32 kCap0NumEngines{0, 8};
inline constexpr Field32 kCap0QueuesPerEngine{8, 8};
inline constexpr Field32 kCap0NumPorts{16, 8};
inline constexpr Field32 kCap0LanesPerPort{24, 8};
inline constexpr Field32 kCap1MaxDepthLog2{0, 5};
inline constexpr Field32 kCap1WindowEntriesLog2{8, 5};
inline constexpr Field32 kCap1OpMask{16, 16};  ///< bit n set = opcode n supported

inline constexpr Field32 kStatusReady{0, 1};      ///< firmware up, card usable
inline constexpr Field32 kStatusFatal{1, 1};      ///< unrecoverable error, reset needed
inline constexpr Field32 kStatusResetting{2, 1};  ///< reset in progress
inline constexpr Field32 kStatusMboxReady{3, 1};  ///< mailbox accepts requests

inline constexpr Field32 kErrIommuFault{0, 1};  ///< a DMA access hit no or a read-only mapping
inline constexpr Field32 kErrEngineHang{1, 1};  ///< an engine made no progress (watchdog)
inline constexpr Field32 kErrMailbox{2, 1};     ///< firmware reported a mailbox error
inline constexpr Field32 kErrFabric{3, 1};      ///< a remote op failed in the fabric
inline constexpr Field32 kErrDescriptor{4, 1};  ///< a malformed descriptor was fetched
inline constexpr Field32 kErrRemoved{31, 1};    ///< surprise removal seen (all-ones reads follow)

inline constexpr Field32 kFaultInfoEngine{0, 8};
inline constexpr Field32 kFaultInfoQueue{8, 8};
inline constexpr Field32 kFaultInfoWrite{16, 1};  ///< 1 = write access, 0 = read
inline constexpr Field32 kFaultInfoPerm{17, 1};   ///< 1 = mapping exists but forbids the access
inline constexpr Field32 kFaultInfoValid{31, 1};

inline constexpr std::uint32_t kResetKey = 0x4e505252;  ///< "RRPN": guards against stray writes
}  // namespace global

// ---- Mailbox block (spec registers.md §4, protocol in mailbox.hpp) -----------------------
namespace mbox {
inline constexpr std::uint32_t kCtrl = 0x000;    // DB32 bit0 SEND
inline constexpr std::uint32_t kStatus = 0x004;  // RW1C32
inline constexpr std::uint32_t kReqLen = 0x008;  // RW32 bytes of request incl. header
inline constexpr std::uint32_t kRspLen = 0x00c;  // RO32 bytes of response incl. header
inline constexpr std::uint32_t kReqBuf = 0x400;  // RW, kBufSize bytes
inline constexpr std::uint32_t kRspBuf = 0x800;  // RO, kBufSize bytes
inline constexpr std::uint32_t kBufSize = 0x400;

inline constexpr Field32 kCtrlSend{0, 1};
inline constexpr Field32 kStatusBusy{0, 1};   ///< RO: firmware is processing a request
inline constexpr Field32 kStatusDone{1, 1};   ///< RW1C: a response is in RSP_BUF
inline constexpr Field32 kStatusError{2, 1};  ///< RW1C: the request could not be read at all
}  // namespace mbox

// ---- DMA queue block, one per queue q = engine * kQueuesPerEngine + queue (spec §5) ----
namespace queue {
inline constexpr std::uint32_t kSqBase = 0x00;     // RW64 IOVA of the submission ring, 64 B aligned
inline constexpr std::uint32_t kCqBase = 0x08;     // RW64 IOVA of the completion ring, 16 B aligned
inline constexpr std::uint32_t kConfig = 0x10;     // RW32 ring size, priority, MSI-X
inline constexpr std::uint32_t kCtrl = 0x14;       // RW32 enable
inline constexpr std::uint32_t kStatus = 0x18;     // RO32
inline constexpr std::uint32_t kSqTail = 0x1c;     // DB32 producer index (mod 2^32)
inline constexpr std::uint32_t kSqHead = 0x20;     // RO32 descriptors consumed (mod 2^32)
inline constexpr std::uint32_t kCqHead = 0x24;     // DB32 completions consumed by the host (mod 2^32)
inline constexpr std::uint32_t kCqTail = 0x28;     // RO32 completions written (mod 2^32)
inline constexpr std::uint32_t kErr = 0x2c;        // RW1C32 sticky per-queue error summary
inline constexpr std::uint32_t kReset = 0x30;      // DB32 bit0: abort and reset this queue
inline constexpr std::uint32_t kCompleted = 0x38;  // RO64 ops completed since enable
inline constexpr std::uint32_t kOpsOk = 0x40;      // RO64 ops completed OK since card reset (§9)
inline constexpr std::uint32_t kOpsError = 0x48;   // RO64 ops completed with an error since card reset (§9)
inline constexpr std::uint32_t kBytes = 0x50;      // RO64 bytes of data ops completed OK since card reset (§9)

inline constexpr Field32 kConfigDepthLog2{0, 5};   ///< ring entries = 2^n, kMin..kMaxQueueDepthLog2
inline constexpr Field32 kConfigPriority{8, 3};    ///< 0 lowest .. 7 highest (traffic class)
inline constexpr Field32 kConfigIrqEnable{16, 1};  ///< raise MSI-X vector 1+q on completion
inline constexpr Field32 kCtrlEnable{0, 1};
inline constexpr Field32 kStatusEnabled{0, 1};
inline constexpr Field32 kStatusIdle{1, 1};         ///< no descriptor pending or executing
inline constexpr Field32 kStatusHalted{2, 1};       ///< ring fetch failed; reset the queue
inline constexpr Field32 kStatusConfigError{3, 1};  ///< enable refused: bad base/size
inline constexpr Field32 kStatusThrottled{4, 1};    ///< has work, held by the power limit (not a hang)
inline constexpr Field32 kErrOpFailed{0, 1};        ///< at least one op completed with an error
inline constexpr Field32 kErrFetch{1, 1};           ///< descriptor or CQ ring access faulted
inline constexpr Field32 kErrCqOverflow{2, 1};      ///< host let the CQ fill; engine paused
inline constexpr Field32 kResetQueue{0, 1};
}  // namespace queue

// ---- Window translation table entry, one per window id (spec §6) ------------------------
namespace window {
inline constexpr std::uint32_t kHbmOffset = 0x00;  // RW64 start in HBM, 4 KiB aligned
inline constexpr std::uint32_t kSize = 0x08;       // RW64 bytes, multiple of 4 KiB, > 0
inline constexpr std::uint32_t kKey = 0x10;        // RW64 access key checked on every access
inline constexpr std::uint32_t kCtrl = 0x18;       // RW32 write commits the entry
inline constexpr std::uint32_t kStatus = 0x1c;     // RO32
inline constexpr std::uint32_t kAlign = 4096;

inline constexpr Field32 kCtrlValid{0, 1};
inline constexpr Field32 kCtrlRead{1, 1};
inline constexpr Field32 kCtrlWrite{2, 1};
inline constexpr Field32 kCtrlGeneration{16, 16};  ///< must match the requester's generation
inline constexpr Field32 kStatusActive{0, 1};      ///< entry committed and valid
inline constexpr Field32 kStatusBadEntry{1, 1};    ///< commit refused: range or alignment
inline constexpr Field32 kStatusInflight{8, 16};   ///< remote ops currently using the window
}  // namespace window

// ---- Fabric route table (spec §8): one entry per destination fabric ID ------------------
inline constexpr std::uint32_t kRouteBase = 0x30000;
inline constexpr unsigned kRouteEntries = 2048;  ///< indexed by destination fabric ID (1..2047)
inline constexpr unsigned kMaxHops = 16;         ///< remote ops taking more hops fail kRemoteUnreachable
namespace route {
inline constexpr Field32 kPortMask{0, 16};  ///< egress ports of equal cost (bit n = port n)
inline constexpr Field32 kValid{31, 1};
}  // namespace route

// ---- Optical port block p at kPortBase + p * kPortStride (spec §7) -----------------------
namespace port {
inline constexpr std::uint32_t kCtrl = 0x000;          // RW32
inline constexpr std::uint32_t kStatus = 0x004;        // RO32
inline constexpr std::uint32_t kLaneMap = 0x008;       // RO32 logical lane n -> physical lane, 4 bits each
inline constexpr std::uint32_t kSpeed = 0x00c;         // RO32 per-lane signalling rate
inline constexpr std::uint32_t kNeighbor = 0x010;      // RO64 peer identity learned in training
inline constexpr std::uint32_t kTrainCount = 0x018;    // RO32 training attempts since reset
inline constexpr std::uint32_t kFlapCount = 0x01c;     // RO32 up->down transitions since reset
inline constexpr std::uint32_t kTrainTimeout = 0x020;  // RW32 ms per training attempt
inline constexpr std::uint32_t kEventStatus = 0x024;   // RW1C32 latched link events
inline constexpr std::uint32_t kLaneEnable = 0x028;    // RW32 physical lanes the host allows (lane degrade)
inline constexpr std::uint32_t kTrainResult = 0x02c;   // RO32 outcome of the last finished training attempt
inline constexpr std::uint32_t kUpCount = 0x030;       // RO32 entries into Up since reset
inline constexpr std::uint32_t kCoeffUpdates = 0x034;  // RO32 Tx EQ coefficient requests in the last training
inline constexpr std::uint32_t kPrbsLanes = 0x038;     // RW32 lanes the PRBS generator/checker use
inline constexpr std::uint32_t kModuleTemp = 0x03c;    // RO32 module temperature, signed 1/256 degC (DDM mirror)
inline constexpr std::uint32_t kModuleVcc = 0x040;     // RO32 module supply, 100 uV units (DDM mirror)

inline constexpr Field32 kCtrlEnable{0, 1};       ///< allow the link to come up
inline constexpr Field32 kCtrlTrain{1, 1};        ///< write 1: (re)start link training
inline constexpr Field32 kCtrlLoopback{2, 1};     ///< near-end loopback
inline constexpr Field32 kCtrlPrbsGen{3, 1};      ///< transmit the PRBS pattern on all lanes
inline constexpr Field32 kCtrlPrbsCheck{4, 1};    ///< check received PRBS on all lanes
inline constexpr Field32 kCtrlPrbsPattern{8, 4};  ///< PrbsPattern below
inline constexpr Field32 kCtrlPrbsSide{5, 1};     ///< 0: media side (over the fibre), 1: host side (card <-> module)

inline constexpr Field32 kLaneEnableMask{0, 8};  ///< bit n: physical lane n may be used; reset 0xFF

/// TRAIN_RESULT fields: what the last training attempt ended with, and where.
inline constexpr Field32 kTrainResultCode{0, 8};      ///< TrainResult below
inline constexpr Field32 kTrainResultState{8, 4};     ///< LinkState the attempt ended in
inline constexpr Field32 kTrainResultLanes{16, 8};    ///< physical lanes without CDR lock at the failure
inline constexpr Field32 kTrainResultAttempt{24, 8};  ///< attempt number within the bring-up, from 1

/// Hardware training outcome codes (TRAIN_RESULT.CODE).
enum class TrainResult : std::uint8_t {
  kNone = 0,             ///< no attempt finished since reset (a running attempt keeps the last result)
  kOk = 1,               ///< reached Up
  kNoModule = 2,         ///< module absent or removed during training
  kModuleNotReady = 3,   ///< module did not reach ModuleReady within t_module
  kDataPathTimeout = 4,  ///< data path not activated within t_datapath
  kCdrLockTimeout = 5,   ///< lanes (TRAIN_RESULT.LANES) without signal/CDR lock at TRAIN_TIMEOUT
  kNeighborTimeout = 6,  ///< lanes locked but no partner identity exchanged within TRAIN_TIMEOUT
  kFecLockTimeout = 7,   ///< no alignment-marker lock within t_fec
  kAborted = 8,          ///< host disabled or retrained the port mid-attempt
};

inline constexpr Field32 kStatusState{0, 4};  ///< LinkState below
inline constexpr Field32 kStatusFecLock{4, 1};
inline constexpr Field32 kStatusModulePresent{5, 1};
inline constexpr Field32 kStatusLanesUp{8, 8};     ///< bitmap over lanes
inline constexpr Field32 kStatusLaneCount{16, 4};  ///< lanes in use (from the application)
inline constexpr Field32 kStatusLinkUp{31, 1};

inline constexpr Field32 kSpeedMbdPerLane{0, 20};  ///< per-lane rate in Mbaud
inline constexpr Field32 kSpeedModulation{20, 2};  ///< 0 NRZ, 1 PAM4
inline constexpr Field64 kNeighborFabricId{0, 32};
inline constexpr Field64 kNeighborPort{32, 8};
inline constexpr Field64 kNeighborValid{63, 1};

inline constexpr Field32 kEventLinkUp{0, 1};
inline constexpr Field32 kEventLinkDown{1, 1};
inline constexpr Field32 kEventTrainFail{2, 1};
inline constexpr Field32 kEventModuleChange{3, 1};

/// Port training states (spec §7.2), the value of STATUS.STATE.
enum class LinkState : std::uint8_t {
  kDisabled = 0,
  kModuleWait = 1,  ///< waiting for the transceiver to reach CMIS ModuleReady
  kDataPathInit = 2,
  kTraining = 3,  ///< Tx equalisation and neighbour exchange
  kFecLock = 4,   ///< waiting for RS(544,514) alignment marker lock
  kUp = 5,
  kFault = 6,
};

/// PRBS patterns (spec §7.4): ITU-T O.150 / IEEE 802.3 clause 120 polynomials.
enum class PrbsPattern : std::uint8_t {
  kPrbs7 = 0,
  kPrbs9 = 1,
  kPrbs11 = 2,
  kPrbs15 = 3,
  kPrbs23 = 4,
  kPrbs31 = 5,
  kPrbs13 = 6
};

// Per-lane counter block at kLaneBase + lane * kLaneStride inside the port block.
// All counters are RO64, saturating, cleared by card reset or by writing lane::kClear.
namespace lane {
inline constexpr std::uint32_t kCodewords = 0x00;      ///< RS(544,514) codewords received
inline constexpr std::uint32_t kCorrected = 0x08;      ///< codewords with 1..15 symbol errors, corrected
inline constexpr std::uint32_t kUncorrectable = 0x10;  ///< codewords with more than 15 symbol errors
inline constexpr std::uint32_t kSymbolErrors = 0x18;   ///< symbols corrected
inline constexpr std::uint32_t kPrbsBits = 0x20;       ///< bits compared by the PRBS checker
inline constexpr std::uint32_t kPrbsErrors = 0x28;     ///< bit errors seen by the PRBS checker
inline constexpr std::uint32_t kSnr = 0x30;            ///< RO32 receiver SNR in 1/256 dB units
inline constexpr std::uint32_t kTxEq = 0x34;           ///< RO32 Tx FIR taps chosen by training
inline constexpr std::uint32_t kLaneStatus = 0x38;     ///< RO32
inline constexpr std::uint32_t kClear = 0x3c;          ///< DB32 write 1: zero this lane's counters
inline constexpr std::uint32_t kFecBin0 = 0x80;        ///< RO64 x kFecBins: codewords with n symbol errors
inline constexpr Field32 kTxEqPre{0, 8};               ///< signed pre-cursor tap
inline constexpr Field32 kTxEqMain{8, 8};
inline constexpr Field32 kTxEqPost{16, 8};         ///< signed post-cursor tap
inline constexpr Field32 kLaneStatusSignal{0, 1};  ///< signal detected
inline constexpr Field32 kLaneStatusCdrLock{1, 1};
inline constexpr Field32 kLaneStatusPrbsLock{2, 1};
inline constexpr std::uint32_t kRxPower = 0x40;  ///< RO32 DDM mirror: Rx optical power, 0.1 uW units (CMIS)
inline constexpr std::uint32_t kTxPower = 0x44;  ///< RO32 DDM mirror: Tx optical power, 0.1 uW units (CMIS)
inline constexpr std::uint32_t kTxBias = 0x48;   ///< RO32 DDM mirror: laser bias, 1 uA units (scaled)
static_assert(kFecBin0 + kFecBins * 8 <= kLaneStride);
}  // namespace lane
}  // namespace port

// ---- Address helpers --------------------------------------------------------------------
[[nodiscard]] constexpr std::uint32_t queue_reg(unsigned q, std::uint32_t reg) noexcept {
  return kQueueBase + q * kQueueStride + reg;
}
[[nodiscard]] constexpr std::uint32_t window_reg(unsigned w, std::uint32_t reg) noexcept {
  return kWindowBase + w * kWindowStride + reg;
}
[[nodiscard]] constexpr std::uint32_t port_reg(unsigned p, std::uint32_t reg) noexcept {
  return kPortBase + p * kPortStride + reg;
}
[[nodiscard]] constexpr std::uint32_t lane_reg(unsigned p, unsigned l, std::uint32_t reg) noexcept {
  return kPortBase + p * kPortStride + kLaneBase + l * kLaneStride + reg;
}
[[nodiscard]] constexpr std::uint32_t route_reg(std::uint32_t fabric_id) noexcept { return kRouteBase + fabric_id * 4; }
[[nodiscard]] constexpr std::uint32_t mbox_reg(std::uint32_t reg) noexcept { return kMailboxBase + reg; }

// ---- Machine-readable register list (drives the spec agreement test) --------------------
enum class Access : std::uint8_t { kRO, kRW, kRW1C, kWO, kDB, kRC };

/// One register. `offset` is relative to its block's base (`block`), `width` in bits.
struct RegisterDesc {
  std::string_view block;
  std::string_view name;
  std::uint32_t offset;
  unsigned width;
  Access access;
};

/// One field: `reg` names "BLOCK.REGISTER".
struct FieldDesc {
  std::string_view reg;
  std::string_view name;
  unsigned shift;
  unsigned width;
};

inline constexpr RegisterDesc kRegisters[] = {
    {"GLOBAL", "MAGIC", global::kMagic, 32, Access::kRO},
    {"GLOBAL", "VERSION", global::kVersion, 32, Access::kRO},
    {"GLOBAL", "CAP0", global::kCap0, 32, Access::kRO},
    {"GLOBAL", "CAP1", global::kCap1, 32, Access::kRO},
    {"GLOBAL", "HBM_SIZE", global::kHbmSize, 64, Access::kRO},
    {"GLOBAL", "MAX_XFER", global::kMaxXfer, 32, Access::kRO},
    {"GLOBAL", "FABRIC_ID", global::kFabricId, 32, Access::kRO},
    {"GLOBAL", "SERIAL", global::kSerial, 64, Access::kRO},
    {"GLOBAL", "STATUS", global::kStatus, 32, Access::kRO},
    {"GLOBAL", "ERR_STATUS", global::kErrStatus, 32, Access::kRW1C},
    {"GLOBAL", "ERR_MASK", global::kErrMask, 32, Access::kRW},
    {"GLOBAL", "FAULT_COUNT", global::kFaultCount, 32, Access::kRO},
    {"GLOBAL", "FAULT_IOVA", global::kFaultIova, 64, Access::kRO},
    {"GLOBAL", "FAULT_INFO", global::kFaultInfo, 32, Access::kRC},
    {"GLOBAL", "RESET", global::kReset, 32, Access::kDB},
    {"GLOBAL", "SCRATCH", global::kScratch, 32, Access::kRW},
    {"GLOBAL", "TIMESTAMP", global::kTimestamp, 64, Access::kRO},
    {"GLOBAL", "SCRATCH64", global::kScratch64, 64, Access::kRW},
    {"GLOBAL", "STATS_ADDR", global::kStatsAddr, 64, Access::kRW},
    {"GLOBAL", "STATS_CTRL", global::kStatsCtrl, 32, Access::kDB},
    {"GLOBAL", "STATS_SEQ", global::kStatsSeq, 32, Access::kRO},
    {"GLOBAL", "WINDOWS_VALID", global::kWindowsValid, 32, Access::kRO},
    {"GLOBAL", "MBOX_ERRORS", global::kMboxErrors, 32, Access::kRO},
    {"GLOBAL", "QUEUES_ACTIVE", global::kQueuesActive, 32, Access::kRO},
    {"GLOBAL", "PARTITION", global::kPartition, 32, Access::kRO},
    {"MBOX", "CTRL", mbox::kCtrl, 32, Access::kDB},
    {"MBOX", "STATUS", mbox::kStatus, 32, Access::kRW1C},
    {"MBOX", "REQ_LEN", mbox::kReqLen, 32, Access::kRW},
    {"MBOX", "RSP_LEN", mbox::kRspLen, 32, Access::kRO},
    {"QUEUE", "SQ_BASE", queue::kSqBase, 64, Access::kRW},
    {"QUEUE", "CQ_BASE", queue::kCqBase, 64, Access::kRW},
    {"QUEUE", "CONFIG", queue::kConfig, 32, Access::kRW},
    {"QUEUE", "CTRL", queue::kCtrl, 32, Access::kRW},
    {"QUEUE", "STATUS", queue::kStatus, 32, Access::kRO},
    {"QUEUE", "SQ_TAIL", queue::kSqTail, 32, Access::kDB},
    {"QUEUE", "SQ_HEAD", queue::kSqHead, 32, Access::kRO},
    {"QUEUE", "CQ_HEAD", queue::kCqHead, 32, Access::kDB},
    {"QUEUE", "CQ_TAIL", queue::kCqTail, 32, Access::kRO},
    {"QUEUE", "ERR", queue::kErr, 32, Access::kRW1C},
    {"QUEUE", "RESET", queue::kReset, 32, Access::kDB},
    {"QUEUE", "COMPLETED", queue::kCompleted, 64, Access::kRO},
    {"QUEUE", "OPS_OK", queue::kOpsOk, 64, Access::kRO},
    {"QUEUE", "OPS_ERROR", queue::kOpsError, 64, Access::kRO},
    {"QUEUE", "BYTES", queue::kBytes, 64, Access::kRO},
    {"WINDOW", "HBM_OFFSET", window::kHbmOffset, 64, Access::kRW},
    {"WINDOW", "SIZE", window::kSize, 64, Access::kRW},
    {"WINDOW", "KEY", window::kKey, 64, Access::kRW},
    {"WINDOW", "CTRL", window::kCtrl, 32, Access::kRW},
    {"WINDOW", "STATUS", window::kStatus, 32, Access::kRO},
    {"ROUTE", "ENTRY", 0x0, 32, Access::kRW},
    {"PORT", "CTRL", port::kCtrl, 32, Access::kRW},
    {"PORT", "STATUS", port::kStatus, 32, Access::kRO},
    {"PORT", "LANE_MAP", port::kLaneMap, 32, Access::kRO},
    {"PORT", "SPEED", port::kSpeed, 32, Access::kRO},
    {"PORT", "NEIGHBOR", port::kNeighbor, 64, Access::kRO},
    {"PORT", "TRAIN_COUNT", port::kTrainCount, 32, Access::kRO},
    {"PORT", "FLAP_COUNT", port::kFlapCount, 32, Access::kRO},
    {"PORT", "TRAIN_TIMEOUT", port::kTrainTimeout, 32, Access::kRW},
    {"PORT", "EVENT_STATUS", port::kEventStatus, 32, Access::kRW1C},
    {"PORT", "LANE_ENABLE", port::kLaneEnable, 32, Access::kRW},
    {"PORT", "TRAIN_RESULT", port::kTrainResult, 32, Access::kRO},
    {"PORT", "UP_COUNT", port::kUpCount, 32, Access::kRO},
    {"PORT", "COEFF_UPDATES", port::kCoeffUpdates, 32, Access::kRO},
    {"PORT", "PRBS_LANES", port::kPrbsLanes, 32, Access::kRW},
    {"PORT", "MODULE_TEMP", port::kModuleTemp, 32, Access::kRO},
    {"PORT", "MODULE_VCC", port::kModuleVcc, 32, Access::kRO},
    {"LANE", "CODEWORDS", port::lane::kCodewords, 64, Access::kRO},
    {"LANE", "CORRECTED", port::lane::kCorrected, 64, Access::kRO},
    {"LANE", "UNCORRECTABLE", port::lane::kUncorrectable, 64, Access::kRO},
    {"LANE", "SYMBOL_ERRORS", port::lane::kSymbolErrors, 64, Access::kRO},
    {"LANE", "PRBS_BITS", port::lane::kPrbsBits, 64, Access::kRO},
    {"LANE", "PRBS_ERRORS", port::lane::kPrbsErrors, 64, Access::kRO},
    {"LANE", "SNR", port::lane::kSnr, 32, Access::kRO},
    {"LANE", "TX_EQ", port::lane::kTxEq, 32, Access::kRO},
    {"LANE", "LANE_STATUS", port::lane::kLaneStatus, 32, Access::kRO},
    {"LANE", "CLEAR", port::lane::kClear, 32, Access::kDB},
    {"LANE", "RX_POWER", port::lane::kRxPower, 32, Access::kRO},
    {"LANE", "TX_POWER", port::lane::kTxPower, 32, Access::kRO},
    {"LANE", "TX_BIAS", port::lane::kTxBias, 32, Access::kRO},
    {"LANE", "FEC_BIN0", port::lane::kFecBin0, 64, Access::kRO},
};

inline constexpr FieldDesc kFields[] = {
    {"GLOBAL.CAP0", "NUM_ENGINES", global::kCap0NumEngines.shift, global::kCap0NumEngines.width},
    {"GLOBAL.CAP0", "QUEUES_PER_ENGINE", global::kCap0QueuesPerEngine.shift, global::kCap0QueuesPerEngine.width},
    {"GLOBAL.CAP0", "NUM_PORTS", global::kCap0NumPorts.shift, global::kCap0NumPorts.width},
    {"GLOBAL.CAP0", "LANES_PER_PORT", global::kCap0LanesPerPort.shift, global::kCap0LanesPerPort.width},
    {"GLOBAL.CAP1", "MAX_DEPTH_LOG2", global::kCap1MaxDepthLog2.shift, global::kCap1MaxDepthLog2.width},
    {"GLOBAL.CAP1", "WINDOW_ENTRIES_LOG2", global::kCap1WindowEntriesLog2.shift, global::kCap1WindowEntriesLog2.width},
    {"GLOBAL.CAP1", "OP_MASK", global::kCap1OpMask.shift, global::kCap1OpMask.width},
    {"GLOBAL.STATUS", "READY", global::kStatusReady.shift, global::kStatusReady.width},
    {"GLOBAL.STATUS", "FATAL", global::kStatusFatal.shift, global::kStatusFatal.width},
    {"GLOBAL.STATUS", "RESETTING", global::kStatusResetting.shift, global::kStatusResetting.width},
    {"GLOBAL.STATUS", "MBOX_READY", global::kStatusMboxReady.shift, global::kStatusMboxReady.width},
    {"GLOBAL.ERR_STATUS", "IOMMU_FAULT", global::kErrIommuFault.shift, global::kErrIommuFault.width},
    {"GLOBAL.ERR_STATUS", "ENGINE_HANG", global::kErrEngineHang.shift, global::kErrEngineHang.width},
    {"GLOBAL.ERR_STATUS", "MAILBOX", global::kErrMailbox.shift, global::kErrMailbox.width},
    {"GLOBAL.ERR_STATUS", "FABRIC", global::kErrFabric.shift, global::kErrFabric.width},
    {"GLOBAL.ERR_STATUS", "DESCRIPTOR", global::kErrDescriptor.shift, global::kErrDescriptor.width},
    {"GLOBAL.ERR_STATUS", "REMOVED", global::kErrRemoved.shift, global::kErrRemoved.width},
    {"GLOBAL.FAULT_INFO", "ENGINE", global::kFaultInfoEngine.shift, global::kFaultInfoEngine.width},
    {"GLOBAL.FAULT_INFO", "QUEUE", global::kFaultInfoQueue.shift, global::kFaultInfoQueue.width},
    {"GLOBAL.FAULT_INFO", "WRITE", global::kFaultInfoWrite.shift, global::kFaultInfoWrite.width},
    {"GLOBAL.FAULT_INFO", "PERM", global::kFaultInfoPerm.shift, global::kFaultInfoPerm.width},
    {"GLOBAL.FAULT_INFO", "VALID", global::kFaultInfoValid.shift, global::kFaultInfoValid.width},
    {"MBOX.CTRL", "SEND", mbox::kCtrlSend.shift, mbox::kCtrlSend.width},
    {"MBOX.STATUS", "BUSY", mbox::kStatusBusy.shift, mbox::kStatusBusy.width},
    {"MBOX.STATUS", "DONE", mbox::kStatusDone.shift, mbox::kStatusDone.width},
    {"MBOX.STATUS", "ERROR", mbox::kStatusError.shift, mbox::kStatusError.width},
    {"QUEUE.CONFIG", "DEPTH_LOG2", queue::kConfigDepthLog2.shift, queue::kConfigDepthLog2.width},
    {"QUEUE.CONFIG", "PRIORITY", queue::kConfigPriority.shift, queue::kConfigPriority.width},
    {"QUEUE.CONFIG", "IRQ_ENABLE", queue::kConfigIrqEnable.shift, queue::kConfigIrqEnable.width},
    {"QUEUE.CTRL", "ENABLE", queue::kCtrlEnable.shift, queue::kCtrlEnable.width},
    {"QUEUE.STATUS", "ENABLED", queue::kStatusEnabled.shift, queue::kStatusEnabled.width},
    {"QUEUE.STATUS", "IDLE", queue::kStatusIdle.shift, queue::kStatusIdle.width},
    {"QUEUE.STATUS", "HALTED", queue::kStatusHalted.shift, queue::kStatusHalted.width},
    {"QUEUE.STATUS", "THROTTLED", queue::kStatusThrottled.shift, queue::kStatusThrottled.width},
    {"QUEUE.STATUS", "CONFIG_ERROR", queue::kStatusConfigError.shift, queue::kStatusConfigError.width},
    {"QUEUE.ERR", "OP_FAILED", queue::kErrOpFailed.shift, queue::kErrOpFailed.width},
    {"QUEUE.ERR", "FETCH", queue::kErrFetch.shift, queue::kErrFetch.width},
    {"QUEUE.ERR", "CQ_OVERFLOW", queue::kErrCqOverflow.shift, queue::kErrCqOverflow.width},
    {"QUEUE.RESET", "RESET", queue::kResetQueue.shift, queue::kResetQueue.width},
    {"WINDOW.CTRL", "VALID", window::kCtrlValid.shift, window::kCtrlValid.width},
    {"WINDOW.CTRL", "READ", window::kCtrlRead.shift, window::kCtrlRead.width},
    {"WINDOW.CTRL", "WRITE", window::kCtrlWrite.shift, window::kCtrlWrite.width},
    {"WINDOW.CTRL", "GENERATION", window::kCtrlGeneration.shift, window::kCtrlGeneration.width},
    {"WINDOW.STATUS", "ACTIVE", window::kStatusActive.shift, window::kStatusActive.width},
    {"WINDOW.STATUS", "BAD_ENTRY", window::kStatusBadEntry.shift, window::kStatusBadEntry.width},
    {"ROUTE.ENTRY", "PORT_MASK", route::kPortMask.shift, route::kPortMask.width},
    {"ROUTE.ENTRY", "VALID", route::kValid.shift, route::kValid.width},
    {"WINDOW.STATUS", "INFLIGHT", window::kStatusInflight.shift, window::kStatusInflight.width},
    {"PORT.CTRL", "ENABLE", port::kCtrlEnable.shift, port::kCtrlEnable.width},
    {"PORT.CTRL", "TRAIN", port::kCtrlTrain.shift, port::kCtrlTrain.width},
    {"PORT.CTRL", "LOOPBACK", port::kCtrlLoopback.shift, port::kCtrlLoopback.width},
    {"PORT.CTRL", "PRBS_GEN", port::kCtrlPrbsGen.shift, port::kCtrlPrbsGen.width},
    {"PORT.CTRL", "PRBS_CHECK", port::kCtrlPrbsCheck.shift, port::kCtrlPrbsCheck.width},
    {"PORT.CTRL", "PRBS_SIDE", port::kCtrlPrbsSide.shift, port::kCtrlPrbsSide.width},
    {"PORT.CTRL", "PRBS_PATTERN", port::kCtrlPrbsPattern.shift, port::kCtrlPrbsPattern.width},
    {"PORT.STATUS", "STATE", port::kStatusState.shift, port::kStatusState.width},
    {"PORT.STATUS", "FEC_LOCK", port::kStatusFecLock.shift, port::kStatusFecLock.width},
    {"PORT.STATUS", "MODULE_PRESENT", port::kStatusModulePresent.shift, port::kStatusModulePresent.width},
    {"PORT.STATUS", "LANES_UP", port::kStatusLanesUp.shift, port::kStatusLanesUp.width},
    {"PORT.STATUS", "LANE_COUNT", port::kStatusLaneCount.shift, port::kStatusLaneCount.width},
    {"PORT.STATUS", "LINK_UP", port::kStatusLinkUp.shift, port::kStatusLinkUp.width},
    {"PORT.SPEED", "MBD_PER_LANE", port::kSpeedMbdPerLane.shift, port::kSpeedMbdPerLane.width},
    {"PORT.SPEED", "MODULATION", port::kSpeedModulation.shift, port::kSpeedModulation.width},
    {"PORT.NEIGHBOR", "FABRIC_ID", port::kNeighborFabricId.shift, port::kNeighborFabricId.width},
    {"PORT.NEIGHBOR", "PORT", port::kNeighborPort.shift, port::kNeighborPort.width},
    {"PORT.NEIGHBOR", "VALID", port::kNeighborValid.shift, port::kNeighborValid.width},
    {"PORT.EVENT_STATUS", "LINK_UP", port::kEventLinkUp.shift, port::kEventLinkUp.width},
    {"PORT.EVENT_STATUS", "LINK_DOWN", port::kEventLinkDown.shift, port::kEventLinkDown.width},
    {"PORT.EVENT_STATUS", "TRAIN_FAIL", port::kEventTrainFail.shift, port::kEventTrainFail.width},
    {"PORT.EVENT_STATUS", "MODULE_CHANGE", port::kEventModuleChange.shift, port::kEventModuleChange.width},
    {"PORT.LANE_ENABLE", "MASK", port::kLaneEnableMask.shift, port::kLaneEnableMask.width},
    {"PORT.TRAIN_RESULT", "CODE", port::kTrainResultCode.shift, port::kTrainResultCode.width},
    {"PORT.TRAIN_RESULT", "STATE", port::kTrainResultState.shift, port::kTrainResultState.width},
    {"PORT.TRAIN_RESULT", "LANES", port::kTrainResultLanes.shift, port::kTrainResultLanes.width},
    {"PORT.TRAIN_RESULT", "ATTEMPT", port::kTrainResultAttempt.shift, port::kTrainResultAttempt.width},
    {"LANE.TX_EQ", "PRE", port::lane::kTxEqPre.shift, port::lane::kTxEqPre.width},
    {"LANE.TX_EQ", "MAIN", port::lane::kTxEqMain.shift, port::lane::kTxEqMain.width},
    {"LANE.TX_EQ", "POST", port::lane::kTxEqPost.shift, port::lane::kTxEqPost.width},
    {"LANE.LANE_STATUS", "SIGNAL", port::lane::kLaneStatusSignal.shift, port::lane::kLaneStatusSignal.width},
    {"LANE.LANE_STATUS", "CDR_LOCK", port::lane::kLaneStatusCdrLock.shift, port::lane::kLaneStatusCdrLock.width},
    {"LANE.LANE_STATUS", "PRBS_LOCK", port::lane::kLaneStatusPrbsLock.shift, port::lane::kLaneStatusPrbsLock.width},
};

/// Name of an access type as the spec writes it.
[[nodiscard]] constexpr std::string_view access_name(Access a) noexcept {
  switch (a) {
    case Access::kRO: return "RO";
    case Access::kRW: return "RW";
    case Access::kRW1C: return "RW1C";
    case Access::kWO: return "WO";
    case Access::kDB: return "DB";
    case Access::kRC: return "RC";
  }
  return "?";
}

}  // namespace npo::fw::regs
