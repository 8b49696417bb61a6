// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: CMIS decoder (drivers/optics/decode_cmis.cpp) on arbitrary memory images.
#include <cstddef>
#include <cstdint>
#include <span>

#include "fuzz_check.hpp"
#include "npo/hal/xcvr_decode.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static constexpr std::uint8_t kIds[] = {0x18, 0x19, 0x1b, 0x1e, 0x1f, 0x20};
  npo_fuzz::run_with_identifier(data, size, kIds,
                                [](std::span<const std::byte> b) { return npo::xcvr::decode_cmis(b); });
  return 0;
}
