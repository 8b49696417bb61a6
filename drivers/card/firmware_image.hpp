// SPDX-License-Identifier: Apache-2.0
// drivers/card: the host's checks of a signed firmware image (docs/spec/firmware-image.md §4)
// with libsodium, over the layout parser of firmware-iface (npo/fw/image.hpp, standard library
// only, hence no crypto and no npo::Result there). Used by npo/hal/firmware.hpp's functions
// and by the fuzz target tests/fuzz/fuzz_firmware_image.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "npo/fw/image.hpp"
#include "npo/hal/error.hpp"

namespace npo::fw {

/// A parsed image whose layout and payload digest were checked (views into the caller's bytes).
using ImageView = image::View;

/// The error of refusal `e` (firmware-image.md §4): its code (kInvalidArgument for a malformed
/// image, kOutOfRange oversized, kDataLoss corrupt, kPermissionDenied key or signature,
/// kFailedPrecondition wrong device, older version, lower security version) and a message
/// "firmware image refused (NAME): DETAIL".
[[nodiscard]] std::unexpected<Error> image_refusal(image::Error e, std::string_view detail);

/// Parses `bytes`: the layout (image::parse_layout) and the payload digest. Errors: each
/// refusal of §4 checks 1-7 as image_refusal gives it. Thread-safe, pure.
Result<ImageView> parse_image(std::span<const std::byte> bytes);

/// Checks the signer key and signature of a parsed image against `trusted` (§4 checks 8-9).
/// Errors: kPermissionDenied (unknown_key, bad_signature). Thread-safe, pure.
Result<void> verify_image_signature(const ImageView& view, std::span<const std::byte, 32> trusted);

}  // namespace npo::fw
