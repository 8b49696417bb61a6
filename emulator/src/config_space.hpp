// SPDX-License-Identifier: Apache-2.0
// Emulator internals: the PCI configuration space of one card (type 0 header, PCI Express
// v2 endpoint, MSI-X, ACS, ATS, Resizable BAR for BAR2) with its write masks, the FLR
// trigger and the BAR2 size the Resizable BAR capability selects.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>

#include "npo/fw/pci.hpp"

namespace npo::emu {

/// Config space of one card. Thread-safe (one mutex; bus_master() and bar2_size() lock-free).
class ConfigSpace {
 public:
  /// Power-on contents for a card with `hbm_bytes` of HBM (BAR2 at least that large).
  explicit ConfigSpace(std::uint64_t hbm_bytes);

  /// Reads 1, 2 or 4 bytes (naturally aligned) at `off`.
  std::uint32_t read(std::uint32_t off, unsigned size);
  /// Writes 1, 2 or 4 bytes through the write masks. Returns true when the write initiated a
  /// function level reset (DevCtl bit 15): the caller resets the card.
  [[nodiscard]] bool write(std::uint32_t off, unsigned size, std::uint32_t value);
  /// Back to power-on contents (a raw FLR).
  void rebuild();
  /// COMMAND.BME, for the DMA engines.
  [[nodiscard]] bool bus_master() const noexcept { return bus_master_.load(std::memory_order_acquire); }
  /// BAR2 size in bytes (Resizable BAR).
  [[nodiscard]] std::uint64_t bar2_size() const noexcept { return bar2_size_.load(); }

 private:
  void build();

  std::uint64_t hbm_bytes_;
  std::mutex mu_;
  std::array<std::uint8_t, fw::pci::cfg::kConfigSize> space_{};
  std::array<std::uint8_t, fw::pci::cfg::kConfigSize> wmask_{};  // writable bits
  std::atomic<std::uint64_t> bar2_size_{0};
  std::atomic<bool> bus_master_{false};  ///< mirror of COMMAND.BME (lock-free read)
};

}  // namespace npo::emu
