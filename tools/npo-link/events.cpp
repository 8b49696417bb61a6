// SPDX-License-Identifier: Apache-2.0
// npo-link events: the link event log -- port state changes, lane verdict changes, modules
// and cards removed or inserted -- with time, card, port, lane, old and new state and the
// reason, as LinkMonitor sees them from one snapshot to the next (the library also logs each
// at level info, logger npo.optics). The first poll reports what is already wrong.
#include <algorithm>
#include <cstdio>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/output.hpp"
#include "link.hpp"

namespace npo::tools::link {

using nlohmann::json;

int events_once(System& sys, LinkMonitor& mon, const Common& c) {
  auto snap = mon.snapshot();
  if (!snap) return report(snap.error(), "snapshot");
  if (c.frame == 0 && !c.json) {
    fmt::print("{:>14}  {:>4} {:>4} {:>4}  {:<6} {:<11}    {:<11}  {}\n", "TIME-S", "CARD", "PORT", "LANE", "WHAT",
               "FROM", "TO", "REASON");
  }
  for (const auto& e : snap->events) {
    if (!card_selected(c, e.card)) continue;
    if (e.port && !c.ports.empty() && std::find(c.ports.begin(), c.ports.end(), *e.port) == c.ports.end()) continue;
    if (!c.states.empty() && e.what == "port") {
      const auto to = parse_state(e.to);
      if (!to || std::find(c.states.begin(), c.states.end(), *to) == c.states.end()) continue;
    }
    if (c.json) {
      // One compact object per event (JSON Lines), also without --watch.
      json j = {{"timestamp_ns", e.timestamp_ns},
                {"card", e.card},
                {"port", or_null(e.port)},
                {"lane", or_null(e.lane)},
                {"what", e.what},
                {"from", e.from},
                {"to", e.to},
                {"reason", e.reason}};
      std::puts(j.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
      continue;
    }
    fmt::print("{:>14.6f}  {:>4} {:>4} {:>4}  {:<6} {:<11} -> {:<11}  {}\n", static_cast<double>(e.timestamp_ns) / 1e9,
               e.card, e.port ? fmt::format("{}", *e.port) : "-", e.lane ? fmt::format("{}", *e.lane) : "-", e.what,
               e.from, e.to, e.reason);
  }
  (void)sys;
  return summarize(*snap, c).exit_status();
}

}  // namespace npo::tools::link
