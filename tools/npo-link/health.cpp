// SPDX-License-Identifier: Apache-2.0
// npo-link health --interval S: a first snapshot (counters as history), then as many intervals
// of S seconds (platform clock) as the verdicts' hysteresis needs to worsen (2), then each
// port's state and each lane's verdict with its reasons (LinkMonitor::sample). Later --watch
// frames take two snapshots S seconds apart.
#include <cstdint>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/output.hpp"
#include "link.hpp"

namespace npo::tools::link {

using nlohmann::json;

int health_once(System& sys, LinkMonitor& mon, const Common& c, double interval) {
  if (c.frame != 0) {
    if (auto s0 = mon.snapshot(); !s0) return report(s0.error(), "snapshot");
  }
  auto snap = c.frame != 0 ? (mon.sleep_ns(static_cast<std::uint64_t>(interval * 1e9)), mon.snapshot())
                           : frame_snapshot(mon, c, interval);
  if (!snap) return report(snap.error(), "snapshot");
  hint_if_untrained(*snap, c);
  const Summary sum = summarize(*snap, c);
  const bool brief = brief_view(c, sum);
  print_frame_header(c, "health", snap->timestamp_ns);
  json ports = json::array();
  json removed = json::array();
  const std::size_t hidden = for_each_selected(
      *snap, c, brief && !c.json,
      [&](std::uint32_t card) {
        removed.push_back(card);
        if (!c.json) fmt::print("card {}: REMOVED (card removed: its ports cannot be read)\n", card);
      },
      [&](std::uint32_t card, const PortStatus& ps, const PortHealth& h) {
        if (c.json) {
          json lanes = json::array();
          for (const auto& l : h.lanes) {
            lanes.push_back({{"lane", l.lane},
                             {"verdict", std::string(lane_health_name(l.verdict))},
                             {"raw", std::string(lane_health_name(l.raw))},
                             {"pre_fec_ber", or_null(l.ber)},
                             {"baseline_ber", or_null(l.baseline_ber)},
                             {"tail_codewords", l.tail_codewords},
                             {"uncorrectable", l.uncorrectable},
                             {"reasons", l.reasons},
                             {"verdict_reason", l.verdict_reason}});
          }
          ports.push_back({{"card", card},
                           {"port", ps.port},
                           {"state", std::string(port_state_name(h.state))},
                           {"reason", h.reason},
                           {"link_up", h.link_up},
                           {"lanes", lanes}});
          return;
        }
        fmt::print("card {} port {}: {} ({})\n", card, ps.port, port_state_name(h.state), h.reason);
        for (const auto& l : h.lanes) {
          std::string why;
          for (const auto& r : l.reasons) why += fmt::format("{}{}", why.empty() ? "" : "; ", r);
          fmt::print("  lane {}: {:<8} {}\n", l.lane, lane_health_name(l.verdict), why);
        }
      });
  if (c.json) {
    print_doc(c, {{"backend", sys.uri()},
                  {"timestamp_ns", snap->timestamp_ns},
                  {"interval_ns", snap->interval_ns},
                  {"ports", ports},
                  {"removed_cards", removed},
                  {"summary", sum.to_json()}});
  } else {
    if (hidden != 0) fmt::print("({} HEALTHY ports not listed; --full lists every port)\n", hidden);
    if (sum.ports != 0 || !sum.removed_cards.empty() || c.filtered()) fmt::print("\n{}\n", sum.line());
  }
  return sum.exit_status();
}

}  // namespace npo::tools::link
