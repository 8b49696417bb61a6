// SPDX-License-Identifier: Apache-2.0
// npo-hal firmware interface: the signed card firmware image (docs/spec/firmware-image.md).
// A 256-byte little-endian header, then the payload. The header names the target card, the
// firmware and security versions, the payload's length and digest (SHA-512 or BLAKE2b-512),
// the signer's Ed25519 public key and an Ed25519 signature over header bytes [0, 0xc0) followed
// by the payload. This header is standard library only: it checks the layout; the digest and
// the signature are computed by each side with its own crypto (the host's drivers/card, the
// card's firmware model in emulator/src).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <expected>
#include <span>
#include <string_view>

#include "npo/fw/bits.hpp"

namespace npo::fw::image {

/// "NPOFWIMG" at offset 0.
inline constexpr std::array<std::byte, 8> kMagic{std::byte{'N'}, std::byte{'P'}, std::byte{'O'}, std::byte{'F'},
                                                 std::byte{'W'}, std::byte{'I'}, std::byte{'M'}, std::byte{'G'}};
/// The one format version this header describes.
inline constexpr std::uint16_t kFormatVersion = 1;
/// Largest whole image (header + payload) a card accepts: 16 MiB (one flash slot).
inline constexpr std::size_t kMaxImageBytes = std::size_t{16} << 20;

/// Header layout (firmware-image.md §2), offsets in bytes.
namespace hdr {
inline constexpr std::size_t kMagic = 0x000;            // u8[8] "NPOFWIMG"
inline constexpr std::size_t kFormatVersion = 0x008;    // u16 kFormatVersion
inline constexpr std::size_t kHeaderSize = 0x00a;       // u16 kSize
inline constexpr std::size_t kFlags = 0x00c;            // u32 0 (reserved)
inline constexpr std::size_t kVendorId = 0x010;         // u16 target PCI vendor ID
inline constexpr std::size_t kDeviceId = 0x012;         // u16 target PCI device ID
inline constexpr std::size_t kReserved0 = 0x014;        // u32 0
inline constexpr std::size_t kModel = 0x018;            // char[32] target board model, NUL padded; empty: any
inline constexpr std::size_t kFwVersion = 0x038;        // u32 major<<16 | minor<<8 | patch
inline constexpr std::size_t kSecurityVersion = 0x03c;  // u32 anti-rollback counter
inline constexpr std::size_t kPayloadLen = 0x040;       // u64 payload bytes after the header
inline constexpr std::size_t kDigestAlg = 0x048;        // u8 DigestAlg
inline constexpr std::size_t kReserved1 = 0x049;        // u8[7] 0
inline constexpr std::size_t kDigest = 0x050;           // u8[64] digest of the payload
inline constexpr std::size_t kSignerKey = 0x090;        // u8[32] Ed25519 public key of the signer
inline constexpr std::size_t kSignature = 0x0b0;        // u8[64] Ed25519 over [0, kSignature) + payload
inline constexpr std::size_t kReserved2 = 0x0f0;        // u8[16] 0
inline constexpr std::size_t kSize = 0x100;
inline constexpr std::size_t kModelLen = 32;
inline constexpr std::size_t kDigestLen = 64;
inline constexpr std::size_t kKeyLen = 32;
inline constexpr std::size_t kSignatureLen = 64;
inline constexpr std::size_t kSigned = kSignature;  ///< header bytes covered by the signature
}  // namespace hdr
static_assert(hdr::kModel + hdr::kModelLen == hdr::kFwVersion);
static_assert(hdr::kDigest + hdr::kDigestLen == hdr::kSignerKey);
static_assert(hdr::kSignerKey + hdr::kKeyLen == hdr::kSignature);
static_assert(hdr::kSignature + hdr::kSignatureLen == hdr::kReserved2);
static_assert(hdr::kReserved2 + 16 == hdr::kSize);

/// Payload digest algorithm (hdr::kDigestAlg).
enum class DigestAlg : std::uint8_t {
  kSha512 = 1,      ///< SHA-512 (FIPS 180-4), 64 bytes
  kBlake2b512 = 2,  ///< BLAKE2b with a 64-byte output, no key (RFC 7693)
};

/// Why an image is refused (firmware-image.md §4). Each has a distinct name and message.
enum class Error : std::uint8_t {
  kTruncated = 1,       ///< shorter than the header, or than header + payload_len
  kBadMagic,            ///< not "NPOFWIMG"
  kBadFormatVersion,    ///< format version or header size unknown
  kBadHeader,           ///< a reserved field is not zero, or the digest algorithm is unknown
  kOversized,           ///< larger than kMaxImageBytes (or payload_len says so)
  kTrailingBytes,       ///< bytes after header + payload_len
  kEmptyPayload,        ///< payload_len is 0
  kDigestMismatch,      ///< the payload does not hash to the header's digest: corrupt
  kUnknownKey,          ///< signed by a key the card does not trust
  kBadSignature,        ///< the signature does not verify: tampered header or payload
  kWrongDevice,         ///< vendor/device ID or model is not the card's
  kOlderVersion,        ///< firmware version older than the one running (a downgrade)
  kSecurityVersionLow,  ///< security version below the card's anti-rollback counter
};

/// Stable lower-case name of an error, e.g. "digest_mismatch".
[[nodiscard]] constexpr std::string_view error_name(Error e) noexcept {
  switch (e) {
    case Error::kTruncated: return "truncated";
    case Error::kBadMagic: return "bad_magic";
    case Error::kBadFormatVersion: return "bad_format_version";
    case Error::kBadHeader: return "bad_header";
    case Error::kOversized: return "oversized";
    case Error::kTrailingBytes: return "trailing_bytes";
    case Error::kEmptyPayload: return "empty_payload";
    case Error::kDigestMismatch: return "digest_mismatch";
    case Error::kUnknownKey: return "unknown_key";
    case Error::kBadSignature: return "bad_signature";
    case Error::kWrongDevice: return "wrong_device";
    case Error::kOlderVersion: return "older_version";
    case Error::kSecurityVersionLow: return "security_version_low";
  }
  return "unknown";
}

/// The decoded header fields.
struct Header {
  std::uint16_t format_version = kFormatVersion;
  std::uint16_t vendor_id = 0;
  std::uint16_t device_id = 0;
  std::array<char, hdr::kModelLen> model{};  ///< NUL padded
  std::uint32_t fw_version = 0;              ///< major<<16 | minor<<8 | patch (mailbox.md §3.2 encoding)
  std::uint32_t security_version = 0;
  std::uint64_t payload_len = 0;
  DigestAlg digest_alg = DigestAlg::kSha512;
  std::array<std::byte, hdr::kDigestLen> digest{};
  std::array<std::byte, hdr::kKeyLen> signer_key{};
  std::array<std::byte, hdr::kSignatureLen> signature{};

  /// The model as a string (up to the first NUL).
  [[nodiscard]] std::string_view model_view() const noexcept {
    std::size_t n = 0;
    while (n < model.size() && model[n] != '\0') ++n;
    return {model.data(), n};
  }
};

/// A structurally valid image: its decoded header and views into the caller's bytes (valid
/// while those live). The digest and signature are not checked yet.
struct View {
  Header header;
  std::span<const std::byte> header_bytes;  ///< the hdr::kSize header bytes
  std::span<const std::byte> payload;       ///< payload_len bytes
  /// The header bytes the signature covers ([0, hdr::kSigned)); the payload follows them.
  [[nodiscard]] std::span<const std::byte> signed_header() const noexcept { return header_bytes.first(hdr::kSigned); }
};

/// Digest length of `alg` in bytes (64 for both), 0 for an unknown value.
[[nodiscard]] constexpr std::size_t digest_len(std::uint8_t alg) noexcept {
  return alg == static_cast<std::uint8_t>(DigestAlg::kSha512) ||
                 alg == static_cast<std::uint8_t>(DigestAlg::kBlake2b512)
             ? 64
             : 0;
}

/// Checks the layout of `bytes` (firmware-image.md §4 checks 1-6, in that order): size at
/// least the header, magic, format version and header size, reserved fields and digest
/// algorithm, size within kMaxImageBytes, payload_len non-zero and exactly the rest of the
/// bytes. Pure function; reads only `bytes`.
[[nodiscard]] inline std::expected<View, Error> parse_layout(std::span<const std::byte> bytes) noexcept {
  if (bytes.size() < hdr::kSize) return std::unexpected(Error::kTruncated);
  const std::byte* p = bytes.data();
  for (std::size_t i = 0; i < kMagic.size(); ++i)
    if (p[hdr::kMagic + i] != kMagic[i]) return std::unexpected(Error::kBadMagic);
  View v;
  Header& h = v.header;
  h.format_version = load_le<std::uint16_t>(p, hdr::kFormatVersion);
  if (h.format_version != kFormatVersion || load_le<std::uint16_t>(p, hdr::kHeaderSize) != hdr::kSize) {
    return std::unexpected(Error::kBadFormatVersion);
  }
  const auto zero = [&](std::size_t off, std::size_t len) {
    for (std::size_t i = 0; i < len; ++i)
      if (p[off + i] != std::byte{0}) return false;
    return true;
  };
  const auto alg = load_le<std::uint8_t>(p, hdr::kDigestAlg);
  if (!zero(hdr::kFlags, 4) || !zero(hdr::kReserved0, 4) || !zero(hdr::kReserved1, 7) || !zero(hdr::kReserved2, 16) ||
      digest_len(alg) == 0) {
    return std::unexpected(Error::kBadHeader);
  }
  if (bytes.size() > kMaxImageBytes) return std::unexpected(Error::kOversized);
  h.payload_len = load_le<std::uint64_t>(p, hdr::kPayloadLen);
  if (h.payload_len > kMaxImageBytes - hdr::kSize) return std::unexpected(Error::kOversized);
  if (h.payload_len == 0) return std::unexpected(Error::kEmptyPayload);
  if (bytes.size() < hdr::kSize + h.payload_len) return std::unexpected(Error::kTruncated);
  if (bytes.size() > hdr::kSize + h.payload_len) return std::unexpected(Error::kTrailingBytes);
  h.vendor_id = load_le<std::uint16_t>(p, hdr::kVendorId);
  h.device_id = load_le<std::uint16_t>(p, hdr::kDeviceId);
  for (std::size_t i = 0; i < hdr::kModelLen; ++i) h.model[i] = static_cast<char>(p[hdr::kModel + i]);
  h.fw_version = load_le<std::uint32_t>(p, hdr::kFwVersion);
  h.security_version = load_le<std::uint32_t>(p, hdr::kSecurityVersion);
  h.digest_alg = static_cast<DigestAlg>(alg);
  for (std::size_t i = 0; i < hdr::kDigestLen; ++i) h.digest[i] = p[hdr::kDigest + i];
  for (std::size_t i = 0; i < hdr::kKeyLen; ++i) h.signer_key[i] = p[hdr::kSignerKey + i];
  for (std::size_t i = 0; i < hdr::kSignatureLen; ++i) h.signature[i] = p[hdr::kSignature + i];
  v.header_bytes = bytes.first(hdr::kSize);
  v.payload = bytes.subspan(hdr::kSize, static_cast<std::size_t>(h.payload_len));
  return v;
}

/// Encodes `h` as the hdr::kSize header bytes (reserved fields zero). The signature field is
/// written as given: sign [0, hdr::kSigned) + payload, then store the signature at
/// hdr::kSignature.
[[nodiscard]] inline std::array<std::byte, hdr::kSize> encode_header(const Header& h) noexcept {
  std::array<std::byte, hdr::kSize> b{};
  std::byte* p = b.data();
  for (std::size_t i = 0; i < kMagic.size(); ++i) p[hdr::kMagic + i] = kMagic[i];
  store_le<std::uint16_t>(p, hdr::kFormatVersion, h.format_version);
  store_le<std::uint16_t>(p, hdr::kHeaderSize, static_cast<std::uint16_t>(hdr::kSize));
  store_le<std::uint16_t>(p, hdr::kVendorId, h.vendor_id);
  store_le<std::uint16_t>(p, hdr::kDeviceId, h.device_id);
  for (std::size_t i = 0; i < hdr::kModelLen; ++i) p[hdr::kModel + i] = static_cast<std::byte>(h.model[i]);
  store_le<std::uint32_t>(p, hdr::kFwVersion, h.fw_version);
  store_le<std::uint32_t>(p, hdr::kSecurityVersion, h.security_version);
  store_le<std::uint64_t>(p, hdr::kPayloadLen, h.payload_len);
  store_le<std::uint8_t>(p, hdr::kDigestAlg, static_cast<std::uint8_t>(h.digest_alg));
  for (std::size_t i = 0; i < hdr::kDigestLen; ++i) p[hdr::kDigest + i] = h.digest[i];
  for (std::size_t i = 0; i < hdr::kKeyLen; ++i) p[hdr::kSignerKey + i] = h.signer_key[i];
  for (std::size_t i = 0; i < hdr::kSignatureLen; ++i) p[hdr::kSignature + i] = h.signature[i];
  return b;
}

/// Firmware version encoding shared with GET_VERSIONS (mailbox.md §3.2).
[[nodiscard]] constexpr std::uint32_t make_version(unsigned major, unsigned minor, unsigned patch) noexcept {
  return ((major & 0xffffu) << 16) | ((minor & 0xffu) << 8) | (patch & 0xffu);
}

}  // namespace npo::fw::image
