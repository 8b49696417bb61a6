// SPDX-License-Identifier: Apache-2.0
// Emulator internals: the card's firmware flash and its update state machine (docs/spec/
// mailbox.md §5, docs/spec/firmware-image.md). Two slots A/B, each holding an image, its
// versions and a valid flag; the committed slot (booted at power-up), the running (active) slot,
// the card's anti-rollback security version and the public key the card trusts (fused on a real
// card; the development key of tests/data/firmware by default). The card verifies a staged
// image itself (digest, signature, target, security version) with libsodium.
//
// Persistent across a power cut: the slots, the committed slot, the security version, the key.
// Lost: the update session (BEGIN..FINISH), a trial that was not committed.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "npo/fw/image.hpp"
#include "npo/fw/mailbox.hpp"

namespace npo::emu {

/// The development public key (tests/data/firmware/dev-key.pub): DEVELOPMENT ONLY. Its secret
/// half is committed to the repository, so anyone can sign an image this key accepts.
extern const std::array<std::byte, 32> kDevelopmentFirmwareKey;

/// The board model a card's images must name (QUERY kBoardModel).
inline constexpr std::string_view kBoardModel = "NPO-REF-1";

/// The flash of one card. Thread-safe (one mutex).
class FirmwareFlash {
 public:
  /// One slot as the tests see it.
  struct Slot {
    std::vector<std::byte> bytes;  ///< the image (header + payload) or, for the factory slot, its stand-in
    std::uint32_t version = 0;     ///< major<<16 | minor<<8 | patch
    std::uint32_t security_version = 0;
    bool valid = false;
  };
  /// A copy of the whole flash and session state (tests compare before and after).
  struct Snapshot {
    std::array<Slot, fw::mbox::fwu::kNumSlots> slots;
    unsigned committed = 0;
    unsigned active = 0;
    std::uint32_t security_version = 0;
    fw::mbox::fwu::State state = fw::mbox::fwu::State::kIdle;
    bool ready = false;
    bool rolled_back = false;
  };

  /// Factory state: slot A holds `factory_version` ("X.Y.Z") with security version 1, valid
  /// and committed; slot B is empty. The card's security version is 1.
  explicit FirmwareFlash(const std::string& factory_version);

  /// Handles a firmware-update command (mailbox.md §5); `rsp` receives the payload. Returns
  /// the reply status; for a failed command nothing changed but what §5 says (a failed FINISH
  /// leaves the slot invalid and the card idle).
  fw::mbox::Status handle(fw::mbox::Command cmd, std::span<const std::byte> req, std::vector<std::byte>& rsp);
  /// The card (re)boots (any reset, a power-up): the committed slot runs; an update session is
  /// dropped; a trial not committed ends as a rollback (mailbox.md §5.1).
  void boot();
  /// A power cut and power-up: boot() with nothing volatile surviving.
  void power_cycle() { boot(); }
  /// The firmware version running now (GET_VERSIONS).
  [[nodiscard]] std::uint32_t running_version() const;
  [[nodiscard]] Snapshot snapshot() const;
  /// Replaces the trusted key (a card fused with another vendor key). Tests only.
  void set_trusted_key(const std::array<std::byte, 32>& key);

 private:
  fw::mbox::Status finish_locked(std::vector<std::byte>& rsp);
  void activate_locked();
  mutable std::mutex mu_;
  std::array<Slot, fw::mbox::fwu::kNumSlots> slots_;
  unsigned committed_ = 0;
  unsigned active_ = 0;
  std::uint32_t security_version_ = 1;
  std::array<std::byte, 32> key_;
  // Volatile.
  fw::mbox::fwu::State state_ = fw::mbox::fwu::State::kIdle;
  unsigned target_ = 1;
  std::uint64_t total_ = 0;
  bool ready_ = true;
  bool rolled_back_ = false;
};

}  // namespace npo::emu
