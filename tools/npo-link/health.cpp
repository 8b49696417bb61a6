// SPDX-License-Identifier: Apache-2.0
// npo-link health --interval S: two snapshots S seconds apart (platform clock), then each
// port's state and each lane's verdict with its reasons.
#include <cstdint>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/output.hpp"
#include "link.hpp"

namespace npo::tools::link {

using nlohmann::json;

int health_once(System& sys, LinkMonitor& mon, const Common& c, double interval) {
  if (auto s0 = mon.snapshot(); !s0) return report(s0.error(), "snapshot");
  mon.sleep_ns(static_cast<std::uint64_t>(interval * 1e9));
  auto snap = mon.snapshot();
  if (!snap) return report(snap.error(), "snapshot");
  json ports = json::array();
  for (const auto& cp : snap->cards) {
    for (std::size_t i = 0; i < cp.ports.size(); ++i) {
      const auto& ps = cp.ports[i];
      const auto& h = cp.health[i];
      if (!listed(c, ps)) continue;
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
                           {"reasons", l.reasons}});
        }
        ports.push_back({{"card", cp.card},
                         {"port", ps.port},
                         {"state", std::string(port_state_name(h.state))},
                         {"reason", h.reason},
                         {"lanes", lanes}});
        continue;
      }
      fmt::print("card {} port {}: {} ({})\n", cp.card, ps.port, port_state_name(h.state), h.reason);
      for (const auto& l : h.lanes) {
        std::string why;
        for (const auto& r : l.reasons) why += fmt::format("{}{}", why.empty() ? "" : "; ", r);
        fmt::print("  lane {}: {:<8} {}\n", l.lane, lane_health_name(l.verdict), why);
      }
    }
  }
  if (c.json) {
    print_json({{"backend", sys.uri()}, {"interval_ns", snap->interval_ns}, {"ports", ports}});
  }
  return 0;
}

}  // namespace npo::tools::link
