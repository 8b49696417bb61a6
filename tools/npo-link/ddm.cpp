// SPDX-License-Identifier: Apache-2.0
// npo-link ddm [--card N] [--port P]: each live module read over the mailbox and decoded
// (CMIS), then the card's DDM mirrors of the same lanes in BAR0.
#include <cstdio>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/output.hpp"
#include "link.hpp"

namespace npo::tools::link {

using nlohmann::json;

int ddm_once(System& sys, const Common& c, std::optional<unsigned> card, std::optional<unsigned> port) {
  // --card / --port select one card or one module; a selected port must exist and have one.
  if (card && *card >= sys.device_count()) {
    std::fprintf(stderr, "npo-link ddm: card %u outside 0..%zu\n", *card, sys.device_count() - 1);
    return 1;
  }
  if (port) {
    const unsigned np = sys.device(card.value_or(0)).port_count();
    if (*port >= np) {
      std::fprintf(stderr, "npo-link ddm: port %u outside 0..%u\n", *port, np - 1);
      return 1;
    }
  }
  json mods = json::array();
  for (std::size_t ci = 0; ci < sys.device_count(); ++ci) {
    if (card && ci != *card) continue;
    auto& dev = sys.device(ci);
    for (unsigned p = 0; p < dev.port_count(); ++p) {
      if (port && p != *port) continue;
      auto ps = read_port(dev, p);
      if (!ps) return report(ps.error(), "read port");
      if (!ps->module_present) {
        if (!port) continue;
        std::fprintf(stderr, "npo-link ddm: card %zu port %u has no module (no cable)\n", ci, p);
        return 1;
      }
      auto img = read_module_image(dev, p);
      if (!img) return report(img.error(), fmt::format("card {} port {}: module", ci, p));
      auto m = xcvr::decode_module(*img);
      if (!m) return report(m.error(), fmt::format("card {} port {}: decode", ci, p));
      if (c.json) {
        mods.push_back({{"card", ci}, {"port", p}, {"module", module_json(*m)}});
        continue;
      }
      fmt::print("card {} port {}: {} {} {} (SN {}), {}\n", ci, p, m->identifier_name, m->vendor_name, m->part_number,
                 m->serial_number, m->module_state ? m->module_state->name : std::string("state unknown"));
      fmt::print("  temperature {}  supply {}\n",
                 m->temperature_c ? fmt::format("{:.2f} C", *m->temperature_c) : std::string("not reported"),
                 m->supply_voltage_v ? fmt::format("{:.4f} V", *m->supply_voltage_v) : std::string("not reported"));
      for (const auto& l : m->lanes) {
        fmt::print("  lane {} (CMIS lane {}): bias {}  tx {}  rx {}\n", l.lane - 1, l.lane,
                   l.tx_bias_ma ? fmt::format("{:.3f} mA", *l.tx_bias_ma) : std::string("-"),
                   power_text(l.tx_power_mw, l.tx_power_dbm), power_text(l.rx_power_mw, l.rx_power_dbm));
      }
      // The card's DDM mirrors (registers.md §7.3), read with the port block: the same
      // monitors the firmware copied into BAR0, by physical lane (CMIS numbers them from 1).
      fmt::print("  card's DDM mirror in BAR0 (what LinkMonitor reads without the mailbox):\n");
      for (unsigned l = 0; l < ps->lanes.size(); ++l) {
        const auto& lc = ps->lanes[l];
        fmt::print("  lane {}: bias {:.3f} mA  tx {}  rx {}\n", l, lc.tx_bias_ma,
                   power_text(lc.tx_power_mw, lc.tx_power_dbm), power_text(lc.rx_power_mw, lc.rx_power_dbm));
      }
    }
  }
  if (c.json) print_json({{"backend", sys.uri()}, {"modules", mods}});
  return 0;
}

}  // namespace npo::tools::link
