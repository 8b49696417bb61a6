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
    // A read-only attach (emu-remote mode=ro) drops register writes: the test cannot start,
    // and its all-zero counters would read as "no lock".
    if (sys.device(card).info().read_only) {
      return report(Error(Code::kPermissionDenied,
                          fmt::format("card {} is attached read-only (mode=ro): a PRBS test writes the card's "
                                      "registers; attach as the owner (mode=rw, or no mode= for npo-link prbs)",
                                      card)),
                    "prbs");
    }
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
  // The far end is known from training; it must be a card of this system to be checked.
  std::string far_missing;
  if (auto ps = read_port(sys.device(card), port); ps) {
    if (!ps->neighbor_fabric_id) {
      far_missing = "the link has not trained, so its far end is unknown";
    } else if (auto fc = card_of(sys, ps->neighbor_fabric_id); !fc) {
      far_missing = fmt::format("the far end (fabric ID {}) is not a card of this backend", *ps->neighbor_fabric_id);
    } else if (sys.device(*fc).info().read_only) {
      far_missing = fmt::format("the far end (card {}) is attached read-only", *fc);
    }
  }
  auto r = run_prbs(sys, card, port, o);
  if (!r) return report(r.error(), "prbs");
  if (far_missing.empty() && r->size() < 2) far_missing = "the far end was not checked";
  // Exit status (tools/README.md): 1 when the far end could not be checked, 4 when a
  // selected lane of either end did not lock, else 0 (errors are counted, not judged).
  bool unlocked = false;
  for (const auto& pr : *r) {
    for (const auto& l : pr.lanes) unlocked = unlocked || !l.locked;
  }
  const int status = !far_missing.empty() ? kExitError : unlocked ? kExitFailed : kExitHealthy;
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
    print_json({{"pattern", std::string(prbs_pattern_name(*pat))},
                {"side", side},
                {"seconds", seconds},
                {"ports", ports},
                {"far_end_checked", far_missing.empty()}});
    if (!far_missing.empty()) std::fprintf(stderr, "npo-link prbs: far end not checked: %s\n", far_missing.c_str());
    return status;
  }
  const Table table({{"LANE", 4, Column::Align::kRight, "  "}, {"LOCK", 6}, {"BITS", 16}, {"ERRORS", 12}, {"BER", 10}});
  fmt::print("PRBS {} {} side, {:g} s\n", prbs_pattern_name(*pat), side, seconds);
  for (const auto& pr : *r) {
    fmt::print("card {} port {}:\n", pr.card, pr.port);
    table.print_header();
    for (const auto& l : pr.lanes) table.print_row(l.lane, l.locked ? "yes" : "no", l.bits, l.errors, ber_text(l.ber));
  }
  if (!far_missing.empty()) {
    std::fflush(stdout);
    std::fprintf(stderr, "npo-link prbs: far end not checked: %s\n", far_missing.c_str());
  }
  return status;
}

}  // namespace npo::tools::link
