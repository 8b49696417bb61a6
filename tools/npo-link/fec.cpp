// SPDX-License-Identifier: Apache-2.0
// npo-link fec: per port, the FEC counters and symbol-error bins of every lane.
#include <string>

#include <fmt/format.h>

#include "common/output.hpp"
#include "link.hpp"

namespace npo::tools::link {

int fec_once(System& sys, LinkMonitor& mon, const Common& c) {
  auto snap = mon.snapshot();
  if (!snap) return report(snap.error(), "snapshot");
  hint_if_untrained(*snap, c);
  if (c.json) return print_ports_json(sys, *snap, c);
  const Summary sum = summarize(*snap, c);
  const bool brief = brief_view(c, sum);
  print_frame_header(c, "fec", snap->timestamp_ns);
  const Table table({{"LANE", 4, Column::Align::kRight, "  "},
                     {"CODEWORDS", 14},
                     {"CORRECTED", 12},
                     {"UNCORR", 8},
                     {"SYM-ERRORS", 12},
                     {"PRE-BER", 9},
                     {"BINS (errors:codewords, bins 1..15)", 0, Column::Align::kLeft, "  "}});
  std::size_t rows = 0;
  const std::size_t hidden = for_each_selected(
      *snap, c, brief,
      [](std::uint32_t card) { fmt::print("card {}: REMOVED (card removed: its ports cannot be read)\n", card); },
      [&](std::uint32_t card, const PortStatus& ps, const PortHealth& h) {
        ++rows;
        fmt::print("card {} port {}: {} ({})\n", card, ps.port, port_state_name(h.state), h.reason);
        table.print_header();
        for (unsigned l = 0; l < ps.lanes.size(); ++l) {
          const auto& lc = ps.lanes[l];
          std::string bins;
          for (unsigned b = 1; b < lc.fec_bins.size(); ++b) {
            if (lc.fec_bins[b] != 0) bins += fmt::format("{}{}:{}", bins.empty() ? "" : " ", b, lc.fec_bins[b]);
          }
          table.print_row(l, lc.codewords, lc.corrected, lc.uncorrectable, lc.symbol_errors,
                          ber_text(lane_ber(ps, h, l)), bins.empty() ? "-" : bins);
        }
      });
  if (rows == 0 && hidden == 0 && !c.filtered()) say_if_empty(rows);
  // A filter that matches nothing still ends with the summary line (tools/README).
  if (sum.ports == 0 && sum.removed_cards.empty() && c.filtered()) fmt::print("no selected port matches\n");
  if (hidden != 0) fmt::print("({} HEALTHY ports not listed; --full lists every port)\n", hidden);
  if (sum.ports != 0 || !sum.removed_cards.empty() || c.filtered()) {
    fmt::print("\n{}\n", sum.line());
    say_if_without_module(count_without_module(*snap, c));
  }
  return sum.exit_status();
}

}  // namespace npo::tools::link
