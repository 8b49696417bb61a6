// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: the dump parsers (drivers/optics/dump_format.cpp): ethtool -m hex text, the
// .hex format, raw/text detection; whatever parses is decoded too.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "fuzz_check.hpp"
#include "npo/hal/xcvr_decode.hpp"

namespace {

void check_parse(const npo::Result<std::vector<std::byte>>& r) {
  if (!r) {
    const auto c = r.error().code();
    npo_fuzz::require(c == npo::Code::kInvalidArgument || c == npo::Code::kDataLoss);
    return;
  }
  npo_fuzz::require(!r->empty() && r->size() % 128 == 0 && r->size() <= 64 * 1024);
  npo_fuzz::check(npo::xcvr::decode_module(*r));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  check_parse(npo::xcvr::parse_dump_text(text));
  check_parse(npo::xcvr::parse_dump(std::span<const std::byte>(reinterpret_cast<const std::byte*>(data), size)));
  return 0;
}
