// SPDX-License-Identifier: Apache-2.0
// npo-link prbs: a PRBS test (registers.md §7.4) on both ends of a link, per-lane
// lock, bits, errors and BER.
#include <cstdint>
#include <cstdio>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/output.hpp"
#include "link.hpp"

namespace npo::tools::link {

using nlohmann::json;

int prbs_once(System& sys, const Common& c, const PrbsArgs& a) {
  const std::string& pattern = a.pattern;
  const std::string& side = a.side;
  const double seconds = a.seconds;
  const unsigned card = a.card, port = a.port, lanes = a.lanes;
  auto pat = parse_prbs_pattern(pattern);
  if (!pat) return report(pat.error(), "prbs");
  if (side != "media" && side != "host") {
    std::fprintf(stderr, "npo-link prbs: --side is media or host, not '%s'\n", side.c_str());
    return 1;
  }
  if (card < sys.device_count()) {
    // A port without a module (no cable) has nothing to test: say so instead of printing
    // unlocked lanes with zero bits.
    if (auto ps = read_port(sys.device(card), port); ps && !ps->module_present) {
      std::fprintf(stderr, "npo-link prbs: card %u port %u has no module (no cable): nothing to test\n", card, port);
      return 1;
    }
  }
  PrbsOptions o{.pattern = *pat,
                .host_side = side == "host",
                .lanes = static_cast<std::uint8_t>(lanes),
                .duration_ns = static_cast<std::uint64_t>(seconds * 1e9)};
  auto r = run_prbs(sys, card, port, o);
  if (!r) return report(r.error(), "prbs");
  if (c.json) {
    json ports = json::array();
    for (const auto& pr : *r) {
      json ls = json::array();
      for (const auto& l : pr.lanes) {
        ls.push_back(
            {{"lane", l.lane}, {"locked", l.locked}, {"bits", l.bits}, {"errors", l.errors}, {"ber", or_null(l.ber)}});
      }
      ports.push_back({{"card", pr.card}, {"port", pr.port}, {"lanes", ls}});
    }
    print_json(
        {{"pattern", std::string(prbs_pattern_name(*pat))}, {"side", side}, {"seconds", seconds}, {"ports", ports}});
    return 0;
  }
  const Table table({{"LANE", 4, Column::Align::kRight, "  "}, {"LOCK", 6}, {"BITS", 16}, {"ERRORS", 12}, {"BER", 10}});
  fmt::print("PRBS {} {} side, {:g} s\n", prbs_pattern_name(*pat), side, seconds);
  for (const auto& pr : *r) {
    fmt::print("card {} port {}:\n", pr.card, pr.port);
    table.print_header();
    for (const auto& l : pr.lanes) table.print_row(l.lane, l.locked ? "yes" : "no", l.bits, l.errors, ber_text(l.ber));
  }
  return 0;
}

}  // namespace npo::tools::link
