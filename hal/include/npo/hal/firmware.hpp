// SPDX-License-Identifier: Apache-2.0
// npo-hal public API: signed card firmware images and the card's A/B firmware update
// (docs/firmware.md; image format docs/spec/firmware-image.md; mailbox commands
// docs/spec/mailbox.md §5).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "npo/hal/error.hpp"

namespace npo {

class Device;

/// An Ed25519 public key (32 bytes).
using FirmwarePublicKey = std::array<std::byte, 32>;
/// An Ed25519 secret key in libsodium's 64-byte form (seed followed by the public key).
using FirmwareSecretKey = std::array<std::byte, 64>;

/// A signing key pair (generate_firmware_key()).
struct FirmwareKeyPair {
  FirmwarePublicKey public_key{};
  FirmwareSecretKey secret_key{};
};

/// A firmware version major.minor.patch; encoded as major<<16 | minor<<8 | patch (minor and
/// patch 0..255), as GET_VERSIONS reports it (mailbox.md §3.2).
struct FirmwareVersion {
  unsigned major = 0;
  unsigned minor = 0;
  unsigned patch = 0;
  [[nodiscard]] std::uint32_t encoded() const noexcept { return (major << 16) | (minor << 8) | patch; }
  [[nodiscard]] static FirmwareVersion decode(std::uint32_t v) noexcept {
    return {v >> 16, (v >> 8) & 0xffu, v & 0xffu};
  }
  /// "X.Y.Z".
  [[nodiscard]] std::string to_string() const;
  /// Parses "X.Y.Z" (X 0..65535, Y and Z 0..255). Errors: kInvalidArgument.
  static Result<FirmwareVersion> parse(std::string_view text);
  friend bool operator==(const FirmwareVersion&, const FirmwareVersion&) = default;
};

/// Payload digest algorithm of an image (firmware-image.md §2).
enum class FirmwareDigest : std::uint8_t { kSha512 = 1, kBlake2b512 = 2 };

/// What to put in an image's header (sign_firmware_image).
struct FirmwareImageSpec {
  std::uint16_t vendor_id = 0x1ee7;  ///< the reference card's default IDs (docs/spec/pci.md; NPO_PCI_VENDOR_ID)
  std::uint16_t device_id = 0x0a01;
  std::string model = "NPO-REF-1";  ///< board model, at most 31 characters; "" targets every model
  FirmwareVersion version;
  std::uint32_t security_version = 1;  ///< anti-rollback counter; a card refuses lower ones
  FirmwareDigest digest = FirmwareDigest::kSha512;
};

/// An image's header as read by inspect_firmware_image.
struct FirmwareImageInfo {
  std::uint16_t vendor_id = 0;
  std::uint16_t device_id = 0;
  std::string model;
  FirmwareVersion version;
  std::uint32_t security_version = 0;
  FirmwareDigest digest = FirmwareDigest::kSha512;
  std::uint64_t payload_bytes = 0;
  std::uint64_t image_bytes = 0;  ///< header + payload
  FirmwarePublicKey signer_key{};
  bool signature_checked = false;  ///< a trusted key was given and the signature verified with it
};

/// Largest image a card accepts, header included: 16 MiB (firmware-image.md §1).
inline constexpr std::size_t kMaxFirmwareImageBytes = std::size_t{16} << 20;

/// A fresh random key pair (libsodium crypto_sign_keypair). Errors: kInternal (libsodium
/// could not initialise). Thread-safe.
Result<FirmwareKeyPair> generate_firmware_key();

/// Builds a signed image: the header of `spec`, the digest of `payload` and an Ed25519
/// signature with `secret` over the header's signed part and the payload
/// (firmware-image.md §3). Errors: kInvalidArgument (empty payload, model longer than 31
/// characters, minor or patch above 255), kOutOfRange (image above kMaxFirmwareImageBytes),
/// kInternal (libsodium). Thread-safe; pure apart from libsodium.
Result<std::vector<std::byte>> sign_firmware_image(std::span<const std::byte> payload, const FirmwareSecretKey& secret,
                                                   const FirmwareImageSpec& spec);

/// Checks an image on its own (firmware-image.md §4 checks 1-9): layout, size, digest and --
/// when `trusted` is given -- signer key and signature. Card-specific checks (target,
/// versions) are update_firmware's. Each refusal names what is wrong: kInvalidArgument
/// (truncated, bad magic, unknown format version, bad header, trailing bytes, empty payload),
/// kOutOfRange (oversized), kDataLoss (payload digest mismatch: corrupt), kPermissionDenied
/// (signed by another key than `trusted`, or the signature does not verify: tampered).
/// Thread-safe.
Result<FirmwareImageInfo> inspect_firmware_image(std::span<const std::byte> image,
                                                 const FirmwarePublicKey* trusted = nullptr);

/// Update state of a card (mailbox.md §5.1).
enum class FirmwareUpdateState : std::uint8_t {
  kIdle = 0,       ///< the committed slot runs; no update in progress
  kReceiving = 1,  ///< an image is being written
  kStaged = 2,     ///< an image was written and verified; activation next
  kTrial = 3,      ///< the new slot runs on trial; commit next (a reset or power cut rolls back)
};
/// "idle", "receiving", "staged", "trial".
[[nodiscard]] std::string_view firmware_state_name(FirmwareUpdateState s) noexcept;

/// One flash slot.
struct FirmwareSlot {
  bool valid = false;  ///< holds a verified image
  FirmwareVersion version;
  std::uint32_t security_version = 0;
  std::uint64_t image_bytes = 0;
};

/// A card's firmware flash (FW_QUERY, mailbox.md §5.2).
struct FirmwareStatus {
  std::array<FirmwareSlot, 2> slots;  ///< [0] slot A, [1] slot B
  unsigned active = 0;                ///< slot running now
  unsigned committed = 0;             ///< slot booted at power-up
  FirmwareUpdateState state = FirmwareUpdateState::kIdle;
  bool ready = false;                  ///< the running image reported ready
  bool rolled_back = false;            ///< the last trial ended by a rollback
  std::uint32_t security_version = 0;  ///< the card's anti-rollback counter
  std::uint32_t max_chunk = 0;         ///< bytes per write
  std::uint32_t max_image = 0;         ///< largest image, bytes
  std::uint16_t vendor_id = 0;
  std::uint16_t device_id = 0;
  std::string model;                ///< board model images must name
  FirmwarePublicKey trusted_key{};  ///< the key the card verifies images with
};

/// Reads the card's flash state (FW_QUERY). Works on a read-only attach. Errors: the
/// mailbox's (kDeadlineExceeded, kDataLoss, kUnavailable, kInternal), kUnimplemented (firmware
/// without update support). Thread-safety: mailbox calls are serialised per card.
Result<FirmwareStatus> firmware_status(Device& device);

/// Stages of update_firmware, in order, for progress reports.
enum class FirmwareUpdateStage : std::uint8_t {
  kChecked,    ///< the image passed every host check; nothing written yet
  kBegun,      ///< the inactive slot was erased (BEGIN)
  kWriting,    ///< one chunk written (done/total bytes)
  kVerified,   ///< the card verified the image (FINISH)
  kActivated,  ///< the card restarted into the new slot on trial (ACTIVATE)
  kReady,      ///< the new image reported ready
  kCommitted,  ///< the new slot is permanent (COMMIT)
};
/// "checked", "begun", "writing", "verified", "activated", "ready", "committed".
[[nodiscard]] std::string_view firmware_stage_name(FirmwareUpdateStage s) noexcept;

/// Called after each stage; `done`/`total` are image bytes written so far / in all.
using FirmwareProgress = std::function<void(FirmwareUpdateStage stage, std::uint64_t done, std::uint64_t total)>;

/// Options of update_firmware.
struct FirmwareUpdateOptions {
  /// Allow a firmware version older than the running one (never a lower security version).
  bool allow_downgrade = false;
  /// Update although DMA queues of this card are open in this process (the activation
  /// restarts the firmware under them).
  bool force = false;
  /// Commit once the new image is ready. False: leave it on trial (commit_firmware or
  /// rollback_firmware later; a reset or power cut rolls back).
  bool commit = true;
  /// How long to wait after activation for the new image to report ready, ns of platform
  /// time (System::clock()). Default 10 s.
  std::uint64_t ready_timeout_ns = 10'000'000'000ULL;
};

/// What an update did.
struct FirmwareUpdateReport {
  unsigned slot = 0;  ///< the slot written
  FirmwareVersion from;
  FirmwareVersion to;
  std::uint32_t security_version = 0;  ///< the card's counter afterwards
  bool committed = false;
};

/// Updates the card's firmware (docs/firmware.md): checks the image against the card BEFORE
/// anything is written (inspect_firmware_image with the card's trusted key, then target
/// vendor/device/model, version not older unless allow_downgrade, security version not below
/// the card's), then BEGIN (erases the inactive slot), WRITE in order in max_chunk pieces,
/// FINISH (the card verifies again), ACTIVATE, waits up to ready_timeout_ns for the new image to
/// report ready, then COMMIT (raises the card's security version). At every point before
/// COMMIT a reset or power cut leaves the old image running.
/// Errors: the refusals of inspect_firmware_image; kFailedPrecondition (wrong device or model,
/// older version, lower security version, an update already on trial, DMA queues open without
/// `force`); kPermissionDenied (read-only attach); kAborted (the new image did not come up and
/// the card rolled back to the old one: it runs, the new slot is not committed);
/// kDeadlineExceeded (no ready within ready_timeout_ns: the update was rolled back with ABORT);
/// the card's refusals at FINISH (kDataLoss, kPermissionDenied, kFailedPrecondition) and
/// mailbox errors. After an error the card runs a valid image: the old one unless COMMIT
/// succeeded. Thread-safety: one update per card at a time (the caller's duty); mailbox calls
/// are serialised per card. `progress` is called on the caller's thread.
Result<FirmwareUpdateReport> update_firmware(Device& device, std::span<const std::byte> image,
                                             const FirmwareUpdateOptions& options = {},
                                             const FirmwareProgress& progress = {});

/// Makes a trial slot permanent (FW_COMMIT). Errors: kFailedPrecondition (not on trial or not
/// ready), kPermissionDenied (read-only attach), mailbox errors.
Result<FirmwareStatus> commit_firmware(Device& device);
/// Ends an update: a staged or partly written image is dropped; a trial returns to the
/// committed slot (FW_ABORT). Errors: kPermissionDenied (read-only attach), mailbox errors.
Result<FirmwareStatus> rollback_firmware(Device& device);

}  // namespace npo
