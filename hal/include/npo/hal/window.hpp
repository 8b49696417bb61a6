// SPDX-License-Identifier: Apache-2.0
// npo-hal public API: peer-to-peer memory windows (docs/spec/registers.md §6).
//
// A window is a slice of a card's HBM with rights (read, write) and a 64-bit key, entered in
// the card's window translation table. Exporting gives a WindowHandle that serialises to 40
// bytes; any card in the fabric can then target the window with remote DMA ops
// (DmaQueue::enqueue_remote_write/read). The owning card checks every access -- key, range,
// rights and generation -- so a wrong key or a revoked window moves no bytes.
// Locally the window can be CPU-mapped through the BAR2 aperture, and shared with another
// process by passing the handle together with a file descriptor (SCM_RIGHTS).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "npo/hal/error.hpp"

namespace npo {

class Device;
class System;

/// Rights a window grants to remote requesters.
struct WindowRights {
  bool read = true;
  bool write = true;
};

/// What an exporter hands to an importer.
struct WindowHandle {
  std::uint32_t fabric_id = 0;   ///< card owning the memory (BAR0 FABRIC_ID)
  std::uint16_t window_id = 0;   ///< translation table entry, 0..1023
  std::uint16_t generation = 0;  ///< must match the entry's; bumps on every revoke
  std::uint64_t offset = 0;      ///< HBM offset of the window's first byte on the owner
  std::uint64_t size = 0;        ///< bytes
  std::uint64_t key = 0;         ///< access key (random, from getrandom(2))
  WindowRights rights;

  static constexpr std::size_t kSerializedSize = 40;
  /// Layout (little-endian): u16 magic 0x4e57 ("WN"), u8 version 1, u8 rights (bit0 read,
  /// bit1 write), u32 fabric_id, u16 window_id, u16 generation, u64 offset, u64 size,
  /// u64 key, u32 CRC32C of the preceding 36 bytes.
  [[nodiscard]] std::array<std::byte, kSerializedSize> serialize() const;
  /// Errors: kInvalidArgument (wrong size, magic or version), kDataLoss (CRC mismatch).
  static Result<WindowHandle> deserialize(std::span<const std::byte> bytes);
};

/// An exported window. Destroying it revokes it and frees its table slot.
/// Thread-safety: revoke() may run while DMA targets the window; handle() is immutable.
class Window {
 public:
  virtual ~Window() = default;
  [[nodiscard]] virtual const WindowHandle& handle() const noexcept = 0;
  /// Invalidates the window on the card (new generation, entry not valid) and waits until no
  /// remote op is inside it any more (WINDOW.STATUS.INFLIGHT = 0). After return no byte of
  /// the window changes through DMA; ops that were in flight complete with kWindowRevoked,
  /// later ones too. Idempotent. Errors: kDeadlineExceeded (in-flight ops did not drain in
  /// 1 s), kUnavailable (card removed).
  virtual Result<void> revoke() = 0;
  [[nodiscard]] virtual bool revoked() const noexcept = 0;
};

/// Exports [offset, offset+size) of `device`'s HBM with `rights`.
/// offset and size must be multiples of 4 KiB, size > 0, within HBM.
/// Errors: kInvalidArgument (alignment, zero size); kOutOfRange (past HBM);
/// kResourceExhausted ("window translation table full (1024 slots)"); kUnavailable.
/// Thread-safety: safe from any thread.
Result<std::unique_ptr<Window>> export_window(Device& device, std::uint64_t offset, std::uint64_t size,
                                              WindowRights rights = {});

/// Checks a received handle against `system`: its owner card must be in the system, or on the
/// fabric -- one of the system's cards holds a valid route to the owner's fabric ID (the owner
/// is then driven by another process, as with emu-remote:DIR?card=K; routes are programmed by
/// bring_up_fabric or by npo-emud). Errors: deserialize's errors; kNotFound (no card with that
/// fabric ID, and no route to it).
Result<WindowHandle> import_window(System& system, std::span<const std::byte> serialized);

/// CPU view of a window through the owner card's BAR2 aperture (write-combined on real
/// hardware), like gdrcopy. Owns the mapping when it came from receive_window().
class WindowMapping {
 public:
  virtual ~WindowMapping() = default;
  [[nodiscard]] virtual std::span<std::byte> bytes() noexcept = 0;
  [[nodiscard]] virtual const WindowHandle& handle() const noexcept = 0;
  /// Copies `src` into the window at `offset`. Errors: kOutOfRange.
  Result<void> write(std::uint64_t offset, std::span<const std::byte> src);
  /// Copies window bytes at `offset` into `dst`. Errors: kOutOfRange.
  Result<void> read(std::uint64_t offset, std::span<std::byte> dst);
};

/// Maps a window of `device` (its owner) for CPU access. Consumes aperture budget.
/// Errors: kInvalidArgument (window of another card), kFailedPrecondition (revoked),
/// kResourceExhausted ("BAR aperture budget"), kUnimplemented (BAR2 not mappable),
/// kUnavailable (card removed).
Result<std::unique_ptr<WindowMapping>> map_window(Device& device, const Window& window);

/// Sends `window` over a connected AF_UNIX socket: the 40-byte handle plus the aperture fd
/// (SCM_RIGHTS), so the receiving process can map it. Errors: kUnimplemented (backend cannot
/// share the aperture), system call errors (errno kept).
Result<void> send_window(int socket_fd, Device& device, const Window& window);

/// Receives what send_window sent and maps the window in this process.
/// Errors: kDataLoss (truncated or corrupt message), kInvalidArgument (no fd attached),
/// system call errors.
Result<std::unique_ptr<WindowMapping>> receive_window(int socket_fd);

/// Translation-table and aperture accounting of a card.
struct WindowBudget {
  unsigned slots_total = 0;
  unsigned slots_used = 0;
  std::uint64_t aperture_bytes = 0;  ///< BAR2 size
  std::uint64_t aperture_used = 0;   ///< bytes of live CPU mappings (map_window)
};
[[nodiscard]] WindowBudget window_budget(Device& device);

}  // namespace npo
