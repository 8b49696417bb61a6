// SPDX-License-Identifier: Apache-2.0
// npo-hal public API: Window -- a slice of a card's HBM exposed to peers with rights and a
// key, through the card's window translation table (docs/spec/registers.md §6).
// Status: declared; implemented by the windows issue (kUnimplemented until then).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "npo/hal/error.hpp"

namespace npo {

class Device;

/// Rights a window grants to remote requesters.
struct WindowRights {
  bool read = true;
  bool write = true;
};

/// What an exporter hands to an importer. Serialises to kSerializedSize bytes.
struct WindowHandle {
  std::uint32_t fabric_id = 0;   ///< card owning the memory
  std::uint16_t window_id = 0;   ///< translation table entry
  std::uint16_t generation = 0;  ///< bumps on every revoke
  std::uint64_t offset = 0;      ///< HBM offset of the window's first byte
  std::uint64_t size = 0;        ///< bytes
  std::uint64_t key = 0;         ///< access key
  WindowRights rights;
  static constexpr std::size_t kSerializedSize = 40;
  [[nodiscard]] std::array<std::byte, kSerializedSize> serialize() const;
  /// Errors: kInvalidArgument (wrong size or version), kDataLoss (checksum).
  static Result<WindowHandle> deserialize(std::span<const std::byte> bytes);
};

/// An exported window. Destroying it revokes it. Thread-safety: revoke() may race with DMA;
/// the card completes in-flight ops with kWindowRevoked.
class Window {
 public:
  virtual ~Window() = default;
  [[nodiscard]] virtual const WindowHandle& handle() const noexcept = 0;
  /// Invalidates the window on the card; later accesses fail with kWindowRevoked.
  virtual Result<void> revoke() = 0;
};

/// Exports [offset, offset+size) of `device`'s HBM. Errors: kResourceExhausted (translation
/// slots or BAR aperture, naming it), kOutOfRange, kUnimplemented (not built yet).
Result<std::unique_ptr<Window>> export_window(Device& device, std::uint64_t offset, std::uint64_t size, WindowRights rights);

}  // namespace npo
