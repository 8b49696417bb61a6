// SPDX-License-Identifier: Apache-2.0
// Emulator internals: the firmware of a port's CMIS module and its CDB instance
// (docs/spec/cdb.md): two image banks in flash (survive power cuts), the running image and
// the download in progress (RAM: lost at every power-up), page 9Fh. Owned by its Port,
// guarded by the port mutex; the logic is in port_cdb.cpp.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "npo/fw/cdb.hpp"

namespace npo::emu {

/// One firmware image bank of the module's flash.
struct FirmwareBank {
  bool valid = false;  ///< a complete image whose CRC matched at Complete
  std::uint8_t major = 0;
  std::uint8_t minor = 0;
  std::uint16_t build = 0;
};

/// The module's firmware and CDB state.
struct ModuleFirmware {
  // Flash (kept across power cuts, resets and re-insertion).
  std::array<FirmwareBank, 2> bank{FirmwareBank{true, 1, 0, 100}, FirmwareBank{true, 0, 9, 90}};
  unsigned committed = 0;  ///< image the module boots (0 = A, 1 = B)
  // RAM (power-up defaults: see Port::cdb_power_on).
  unsigned running = 0;
  bool downloading = false;   ///< between a successful Start and Complete
  std::uint32_t dl_size = 0;  ///< image size Start announced
  std::array<std::uint8_t, fw::cdb::emu_header::kSize> dl_header{};
  std::vector<std::uint8_t> dl_image;    ///< bytes written so far (the inactive bank)
  std::vector<std::uint8_t> dl_written;  ///< per byte: written
  std::uint32_t dl_written_bytes = 0;
  std::array<std::uint8_t, 128> page{};  ///< page 9Fh bytes 128..255
  using EplPages = std::array<std::array<std::uint8_t, 128>, fw::cdb::kEplLastPage - fw::cdb::kEplFirstPage + 1>;
  std::shared_ptr<EplPages> epl;  ///< pages A0h..AFh, allocated at their first access
  std::uint64_t epoch = 0;        ///< bumps at power-up: a pending command's timers drop
  // Test hooks (white box, tests/cdb): a stuck-busy firmware, a power cut at the n-th CDB event.
  bool stuck = false;                   ///< commands stay "busy executing" until a power-up
  std::uint64_t events = 0;             ///< CDB events (command captured, command finished) so far
  std::optional<std::uint64_t> cut_at;  ///< power cut right after event number cut_at (1-based)
};

}  // namespace npo::emu
