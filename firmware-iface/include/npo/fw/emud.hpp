// SPDX-License-Identifier: Apache-2.0
// npo-emud wire protocol: the contract between the shared emulator daemon (npo-emud) and its
// clients (the emu-remote backend). Spec: docs/spec/emud-protocol.md. Shaped like vfio-user:
// one 16-byte header per message, then a command-specific body; file descriptors (DMA memory,
// the HBM aperture, interrupt eventfds) travel as SCM_RIGHTS ancillary data.
// Standard library only; every layout is given as byte offsets with static_asserts, and read
// and written with load/store below (host byte order: both ends run on the same host).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "npo/fw/regs.hpp"

namespace npo::fw::emud {

/// Protocol version (spec §2). A major mismatch is refused; minors are compatible.
inline constexpr std::uint16_t kVersionMajor = 1;
/// 1: MAILBOX_OBSERVE; 2: DMA_MAP kFlagUnsealed; 3: kFlagProcessMemory; 4: DOORBELL_SHADOW;
/// 5: ENGINE_SHARE, HBM_FD, ENGINE_EVENT (the owner runs its card's DMA engines);
/// 6: WINDOW_FD, HBM_FD of the own card only (process isolation, spec §5.13);
/// 7: ENGINE_SHARE's state read-only, ENGINE_FD (an owner writes its own card's engine state only)
inline constexpr std::uint16_t kVersionMinor = 7;

/// Largest message either side sends or accepts, header included (spec §1).
inline constexpr std::uint32_t kMaxMessage = 8192;
/// Largest data payload of one REGION_READ / REGION_WRITE (spec §5.6).
inline constexpr std::uint32_t kMaxAccess = 4096;
/// Most file descriptors attached to one message (SET_IRQS of 64 vectors).
inline constexpr unsigned kMaxFds = 64;
/// Largest error text in an error reply (spec §3).
inline constexpr std::uint32_t kMaxErrorText = 1024;

/// Region index of PCI configuration space (as VFIO_PCI_CONFIG_REGION_INDEX); 0..5 are BARs.
inline constexpr std::uint32_t kRegionConfig = 7;

/// Socket file of card `index` in the socket directory: "card-<index>.sock" (spec §1).
inline constexpr const char* kSocketPrefix = "card-";
inline constexpr const char* kSocketSuffix = ".sock";
/// Lock file the daemon holds (flock) while it serves a directory; contains its pid.
inline constexpr const char* kLockFile = "npo-emud.lock";

/// Commands (spec §5). Numbers follow vfio-user where the role is the same.
enum class Command : std::uint16_t {
  kVersion = 1,
  kDmaMap = 2,
  kDmaUnmap = 3,
  kDeviceGetInfo = 4,
  kRegionInfo = 5,
  kSetIrqs = 8,
  kRegionRead = 9,
  kRegionWrite = 10,
  kDeviceReset = 13,
  kInjectFault = 64,  ///< npo-specific: schedule an emulator fault (npo-emu fault --socket-dir)
  /// npo-specific: one read-only firmware mailbox request answered by the daemon beside the
  /// card's BAR0 mailbox (spec §5.10), for read-only attaches.
  kMailboxObserve = 65,
  /// npo-specific: shadow doorbells (spec §5.11): the client writes SQ_TAIL and CQ_HEAD into a
  /// page the daemon shares and rings an eventfd it passes, instead of one REGION_WRITE each.
  kDoorbellShadow = 66,
  /// npo-specific (spec §5.12): the owner runs its card's DMA engines itself; the reply carries
  /// the shared engine state of every card.
  kEngineShare = 67,
  /// npo-specific (spec §5.12): the memfd of one card's HBM, for an owner's engines' remote ops.
  kHbmFd = 68,
  /// npo-specific (spec §5.12), posted: what an owner's engine reports that only the card model
  /// takes (an IOMMU fault record, error bits, an MSI-X vector, a halted queue).
  kEngineEvent = 69,
  /// npo-specific (spec §5.13): the memfd of one open window, for an importer that holds its
  /// key and is in the window owner's partition (or for the owner itself).
  kWindowFd = 70,
  /// npo-specific (spec §5.13): which memfd holds a range of the owner's own card's HBM now (a
  /// window's while one is open over it), so the owner maps its views of the range from it.
  kHbmRangeFd = 71,
  /// npo-specific (spec §5.12, §5.13): the memfd of the connection's own card's engine pages
  /// (its queues' registers and engine counters), the only state the owner maps read-write.
  kEngineFd = 72,
};

/// MAILBOX_OBSERVE (spec §5.10): the body is one mailbox request message (mailbox.md §2,
/// header + payload), 16..1024 bytes; the reply body is the reply message.
namespace observe {
inline constexpr std::size_t kMinBytes = 16;
inline constexpr std::size_t kMaxBytes = 1024;
}  // namespace observe

// ---- Header (spec §1), 16 bytes ------------------------------------------------------------
namespace hdr {
inline constexpr std::size_t kMsgId = 0;    ///< u16, echoed in the reply
inline constexpr std::size_t kCommand = 2;  ///< u16 Command
inline constexpr std::size_t kSize = 4;     ///< u32 bytes of the whole message, header included
inline constexpr std::size_t kFlags = 8;    ///< u32 kFlag* bits
inline constexpr std::size_t kError = 12;   ///< u32 npo::Code of an error reply, else 0
inline constexpr std::size_t kBytes = 16;
static_assert(kError + 4 == kBytes);
}  // namespace hdr

inline constexpr std::uint32_t kFlagTypeMask = 0xf;  ///< 0 command, 1 reply
inline constexpr std::uint32_t kTypeCommand = 0;
inline constexpr std::uint32_t kTypeReply = 1;
inline constexpr std::uint32_t kFlagNoReply = 1u << 4;  ///< command: send no reply on success
inline constexpr std::uint32_t kFlagError = 1u << 5;    ///< reply: error field and text are set

// ---- VERSION (spec §5.1) -------------------------------------------------------------------
namespace version {
inline constexpr std::size_t kMajor = 0;  ///< u16
inline constexpr std::size_t kMinor = 2;  ///< u16
inline constexpr std::size_t kFlags = 4;  ///< u32 kAttach* bits (command); 0 (reply)
inline constexpr std::size_t kPid = 8;    ///< u32 sender's pid (informational; the daemon uses SO_PEERCRED)
inline constexpr std::size_t kCard = 12;  ///< u32 reply: the card index this socket serves
inline constexpr std::size_t kBytes = 16;
static_assert(kCard + 4 == kBytes);
inline constexpr std::uint32_t kAttachReadOnly = 1u << 0;  ///< observe without owning the card
}  // namespace version

// ---- DMA_MAP / DMA_UNMAP (spec §5.2, §5.3) -------------------------------------------------
namespace dma_map {
inline constexpr std::size_t kIova = 0;           ///< u64, 4 KiB aligned
inline constexpr std::size_t kSize = 8;           ///< u64 bytes, 4 KiB multiple, > 0
inline constexpr std::size_t kFdOffset = 16;      ///< u64 offset of the first byte in the attached fd
inline constexpr std::size_t kAccess = 24;        ///< u32: 1 device reads, 2 device writes, 3 both
inline constexpr std::size_t kFlags = 28;         ///< u32 kFlag* bits (protocol 1.2; was reserved, 0)
inline constexpr std::size_t kReserved = kFlags;  ///< protocol 1.1 name of kFlags
inline constexpr std::size_t kBytes = 32;
static_assert(kFlags + 4 == kBytes);
/// The memfd cannot be sealed against shrinking (made without MFD_ALLOW_SEALING): map it
/// anyway, guarded against SIGBUS (spec §5.2 "Unsealed memory"). Without this bit such a
/// memfd is refused.
inline constexpr std::uint32_t kFlagUnsealed = 1u << 0;
/// Protocol 1.3: no fd; map the client's own virtual addresses [fd_offset, fd_offset + size)
/// (kFdOffset carries the address) at iova. The daemon reaches them with process_vm_readv /
/// process_vm_writev on the client's pid (SO_PEERCRED), so the memory is neither shared nor
/// pinned: every access sees what the client has mapped there at that moment, and an address
/// the client has not mapped is an IOMMU fault (spec §5.2 "Process memory").
inline constexpr std::uint32_t kFlagProcessMemory = 1u << 1;
inline constexpr std::uint32_t kFlagsKnown = kFlagUnsealed | kFlagProcessMemory;
}  // namespace dma_map
namespace dma_unmap {
inline constexpr std::size_t kIova = 0;  ///< u64
inline constexpr std::size_t kSize = 8;  ///< u64
inline constexpr std::size_t kBytes = 16;
static_assert(kSize + 8 == kBytes);
}  // namespace dma_unmap

// ---- DEVICE_GET_INFO reply (spec §5.4) -----------------------------------------------------
namespace info {
inline constexpr std::size_t kDomain = 0;        ///< u16
inline constexpr std::size_t kBus = 2;           ///< u8
inline constexpr std::size_t kDevice = 3;        ///< u8
inline constexpr std::size_t kFunction = 4;      ///< u8
inline constexpr std::size_t kPad = 5;           ///< u8[3], 0
inline constexpr std::size_t kVendorId = 8;      ///< u16
inline constexpr std::size_t kDeviceId = 10;     ///< u16
inline constexpr std::size_t kSubVendorId = 12;  ///< u16
inline constexpr std::size_t kSubsystemId = 14;  ///< u16
inline constexpr std::size_t kClassCode = 16;    ///< u32 (24 bits)
inline constexpr std::size_t kNumaNode = 20;     ///< i32, -1 unknown
inline constexpr std::size_t kNumRegions = 24;   ///< u32 (8: BAR0..5, -, config)
inline constexpr std::size_t kMsixVectors = 28;  ///< u32
inline constexpr std::size_t kIovaFirst = 32;    ///< u64
inline constexpr std::size_t kIovaLast = 40;     ///< u64 (inclusive)
inline constexpr std::size_t kCardIndex = 48;    ///< u32
inline constexpr std::size_t kOwnerPid = 52;     ///< u32 pid of the card's owner, 0 none
inline constexpr std::size_t kBytes = 56;
static_assert(kOwnerPid + 4 == kBytes);
}  // namespace info

// ---- DEVICE_GET_REGION_INFO (spec §5.5) ----------------------------------------------------
namespace region_info {
inline constexpr std::size_t kIndex = 0;        ///< u32 region (command and reply)
inline constexpr std::size_t kFlags = 4;        ///< u32 kRegion* bits (reply)
inline constexpr std::size_t kSize = 8;         ///< u64 bytes (reply); 0 = not implemented
inline constexpr std::size_t kMmapOffset = 16;  ///< u64 offset in the attached fd (reply, mmap only)
inline constexpr std::size_t kMmapSize = 24;    ///< u64 bytes backed by the fd (reply, mmap only)
inline constexpr std::size_t kBytes = 32;
inline constexpr std::size_t kCommandBytes = 8;  ///< index + u32 reserved
static_assert(kMmapSize + 8 == kBytes);
inline constexpr std::uint32_t kRead = 1u << 0;
inline constexpr std::uint32_t kWrite = 1u << 1;
inline constexpr std::uint32_t kMmap = 1u << 2;  ///< an fd is attached to the reply
inline constexpr std::uint32_t kPrefetchable = 1u << 3;
inline constexpr std::uint32_t k64Bit = 1u << 4;
}  // namespace region_info

// ---- REGION_READ / REGION_WRITE (spec §5.6) ------------------------------------------------
namespace access {
inline constexpr std::size_t kOffset = 0;  ///< u64 bytes into the region
inline constexpr std::size_t kRegion = 8;  ///< u32 region index
inline constexpr std::size_t kCount = 12;  ///< u32 bytes; BARs: 4 or 8, config: 1..4096
inline constexpr std::size_t kBytes = 16;  ///< then `count` data bytes (write command, read reply)
static_assert(kCount + 4 == kBytes);
}  // namespace access

// ---- SET_IRQS (spec §5.7) ------------------------------------------------------------------
namespace irqs {
inline constexpr std::size_t kIndex = 0;      ///< u32: kIrqMsix or kIrqMsi
inline constexpr std::size_t kStart = 4;      ///< u32 first vector
inline constexpr std::size_t kCount = 8;      ///< u32 vectors, 1..64
inline constexpr std::size_t kReserved = 12;  ///< u32, 0
inline constexpr std::size_t kFdMask = 16;    ///< u64: bit i set = vector start+i gets the next attached fd
inline constexpr std::size_t kBytes = 24;
static_assert(kFdMask + 8 == kBytes);
inline constexpr std::uint32_t kIrqMsix = 0;
inline constexpr std::uint32_t kIrqMsi = 1;
}  // namespace irqs

// ---- DOORBELL_SHADOW (spec §5.11) ---------------------------------------------------------
/// Command body: kBytes (both fields 0), one eventfd attached. Reply body: kBytes (kSlots, the
/// queues the page covers; kStride), the shadow page attached (a sealed memfd of kPageBytes).
/// Queue q's doorbells are the u32s at q * kStride + kSqTail and q * kStride + kCqHead; each
/// holds the value the client last wrote to that register (registers.md §5: both mod 2^32).
namespace shadow {
inline constexpr std::size_t kFlags = 0;        ///< command: u32, 0
inline constexpr std::size_t kReserved = 4;     ///< command: u32, 0
inline constexpr std::size_t kReplyQueues = 0;  ///< reply: u32 queues the page covers
inline constexpr std::size_t kReplyStride = 4;  ///< reply: u32 bytes per queue (kStride)
inline constexpr std::size_t kBytes = 8;
static_assert(kReserved + 4 == kBytes && kReplyStride + 4 == kBytes);
inline constexpr std::size_t kPageBytes = 4096;  ///< size of the shadow page
inline constexpr std::size_t kStride = 64;       ///< bytes per queue: one cache line
inline constexpr std::size_t kSqTail = 0;        ///< u32 SQ_TAIL of the queue
inline constexpr std::size_t kCqHead = 4;        ///< u32 CQ_HEAD of the queue
/// u32 written by the daemon: the posted writes (NO_REPLY messages) of this connection it has
/// handled, mod 2^32. In the page's last cache line, which no queue uses.
inline constexpr std::size_t kHandled = kPageBytes - kStride;
inline constexpr std::size_t kMaxQueues = kHandled / kStride;
static_assert(kCqHead + 4 <= kStride && kMaxQueues == 63);
/// slot_of's answer for a register that is no shadowed doorbell.
inline constexpr std::size_t kNoSlot = ~std::size_t{0};
/// The page offset of the slot that shadows 32-bit BAR0 register `bar0_offset` on a connection
/// whose page covers `queues` queues: SQ_TAIL and CQ_HEAD of queue q < queues (registers.md §5);
/// kNoSlot for any other register. Both ends decode offsets with it.
[[nodiscard]] constexpr std::size_t slot_of(std::uint64_t bar0_offset, std::uint32_t queues) noexcept {
  if (bar0_offset < regs::kQueueBase) return kNoSlot;
  const std::uint64_t q = (bar0_offset - regs::kQueueBase) / regs::kQueueStride;
  const std::uint64_t r = (bar0_offset - regs::kQueueBase) % regs::kQueueStride;
  if (q >= queues) return kNoSlot;
  if (r == regs::queue::kSqTail) return static_cast<std::size_t>(q) * kStride + kSqTail;
  if (r == regs::queue::kCqHead) return static_cast<std::size_t>(q) * kStride + kCqHead;
  return kNoSlot;
}
static_assert(slot_of(regs::queue_reg(1, regs::queue::kCqHead), 32) == kStride + kCqHead);
static_assert(slot_of(regs::queue_reg(1, regs::queue::kCtrl), 32) == kNoSlot);
static_assert(slot_of(regs::queue_reg(32, regs::queue::kSqTail), 32) == kNoSlot);
}  // namespace shadow

// ---- ENGINE_SHARE, HBM_FD, ENGINE_EVENT (spec §5.12) --------------------------------------
namespace engine {
// ENGINE_SHARE command body: kShareBytes, both u32 0. Reply body: kShareReplyBytes, the shared
// engine state attached (a memfd of kReplyStateBytes bytes, sealed F_SEAL_FUTURE_WRITE: it maps
// read-only). ENGINE_FD's command body is the same (both u32 0); its reply body is
// kEngineReplyBytes with the card's engine pages attached (a memfd that maps read-write).
inline constexpr std::size_t kFlags = 0;     ///< command: u32, 0
inline constexpr std::size_t kReserved = 4;  ///< command: u32, 0
inline constexpr std::size_t kShareBytes = 8;
static_assert(kReserved + 4 == kShareBytes);
inline constexpr std::size_t kReplyCards = 0;        ///< reply: u32 cards of the supernode
inline constexpr std::size_t kReplyCard = 4;         ///< reply: u32 this socket's card index
inline constexpr std::size_t kReplyLayout = 8;       ///< reply: u32 layout version of the state
inline constexpr std::size_t kReplyLockTag = 12;     ///< reply: u32 tag the owner's engines lock queues with
inline constexpr std::size_t kReplyStateBytes = 16;  ///< reply: u64 bytes of the state memfd
inline constexpr std::size_t kShareReplyBytes = 24;
static_assert(kReplyStateBytes + 8 == kShareReplyBytes);
inline constexpr std::size_t kEngineReplyOffset = 0;  ///< reply: u64 offset of the pages in the state memfd
inline constexpr std::size_t kEngineReplySize = 8;    ///< reply: u64 bytes of the pages (and of the fd)
inline constexpr std::size_t kEngineReplyBytes = 16;
static_assert(kEngineReplySize + 8 == kEngineReplyBytes);
// HBM_FD command body: kHbmBytes. Reply body: kHbmReplyBytes, the card's HBM memfd attached.
inline constexpr std::size_t kHbmCard = 0;      ///< command: u32 card index
inline constexpr std::size_t kHbmReserved = 4;  ///< command: u32, 0
inline constexpr std::size_t kHbmBytes = 8;
static_assert(kHbmReserved + 4 == kHbmBytes);
inline constexpr std::size_t kHbmReplySize = 0;      ///< reply: u64 bytes of the card's HBM
inline constexpr std::size_t kHbmReplyFdOffset = 8;  ///< reply: u64 offset of its first byte in the fd
inline constexpr std::size_t kHbmReplyBytes = 16;
static_assert(kHbmReplyFdOffset + 8 == kHbmReplyBytes);
// ENGINE_EVENT body (posted, NO_REPLY): kEventBytes.
inline constexpr std::size_t kEventKind = 0;    ///< u32 kEvent*
inline constexpr std::size_t kEventQueue = 4;   ///< u32 queue 0..31 (kEventIommuFault, kEventHalted)
inline constexpr std::size_t kEventValue = 8;   ///< u64: IOVA, error bits or MSI-X vector
inline constexpr std::size_t kEventFlags = 16;  ///< u64: kEventIommuFault: bit 0 write, bit 1 permission
inline constexpr std::size_t kEventBytes = 24;
static_assert(kEventFlags + 8 == kEventBytes);
inline constexpr std::uint32_t kEventIommuFault = 1;  ///< record a fault at IOVA `value` (registers.md §3.4)
inline constexpr std::uint32_t kEventError = 2;       ///< set GLOBAL.ERR_STATUS bits `value`
inline constexpr std::uint32_t kEventMsix = 3;        ///< raise MSI-X vector `value`
inline constexpr std::uint32_t kEventHalted = 4;      ///< queue halted on a descriptor fetch fault at `value`
inline constexpr std::uint32_t kEventMaxKind = 4;
inline constexpr std::uint64_t kEventWrite = 1u << 0;
inline constexpr std::uint64_t kEventPerm = 1u << 1;
// WINDOW_FD command body: kWindowBytes. Reply body: kWindowReplyBytes, the window's memfd
// attached (opened read-only when the window grants no remote writes).
inline constexpr std::size_t kWindowCard = 0;        ///< command: u32 card index of the window's owner
inline constexpr std::size_t kWindowIndex = 4;       ///< command: u16 window table entry
inline constexpr std::size_t kWindowGeneration = 6;  ///< command: u16 generation the importer holds
inline constexpr std::size_t kWindowKey = 8;         ///< command: u64 the window's key
inline constexpr std::size_t kWindowBytes = 16;
static_assert(kWindowKey + 8 == kWindowBytes);
inline constexpr std::size_t kWindowReplyOffset = 0;  ///< reply: u64 HBM offset of the window's first byte
inline constexpr std::size_t kWindowReplySize = 8;    ///< reply: u64 bytes of the window (and of the fd)
inline constexpr std::size_t kWindowReplyFlags = 16;  ///< reply: u32 kWindowWritable
inline constexpr std::size_t kWindowReplyReserved = 20;
inline constexpr std::size_t kWindowReplyBytes = 24;
static_assert(kWindowReplyReserved + 4 == kWindowReplyBytes);
inline constexpr std::uint32_t kWindowWritable = 1u << 0;  ///< the fd maps read-write
// HBM_RANGE_FD command body: kRangeBytes. Reply body: kRangeReplyBytes, the memfd attached.
inline constexpr std::size_t kRangeOffset = 0;  ///< command: u64 HBM offset, 4 KiB aligned
inline constexpr std::size_t kRangeSize = 8;    ///< command: u64 bytes, 4 KiB multiple, > 0
inline constexpr std::size_t kRangeBytes = 16;
static_assert(kRangeSize + 8 == kRangeBytes);
inline constexpr std::size_t kRangeReplyFdOffset = 0;  ///< reply: u64 offset of the range's first byte in the fd
inline constexpr std::size_t kRangeReplyFlags = 8;     ///< reply: u32 kRangeWindow
inline constexpr std::size_t kRangeReplyReserved = 12;
inline constexpr std::size_t kRangeReplyBytes = 16;
static_assert(kRangeReplyReserved + 4 == kRangeReplyBytes);
inline constexpr std::uint32_t kRangeWindow = 1u << 0;  ///< the fd is an open window's memfd
}  // namespace engine

// ---- INJECT_FAULT (spec §5.9) --------------------------------------------------------------
namespace fault {
inline constexpr std::size_t kDelayNs = 0;      ///< u64: fire this long after the daemon receives it
inline constexpr std::size_t kKind = 8;         ///< u32: npo::emu::FaultKind
inline constexpr std::size_t kCard = 12;        ///< u32: must be the card this socket serves
inline constexpr std::size_t kEngine = 16;      ///< u32, kNone: not given
inline constexpr std::size_t kQueue = 20;       ///< u32, kNone: not given
inline constexpr std::size_t kPort = 24;        ///< u32, kNone: not given
inline constexpr std::size_t kLane = 28;        ///< u32, kNone: not given
inline constexpr std::size_t kCount = 32;       ///< u32, >= 1
inline constexpr std::size_t kReserved = 36;    ///< u32, 0
inline constexpr std::size_t kValue = 40;       ///< f64 kind-specific magnitude
inline constexpr std::size_t kDurationNs = 48;  ///< u64 kind-specific duration
inline constexpr std::size_t kBytes = 56;
static_assert(kDurationNs + 8 == kBytes);
inline constexpr std::uint32_t kNone = 0xffffffffu;
inline constexpr std::uint32_t kMaxKind = 10;  ///< highest FaultKind value (training_timeout)
}  // namespace fault

// ---- Little helpers both sides use ---------------------------------------------------------
/// Reads a T at `off` of `b`; the caller has checked off + sizeof(T) <= b.size().
template <class T>
[[nodiscard]] inline T load(std::span<const std::byte> b, std::size_t off) noexcept {
  T v{};
  std::memcpy(&v, b.data() + off, sizeof(T));
  return v;
}
/// Writes a T at `off` of `b`; the caller has checked the bounds.
template <class T>
inline void store(std::span<std::byte> b, std::size_t off, T v) noexcept {
  std::memcpy(b.data() + off, &v, sizeof(T));
}

/// The fixed-size body a command carries (bytes after the header), or -1 if it has a variable
/// size (REGION_WRITE: kBytes + count; MAILBOX_OBSERVE: the request) or the command is unknown.
[[nodiscard]] constexpr long command_body_bytes(std::uint16_t command) noexcept {
  switch (static_cast<Command>(command)) {
    case Command::kVersion: return static_cast<long>(version::kBytes);
    case Command::kDmaMap: return static_cast<long>(dma_map::kBytes);
    case Command::kDmaUnmap: return static_cast<long>(dma_unmap::kBytes);
    case Command::kDeviceGetInfo: return 0;
    case Command::kRegionInfo: return static_cast<long>(region_info::kCommandBytes);
    case Command::kSetIrqs: return static_cast<long>(irqs::kBytes);
    case Command::kRegionRead: return static_cast<long>(access::kBytes);
    case Command::kRegionWrite: return -1;
    case Command::kDeviceReset: return 0;
    case Command::kInjectFault: return static_cast<long>(fault::kBytes);
    case Command::kMailboxObserve: return -1;
    case Command::kDoorbellShadow: return static_cast<long>(shadow::kBytes);
    case Command::kEngineShare: return static_cast<long>(engine::kShareBytes);
    case Command::kHbmFd: return static_cast<long>(engine::kHbmBytes);
    case Command::kEngineEvent: return static_cast<long>(engine::kEventBytes);
    case Command::kWindowFd: return static_cast<long>(engine::kWindowBytes);
    case Command::kHbmRangeFd: return static_cast<long>(engine::kRangeBytes);
    case Command::kEngineFd: return static_cast<long>(engine::kShareBytes);
  }
  return -1;
}

}  // namespace npo::fw::emud
