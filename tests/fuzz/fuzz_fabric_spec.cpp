// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: topology files (hal/src/topology_file_read.cpp, docs/topology.md), the other
// parser of untrusted text. Whatever parses must validate, survive both writers, read back
// equal from each, and trace a light path from every card port without running off the spec.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_check.hpp"
#include "npo/hal/fabric_spec.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto spec = npo::parse_fabric_spec(text);
  if (!spec) {
    npo_fuzz::require(spec.error().code() == npo::Code::kInvalidArgument);
    npo_fuzz::require(!spec.error().message().empty());
    return 0;
  }
  npo_fuzz::require(npo::validate_fabric_spec(*spec).has_value());
  for (const std::string& out : {npo::to_yaml(*spec), npo::to_json(*spec)}) {
    auto back = npo::parse_fabric_spec(out);
    npo_fuzz::require(back.has_value());
    npo_fuzz::require(*back == *spec);
  }
  // Light paths: bounded work per port (at most one cross-connect per switch port).
  if (spec->cards <= 64) {
    for (std::uint32_t c = 0; c < spec->cards; ++c) {
      for (unsigned p = 0; p < spec->ports_of(c); ++p) {
        const auto lp = npo::trace_light_path(*spec, c, p);
        if (lp) npo_fuzz::require(lp->card < spec->cards && lp->port < spec->ports_of(lp->card));
      }
    }
  }
  return 0;
}
