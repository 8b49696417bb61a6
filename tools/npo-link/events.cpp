// SPDX-License-Identifier: Apache-2.0
// npo-link events: the link event log -- port state changes, lane verdict changes, modules
// and cards removed or inserted -- with time, card, port, lane, old and new state and the
// reason, as LinkMonitor sees them from one snapshot to the next (the library also logs each
// at level info, logger npo.optics). The first poll samples 2 intervals (LinkMonitor::sample)
// and reports what is wrong now and the flaps since the card's reset: the card keeps states and
// counters, not an event history, so that is all the past an observer can see.
#include <algorithm>
#include <cstdio>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/output.hpp"
#include "link.hpp"

namespace npo::tools::link {

using nlohmann::json;

namespace {

constexpr std::string_view kLegend =
    "\nTIME-S: the platform clock, s, of the snapshot that saw the change (as `platform clock` in --watch\n"
    "frame headers and timestamp_ns in JSON): emulated time since the emulator started on an in-process\n"
    "emu: backend, else the host's CLOCK_MONOTONIC, i.e. time since boot (emu-remote, vfio). A change is\n"
    "seen at the first poll after it (--watch S polls every S s). History: the card keeps states and\n"
    "counters, not past events. The first poll samples 2 intervals (0.5 s, or the --watch period if\n"
    "shorter) and lists what is wrong now (from -), lane verdicts that changed while sampling, and per\n"
    "port the flaps since the card's reset (flap - -> N, times unknown); later polls list each change, a\n"
    "flap as FLAP_COUNT old -> new.\n";

}  // namespace

int events_once(System& sys, LinkMonitor& mon, const Common& c) {
  auto snap = frame_snapshot(mon, c, 0);
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
  if (!c.json) print_legend_once(c, kLegend);
  return summarize(*snap, c).exit_status();
}

}  // namespace npo::tools::link
