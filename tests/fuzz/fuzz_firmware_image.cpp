// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: the signed firmware image parser (drivers/card/firmware_image.cpp over
// firmware-iface's npo/fw/image.hpp, docs/spec/firmware-image.md §4) on arbitrary bytes -- the
// host's first contact with a file an operator hands to `npo-fw update`. Invariants: a refusal
// has one of the documented codes and a message; an accepted image covers exactly the input,
// its header re-encodes to the same bytes, and its signature check against the development key
// either passes or is a kPermissionDenied refusal. Seeds: signed images (make_seeds.cpp).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include "card/firmware_image.hpp"
#include "fuzz_check.hpp"

namespace {

/// tests/data/firmware/dev-key.pub.
constexpr std::array<std::uint8_t, 32> kDevKey = {0x7c, 0x3b, 0x70, 0x33, 0x04, 0x34, 0xce, 0xcf, 0xeb, 0x2e, 0x3e,
                                                  0x0c, 0x41, 0x0e, 0x7d, 0xff, 0x1a, 0x40, 0xf2, 0xba, 0xed, 0x36,
                                                  0x67, 0xc5, 0x26, 0x53, 0x7a, 0x9e, 0x84, 0xa2, 0x29, 0xd1};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using npo_fuzz::require;
  namespace img = npo::fw::image;
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  auto v = npo::fw::parse_image(bytes);
  if (!v) {
    const auto c = v.error().code();
    require(c == npo::Code::kInvalidArgument || c == npo::Code::kOutOfRange || c == npo::Code::kDataLoss);
    require(v.error().message().starts_with("firmware image refused ("));
    return 0;
  }
  const img::Header& h = v->header;
  require(h.payload_len > 0 && size == img::hdr::kSize + h.payload_len && size <= img::kMaxImageBytes);
  require(v->payload.data() == bytes.data() + img::hdr::kSize && v->payload.size() == h.payload_len);
  require(v->header_bytes.size() == img::hdr::kSize && v->signed_header().size() == img::hdr::kSigned);
  const auto enc = img::encode_header(h);
  require(std::equal(enc.begin(), enc.end(), v->header_bytes.begin()));
  require(h.model_view().size() <= img::hdr::kModelLen);
  std::array<std::byte, 32> key{};
  for (std::size_t i = 0; i < key.size(); ++i) key[i] = static_cast<std::byte>(kDevKey[i]);
  auto s = npo::fw::verify_image_signature(*v, key);
  if (!s) require(s.error().code() == npo::Code::kPermissionDenied);
  return 0;
}
