// SPDX-License-Identifier: Apache-2.0
// npo-hal firmware interface: DMA descriptor (64 B) and completion (16 B) formats.
// Spec: docs/spec/dma.md. Both live in host memory rings addressed by IOVA
// (QUEUE.SQ_BASE / QUEUE.CQ_BASE, regs.hpp).
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "npo/fw/bits.hpp"

namespace npo::fw::dma {

/// Descriptor opcodes (dma.md §2). CAP1.OP_MASK bit n advertises opcode n.
enum class Opcode : std::uint8_t {
  kNop = 0,
  kCopy = 1,         ///< length bytes from src to dst
  kFill = 2,         ///< dst[0..length) = repeated 8-byte pattern in `src`
  kGather = 3,       ///< scatter-gather: src = IOVA of `sg_count` SgEntry, dst contiguous
  kFence = 4,        ///< completes when every earlier op of the queue has completed
  kRemoteWrite = 5,  ///< local src -> remote window (remote_card, window, generation, key) at dst offset
  kRemoteRead = 6,   ///< remote window at src offset -> local dst
};
inline constexpr unsigned kNumOpcodes = 7;

/// Descriptor flags (dma.md §2.2).
namespace flags {
inline constexpr std::uint8_t kInterrupt = 1u << 0;  ///< raise the queue's MSI-X vector on completion
inline constexpr std::uint8_t kFence = 1u << 1;      ///< start only after earlier ops completed; skipped if one failed
inline constexpr std::uint8_t kSrcHbm = 1u << 2;     ///< src is an HBM offset, not a host IOVA
inline constexpr std::uint8_t kDstHbm = 1u << 3;     ///< dst is an HBM offset, not a host IOVA
inline constexpr std::uint8_t kValidMask = 0x0f;     ///< other bits must be 0 (else kBadDescriptor)
}  // namespace flags

/// Descriptor layout: byte offsets of each field (dma.md §2.1).
namespace desc {
inline constexpr std::size_t kSize = 64;
inline constexpr std::size_t kOpcode = 0x00;      // u8
inline constexpr std::size_t kFlags = 0x01;       // u8
inline constexpr std::size_t kSgCount = 0x02;     // u16 entries in the SG list (kGather)
inline constexpr std::size_t kLength = 0x04;      // u32 bytes (1 .. MAX_XFER)
inline constexpr std::size_t kSrc = 0x08;         // u64 IOVA / HBM offset / fill pattern / remote offset
inline constexpr std::size_t kDst = 0x10;         // u64 IOVA / HBM offset / remote offset
inline constexpr std::size_t kRemoteCard = 0x18;  // u32 fabric ID of the card owning the window
inline constexpr std::size_t kWindow = 0x1c;      // u16 window ID on that card
inline constexpr std::size_t kGeneration = 0x1e;  // u16 window generation the requester holds
inline constexpr std::size_t kKey = 0x20;         // u64 window access key
inline constexpr std::size_t kUser = 0x28;        // u64 free for software, not read by the card
// 0x30..0x3f reserved, must be zero
}  // namespace desc

/// One scatter-gather list entry (dma.md §2.4), 16 bytes, in host memory.
namespace sg {
inline constexpr std::size_t kSize = 16;
inline constexpr std::size_t kAddr = 0x00;    // u64 IOVA
inline constexpr std::size_t kLength = 0x08;  // u32 bytes
// 0x0c u32 reserved
inline constexpr unsigned kMaxEntries = 256;
}  // namespace sg

/// A 64-byte descriptor as the host writes it into the submission ring.
/// Trivially copyable; build it with the setters, never by casting to a bitfield struct.
struct Descriptor {
  alignas(64) std::array<std::byte, desc::kSize> raw{};

  [[nodiscard]] Opcode opcode() const noexcept {
    return static_cast<Opcode>(load_le<std::uint8_t>(raw.data(), desc::kOpcode));
  }
  [[nodiscard]] std::uint8_t op_flags() const noexcept { return load_le<std::uint8_t>(raw.data(), desc::kFlags); }
  [[nodiscard]] std::uint16_t sg_count() const noexcept { return load_le<std::uint16_t>(raw.data(), desc::kSgCount); }
  [[nodiscard]] std::uint32_t length() const noexcept { return load_le<std::uint32_t>(raw.data(), desc::kLength); }
  [[nodiscard]] std::uint64_t src() const noexcept { return load_le<std::uint64_t>(raw.data(), desc::kSrc); }
  [[nodiscard]] std::uint64_t dst() const noexcept { return load_le<std::uint64_t>(raw.data(), desc::kDst); }
  [[nodiscard]] std::uint32_t remote_card() const noexcept {
    return load_le<std::uint32_t>(raw.data(), desc::kRemoteCard);
  }
  [[nodiscard]] std::uint16_t window() const noexcept { return load_le<std::uint16_t>(raw.data(), desc::kWindow); }
  [[nodiscard]] std::uint16_t generation() const noexcept {
    return load_le<std::uint16_t>(raw.data(), desc::kGeneration);
  }
  [[nodiscard]] std::uint64_t key() const noexcept { return load_le<std::uint64_t>(raw.data(), desc::kKey); }
  [[nodiscard]] std::uint64_t user() const noexcept { return load_le<std::uint64_t>(raw.data(), desc::kUser); }
  /// True when the reserved bytes 0x30..0x3f are all zero.
  [[nodiscard]] bool reserved_zero() const noexcept {
    return load_le<std::uint64_t>(raw.data(), 0x30) == 0 && load_le<std::uint64_t>(raw.data(), 0x38) == 0;
  }

  void set_opcode(Opcode v) noexcept {
    store_le<std::uint8_t>(raw.data(), desc::kOpcode, static_cast<std::uint8_t>(v));
  }
  void set_flags(std::uint8_t v) noexcept { store_le<std::uint8_t>(raw.data(), desc::kFlags, v); }
  void set_sg_count(std::uint16_t v) noexcept { store_le(raw.data(), desc::kSgCount, v); }
  void set_length(std::uint32_t v) noexcept { store_le(raw.data(), desc::kLength, v); }
  void set_src(std::uint64_t v) noexcept { store_le(raw.data(), desc::kSrc, v); }
  void set_dst(std::uint64_t v) noexcept { store_le(raw.data(), desc::kDst, v); }
  void set_remote_card(std::uint32_t v) noexcept { store_le(raw.data(), desc::kRemoteCard, v); }
  void set_window(std::uint16_t v) noexcept { store_le(raw.data(), desc::kWindow, v); }
  void set_generation(std::uint16_t v) noexcept { store_le(raw.data(), desc::kGeneration, v); }
  void set_key(std::uint64_t v) noexcept { store_le(raw.data(), desc::kKey, v); }
  void set_user(std::uint64_t v) noexcept { store_le(raw.data(), desc::kUser, v); }
};
static_assert(sizeof(Descriptor) == desc::kSize);
static_assert(alignof(Descriptor) == 64);
static_assert(desc::kUser + 8 <= 0x30);

/// Per-op completion status (dma.md §3.2). 0 is success; the card writes the
/// values below 0x80; values from 0x80 are reserved for software (the driver
/// synthesises kTimeout and kAborted when it resets a hung queue).
enum class Status : std::uint8_t {
  kOk = 0x00,
  kBadOpcode = 0x01,          ///< unknown opcode or one CAP1.OP_MASK does not advertise
  kBadDescriptor = 0x02,      ///< reserved bits/flags set, or length 0 / > MAX_XFER
  kIommuFault = 0x03,         ///< host access to an unmapped IOVA; info = faulting IOVA
  kIommuPermission = 0x04,    ///< host write to a read-only mapping (or read of write-only); info = IOVA
  kHbmRange = 0x05,           ///< HBM offset + length beyond HBM; info = offset
  kSgError = 0x06,            ///< SG list unreadable, too long, or lengths do not sum to `length`
  kFenceSkipped = 0x07,       ///< fence flag set and an earlier op of the queue failed: not executed
  kRemoteUnreachable = 0x08,  ///< no trained link leads to remote_card; info = remote_card
  kWindowInvalid = 0x09,      ///< window ID out of range or entry not valid
  kWindowKey = 0x0a,          ///< key mismatch
  kWindowRange = 0x0b,        ///< offset + length beyond the window
  kWindowRights = 0x0c,       ///< window lacks read (remote read) or write (remote write) right
  kWindowRevoked = 0x0d,      ///< generation mismatch, or revoked while the op was in flight
  kEngineError = 0x0e,        ///< internal engine error (injected faults)
  kPartitionDenied = 0x0f,    ///< target card is in another partition (registers.md §3.8); info = remote_card
  kTimeout = 0x80,            ///< software: the op did not complete before the watchdog fired
  kAborted = 0x81,            ///< software: the queue was reset with the op in flight
};

/// Human-readable name of a status (stable, used in logs and JSON).
[[nodiscard]] constexpr std::string_view status_name(Status s) noexcept {
  switch (s) {
    case Status::kOk: return "ok";
    case Status::kBadOpcode: return "bad_opcode";
    case Status::kBadDescriptor: return "bad_descriptor";
    case Status::kIommuFault: return "iommu_fault";
    case Status::kIommuPermission: return "iommu_permission";
    case Status::kHbmRange: return "hbm_range";
    case Status::kSgError: return "sg_error";
    case Status::kFenceSkipped: return "fence_skipped";
    case Status::kRemoteUnreachable: return "remote_unreachable";
    case Status::kWindowInvalid: return "window_invalid";
    case Status::kWindowKey: return "window_key";
    case Status::kWindowRange: return "window_range";
    case Status::kWindowRights: return "window_rights";
    case Status::kWindowRevoked: return "window_revoked";
    case Status::kEngineError: return "engine_error";
    case Status::kPartitionDenied: return "partition_denied";
    case Status::kTimeout: return "timeout";
    case Status::kAborted: return "aborted";
  }
  return "unknown";
}

/// Completion layout (dma.md §3.1), 16 bytes.
namespace cpl {
inline constexpr std::size_t kSize = 16;
inline constexpr std::size_t kInfo = 0x00;     // u64 bytes moved on success; fault address/ID on error
inline constexpr std::size_t kSqIndex = 0x08;  // u32 index (mod 2^32) of the descriptor this completes
inline constexpr std::size_t kStatus = 0x0c;   // u8 Status
inline constexpr std::size_t kFlags = 0x0e;    // u16 bit0 = phase
inline constexpr std::uint16_t kPhase = 1u << 0;
}  // namespace cpl

/// A 16-byte completion as the card writes it into the completion ring.
/// The card writes the first 14 bytes, then the flags word last (phase bit),
/// so a host that sees the expected phase sees the whole entry (dma.md §3.3).
struct Completion {
  alignas(16) std::array<std::byte, cpl::kSize> raw{};

  [[nodiscard]] std::uint64_t info() const noexcept { return load_le<std::uint64_t>(raw.data(), cpl::kInfo); }
  [[nodiscard]] std::uint32_t sq_index() const noexcept { return load_le<std::uint32_t>(raw.data(), cpl::kSqIndex); }
  [[nodiscard]] Status status() const noexcept {
    return static_cast<Status>(load_le<std::uint8_t>(raw.data(), cpl::kStatus));
  }
  [[nodiscard]] bool phase() const noexcept {
    return (load_le<std::uint16_t>(raw.data(), cpl::kFlags) & cpl::kPhase) != 0;
  }
  void set_info(std::uint64_t v) noexcept { store_le(raw.data(), cpl::kInfo, v); }
  void set_sq_index(std::uint32_t v) noexcept { store_le(raw.data(), cpl::kSqIndex, v); }
  void set_status(Status v) noexcept { store_le<std::uint8_t>(raw.data(), cpl::kStatus, static_cast<std::uint8_t>(v)); }
  void set_phase(bool p) noexcept { store_le<std::uint16_t>(raw.data(), cpl::kFlags, p ? cpl::kPhase : 0); }
};
static_assert(sizeof(Completion) == cpl::kSize);

}  // namespace npo::fw::dma
