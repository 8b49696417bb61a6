// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: SFF-8636 decoder (drivers/optics/decode_sff8636.cpp) on arbitrary images.
#include <cstddef>
#include <cstdint>
#include <span>

#include "fuzz_check.hpp"
#include "npo/hal/xcvr_decode.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static constexpr std::uint8_t kIds[] = {0x0c, 0x0d, 0x11};
  npo_fuzz::run_with_identifier(data, size, kIds,
                                [](std::span<const std::byte> b) { return npo::xcvr::decode_sff8636(b); });
  return 0;
}
