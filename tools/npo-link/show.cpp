// SPDX-License-Identifier: Apache-2.0
// npo-link show: one line per port -- state, reason, speed, lanes, neighbour, worst-lane BER --
// then the one-line summary. Reads only: it never trains or enables a port (--train, handled
// in main.cpp, trains first on request).
#include <string>

#include <fmt/format.h>

#include "common/output.hpp"
#include "link.hpp"

namespace npo::tools::link {

namespace {

constexpr std::string_view kLegend =
    "\nSTATE: HEALTHY (every lane in use good), DEGRADED (fewer lanes than the module's 8, or a lane over the\n"
    "1e-5 warning level or 100x worse than its own baseline), FAILED (down -- a link is up only when both\n"
    "ends are Up with CDR lock --, a module removed, or a lane over the KP4 limit 2.4e-4 / with uncorrectable\n"
    "codewords, or 5 flaps in 60 s), DISABLED (no module, disabled, or held down after flapping). A link that\n"
    "went down and retrained 2 times in 300 s is DEGRADED. A lane verdict needs 2 intervals to worsen and 3 to\n"
    "recover: a run samples 2 intervals of --interval s (0.5) first, so a lane bad now is reported now.\n"
    "Gb/s: payload rate, 100 Gb/s per lane (53.125 GBd PAM4 after RS(544,514) and 256b/257b); blank and\n"
    "0 lanes when the link is not up. NEIGHBOR: card:port learned in training. WORST-BER: the worst lane's\n"
    "pre-FEC BER (symbol errors + 16 per uncorrectable codeword) / (5440 bits x codewords) over the last\n"
    "interval (not since link-up). Exit status: 0 healthy, 3 a port DEGRADED, 4 a port FAILED or held\n"
    "down or a card removed, 1 tool error, 2 bad arguments.\n";

}  // namespace

int show_once(System& sys, LinkMonitor& mon, const Common& c) {
  auto snap = frame_snapshot(mon, c, c.interval);
  if (!snap) return report(snap.error(), "snapshot");
  hint_if_untrained(*snap, c);
  if (c.json) return print_ports_json(sys, *snap, c);
  const Summary sum = summarize(*snap, c);
  const bool brief = brief_view(c, sum);
  print_frame_header(c, "show", snap->timestamp_ns);
  using Align = Column::Align;
  const Table table({{"CARD", 4, Align::kRight, ""},
                     {"PORT", 4},
                     {"STATE", 9, Align::kLeft, "  "},
                     {"Gb/s", 6},
                     {"LANES", 5},
                     {"NEIGHBOR", 9, Align::kLeft, "  "},
                     {"WORST-BER", 9},
                     {"REASON", 0, Align::kLeft, "  "}});
  std::size_t rows = 0;
  // The header goes out with the first row (a brief view of a healthy fabric has none).
  auto header = [&] {
    if (rows == 0) table.print_header();
  };
  const std::size_t hidden = for_each_selected(
      *snap, c, brief,
      [&](std::uint32_t card) {
        // Issue 19: a removed card is marked; the live cards are still shown.
        header();
        table.print_row(card, "-", "REMOVED", "", "", "-", "-", "card removed: its ports cannot be read");
        ++rows;
      },
      [&](std::uint32_t card, const PortStatus& ps, const PortHealth& h) {
        header();
        ++rows;
        std::string nb = "-";
        if (auto nc = card_of(sys, ps.neighbor_fabric_id)) nb = fmt::format("{}:{}", *nc, ps.neighbor_port.value_or(0));
        // Speed and lanes of a link that is not up are blank / 0.
        const std::string speed = h.link_up ? fmt::format("{:g}", ps.speed_gbps()) : std::string();
        table.print_row(card, ps.port, port_state_name(h.state), speed,
                        fmt::format("{}/{}", h.link_up ? h.lane_count : 0u, ps.lanes.size()), nb,
                        ber_text(worst_ber(ps, h)), h.reason);
      });
  if (rows == 0 && hidden == 0 && !c.filtered()) say_if_empty(rows);
  // A filter that matches nothing still ends with the summary line (tools/README).
  if (sum.ports == 0 && sum.removed_cards.empty() && c.filtered()) fmt::print("no selected port matches\n");
  if (sum.ports != 0 || !sum.removed_cards.empty() || c.filtered()) {
    if (hidden != 0) fmt::print("({} HEALTHY ports not listed; --full lists every port)\n", hidden);
    fmt::print("\n{}\n", sum.line());
    say_if_without_module(count_without_module(*snap, c));
    print_legend_once(c, kLegend);
  }
  return sum.exit_status();
}

}  // namespace npo::tools::link
