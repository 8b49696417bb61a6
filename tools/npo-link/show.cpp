// SPDX-License-Identifier: Apache-2.0
// npo-link show: one line per port -- state, reason, speed, lanes, neighbour, worst-lane BER.
#include <string>

#include <fmt/format.h>

#include "common/output.hpp"
#include "link.hpp"

namespace npo::tools::link {

int show_once(System& sys, LinkMonitor& mon, const Common& c) {
  auto snap = mon.snapshot();
  if (!snap) return report(snap.error(), "snapshot");
  if (c.json) {
    print_ports_json(sys, *snap, c);
    return 0;
  }
  using Align = Column::Align;
  const Table table({{"CARD", 4, Align::kRight, ""},
                     {"PORT", 4},
                     {"STATE", 9, Align::kLeft, "  "},
                     {"Gb/s", 6},
                     {"LANES", 5},
                     {"NEIGHBOR", 9, Align::kLeft, "  "},
                     {"WORST-BER", 9},
                     {"REASON", 0, Align::kLeft, "  "}});
  table.print_header();
  std::size_t rows = 0;
  for (const auto& cp : snap->cards) {
    for (std::size_t i = 0; i < cp.ports.size(); ++i) {
      const auto& ps = cp.ports[i];
      const auto& h = cp.health[i];
      if (!listed(c, ps)) continue;
      ++rows;
      std::string nb = "-";
      if (auto nc = card_of(sys, ps.neighbor_fabric_id)) nb = fmt::format("{}:{}", *nc, ps.neighbor_port.value_or(0));
      table.print_row(cp.card, ps.port, port_state_name(h.state), fmt::format("{:g}", ps.speed_gbps()),
                      fmt::format("{}/{}", ps.lane_count, ps.lanes.size()), nb, ber_text(worst_ber(ps, h)), h.reason);
    }
  }
  say_if_empty(rows);
  if (rows != 0) {
    fmt::print(
        "\nSTATE: HEALTHY (every lane in use good), DEGRADED (fewer lanes than the module's 8, or a lane over the\n"
        "1e-5 warning level or 100x worse than its own baseline), FAILED (down, or a lane over the KP4 limit\n"
        "2.4e-4 / with uncorrectable codewords), DISABLED (no module, disabled, or held down after flapping).\n"
        "Gb/s: payload rate, 100 Gb/s per lane (53.125 GBd PAM4 after RS(544,514) and 256b/257b). NEIGHBOR:\n"
        "card:port learned in training. WORST-BER: the worst lane's pre-FEC BER (symbol errors + 16 per\n"
        "uncorrectable codeword) / (5440 bits x codewords) since the link came up or the last snapshot.\n");
  }
  return 0;
}

}  // namespace npo::tools::link
