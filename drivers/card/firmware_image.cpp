// SPDX-License-Identifier: Apache-2.0
// The host's view of a signed firmware image: parse and check (firmware-image.md §4), build and
// sign one (§3), key generation; libsodium for SHA-512, BLAKE2b and Ed25519.
#include "card/firmware_image.hpp"

#include <sodium.h>

#include <charconv>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "npo/hal/firmware.hpp"

namespace npo {

namespace img = fw::image;

namespace {

Result<void> sodium_ready() {
  if (sodium_init() < 0) return fail(Code::kInternal, "libsodium failed to initialise");
  return {};
}

std::array<std::byte, img::hdr::kDigestLen> digest_of(img::DigestAlg alg, std::span<const std::byte> data) {
  std::array<std::byte, img::hdr::kDigestLen> d{};
  auto* out = reinterpret_cast<unsigned char*>(d.data());
  const auto* in = reinterpret_cast<const unsigned char*>(data.data());
  if (alg == img::DigestAlg::kSha512) {
    crypto_hash_sha512(out, in, data.size());
  } else {
    crypto_generichash(out, d.size(), in, data.size(), nullptr, 0);
  }
  return d;
}

/// The signed message: header bytes [0, kSigned) followed by the payload.
std::vector<unsigned char> signed_message(std::span<const std::byte> header, std::span<const std::byte> payload) {
  std::vector<unsigned char> m(img::hdr::kSigned + payload.size());
  std::memcpy(m.data(), header.data(), img::hdr::kSigned);
  if (!payload.empty()) std::memcpy(m.data() + img::hdr::kSigned, payload.data(), payload.size());
  return m;
}

std::string hex_prefix(std::span<const std::byte> b, std::size_t n = 8) {
  std::string s;
  for (std::size_t i = 0; i < n && i < b.size(); ++i) s += fmt::format("{:02x}", static_cast<unsigned>(b[i]));
  return s;
}

}  // namespace

std::unexpected<Error> fw::image_refusal(img::Error e, std::string_view detail) {
  Code c = Code::kInvalidArgument;
  switch (e) {
    case img::Error::kOversized: c = Code::kOutOfRange; break;
    case img::Error::kDigestMismatch: c = Code::kDataLoss; break;
    case img::Error::kUnknownKey:
    case img::Error::kBadSignature: c = Code::kPermissionDenied; break;
    case img::Error::kWrongDevice:
    case img::Error::kOlderVersion:
    case img::Error::kSecurityVersionLow: c = Code::kFailedPrecondition; break;
    default: break;
  }
  return fail(c, fmt::format("firmware image refused ({}): {}", img::error_name(e), detail));
}

Result<fw::ImageView> fw::parse_image(std::span<const std::byte> bytes) {
  auto v = img::parse_layout(bytes);
  if (!v) {
    const std::uint64_t declared =
        bytes.size() >= img::hdr::kSize ? fw::load_le<std::uint64_t>(bytes.data(), img::hdr::kPayloadLen) : 0;
    switch (v.error()) {
      case img::Error::kTruncated:
        return image_refusal(
            v.error(), bytes.size() < img::hdr::kSize
                           ? fmt::format("{} bytes, shorter than the {}-byte header", bytes.size(), img::hdr::kSize)
                           : fmt::format("{} bytes, the header announces {} + {} payload bytes", bytes.size(),
                                         img::hdr::kSize, declared));
      case img::Error::kBadMagic: return image_refusal(v.error(), "the first 8 bytes are not \"NPOFWIMG\"");
      case img::Error::kBadFormatVersion:
        return image_refusal(v.error(), fmt::format("format version {} / header size {}; this host reads version {} "
                                                    "with a {}-byte header",
                                                    fw::load_le<std::uint16_t>(bytes.data(), img::hdr::kFormatVersion),
                                                    fw::load_le<std::uint16_t>(bytes.data(), img::hdr::kHeaderSize),
                                                    img::kFormatVersion, img::hdr::kSize));
      case img::Error::kBadHeader:
        return image_refusal(v.error(), "a reserved header field is not zero or the digest algorithm is unknown");
      case img::Error::kOversized:
        return image_refusal(v.error(), fmt::format("{} bytes (payload_len {}); the largest image is {} bytes",
                                                    bytes.size(), declared, img::kMaxImageBytes));
      case img::Error::kTrailingBytes:
        return image_refusal(v.error(), fmt::format("{} bytes after the {} payload bytes the header announces",
                                                    bytes.size() - img::hdr::kSize - declared, declared));
      case img::Error::kEmptyPayload: return image_refusal(v.error(), "payload_len is 0");
      default: return image_refusal(v.error(), "malformed");
    }
  }
  if (auto r = sodium_ready(); !r) return std::unexpected(r.error());
  if (digest_of(v->header.digest_alg, v->payload) != v->header.digest) {
    return image_refusal(
        img::Error::kDigestMismatch,
        fmt::format("the {} payload bytes do not hash to the header's {} digest: the image is corrupt",
                    v->payload.size(), v->header.digest_alg == img::DigestAlg::kSha512 ? "SHA-512" : "BLAKE2b-512"));
  }
  return *v;
}

Result<void> fw::verify_image_signature(const ImageView& view, std::span<const std::byte, 32> trusted) {
  if (!std::equal(trusted.begin(), trusted.end(), view.header.signer_key.begin())) {
    return image_refusal(img::Error::kUnknownKey, fmt::format("signed by key {}..., the trusted key is {}...",
                                                              hex_prefix(view.header.signer_key), hex_prefix(trusted)));
  }
  if (auto r = sodium_ready(); !r) return std::unexpected(r.error());
  const auto msg = signed_message(view.header_bytes, view.payload);
  if (crypto_sign_verify_detached(reinterpret_cast<const unsigned char*>(view.header.signature.data()), msg.data(),
                                  msg.size(), reinterpret_cast<const unsigned char*>(trusted.data())) != 0) {
    return image_refusal(img::Error::kBadSignature,
                         "the Ed25519 signature does not verify: the header or payload was changed after signing");
  }
  return {};
}

std::string FirmwareVersion::to_string() const { return fmt::format("{}.{}.{}", major, minor, patch); }

Result<FirmwareVersion> FirmwareVersion::parse(std::string_view text) {
  FirmwareVersion v;
  unsigned* parts[3] = {&v.major, &v.minor, &v.patch};
  const unsigned limits[3] = {65535, 255, 255};
  std::string_view rest = text;
  for (int i = 0; i < 3; ++i) {
    const auto dot = i < 2 ? rest.find('.') : std::string_view::npos;
    const std::string_view part = rest.substr(0, dot);
    const auto [p, ec] = std::from_chars(part.data(), part.data() + part.size(), *parts[i]);
    if (part.empty() || ec != std::errc{} || p != part.data() + part.size() || *parts[i] > limits[i] ||
        (i < 2 && dot == std::string_view::npos)) {
      return fail(Code::kInvalidArgument,
                  fmt::format("firmware version '{}': expected MAJOR.MINOR.PATCH (0..65535.0..255.0..255)", text));
    }
    if (i < 2) rest = rest.substr(dot + 1);
  }
  return v;
}

Result<FirmwareKeyPair> generate_firmware_key() {
  if (auto r = sodium_ready(); !r) return std::unexpected(r.error());
  FirmwareKeyPair k;
  crypto_sign_keypair(reinterpret_cast<unsigned char*>(k.public_key.data()),
                      reinterpret_cast<unsigned char*>(k.secret_key.data()));
  return k;
}

Result<std::vector<std::byte>> sign_firmware_image(std::span<const std::byte> payload, const FirmwareSecretKey& secret,
                                                   const FirmwareImageSpec& spec) {
  if (payload.empty()) return fail(Code::kInvalidArgument, "firmware payload is empty");
  if (spec.model.size() >= img::hdr::kModelLen) {
    return fail(Code::kInvalidArgument,
                fmt::format("model '{}' is longer than {} characters", spec.model, img::hdr::kModelLen - 1));
  }
  if (spec.version.major > 65535 || spec.version.minor > 255 || spec.version.patch > 255) {
    return fail(Code::kInvalidArgument, fmt::format("firmware version {} out of range", spec.version.to_string()));
  }
  if (payload.size() > img::kMaxImageBytes - img::hdr::kSize) {
    return fail(Code::kOutOfRange,
                fmt::format("payload of {} bytes: the largest image is {} bytes", payload.size(), img::kMaxImageBytes));
  }
  if (auto r = sodium_ready(); !r) return std::unexpected(r.error());
  img::Header h;
  h.vendor_id = spec.vendor_id;
  h.device_id = spec.device_id;
  for (std::size_t i = 0; i < spec.model.size(); ++i) h.model[i] = spec.model[i];
  h.fw_version = spec.version.encoded();
  h.security_version = spec.security_version;
  h.payload_len = payload.size();
  h.digest_alg = spec.digest == FirmwareDigest::kBlake2b512 ? img::DigestAlg::kBlake2b512 : img::DigestAlg::kSha512;
  h.digest = digest_of(h.digest_alg, payload);
  // libsodium's secret key ends with the public key (crypto_sign_ed25519_sk_to_pk).
  std::memcpy(h.signer_key.data(), secret.data() + 32, 32);
  auto header = img::encode_header(h);
  const auto msg = signed_message(header, payload);
  unsigned long long siglen = 0;
  crypto_sign_detached(reinterpret_cast<unsigned char*>(header.data() + img::hdr::kSignature), &siglen, msg.data(),
                       msg.size(), reinterpret_cast<const unsigned char*>(secret.data()));
  std::vector<std::byte> out(header.begin(), header.end());
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

Result<FirmwareImageInfo> inspect_firmware_image(std::span<const std::byte> image, const FirmwarePublicKey* trusted) {
  auto v = fw::parse_image(image);
  if (!v) return std::unexpected(v.error());
  if (trusted) {
    if (auto r = fw::verify_image_signature(*v, *trusted); !r) return std::unexpected(r.error());
  }
  const img::Header& h = v->header;
  FirmwareImageInfo info;
  info.vendor_id = h.vendor_id;
  info.device_id = h.device_id;
  info.model = std::string(h.model_view());
  info.version = FirmwareVersion::decode(h.fw_version);
  info.security_version = h.security_version;
  info.digest = h.digest_alg == img::DigestAlg::kBlake2b512 ? FirmwareDigest::kBlake2b512 : FirmwareDigest::kSha512;
  info.payload_bytes = h.payload_len;
  info.image_bytes = image.size();
  info.signer_key = h.signer_key;
  info.signature_checked = trusted != nullptr;
  return info;
}

}  // namespace npo
