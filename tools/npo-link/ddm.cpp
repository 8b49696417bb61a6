// SPDX-License-Identifier: Apache-2.0
// npo-link ddm [--card N] [--port P] [--state S]: each live module read over the mailbox and
// decoded (CMIS) with its alarm/warning thresholds and the flags it raised (as `ethtool -m`
// lists them), then the card's DDM mirrors of the same lanes in BAR0. A module that goes away
// (the very event a --watch is for) is reported as "module removed" and the watch goes on.
#include <algorithm>
#include <cstdio>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "common/output.hpp"
#include "link.hpp"

namespace npo::tools::link {

using nlohmann::json;

namespace {

// A monitor's thresholds as one row: "high alarm / high warning / low warning / low alarm".
void print_threshold(std::string_view what, const std::optional<xcvr::ThresholdSet>& t, std::string_view fmt_spec,
                     std::string_view unit) {
  if (!t) {
    fmt::print("    {:<13} not advertised\n", what);
    return;
  }
  auto v = [&](double x) { return fmt::format(fmt::runtime(fmt_spec), x); };
  fmt::print("    {:<13} {:>10} {:>10} {:>10} {:>10}  {}\n", what, v(t->high_alarm), v(t->high_warning),
             v(t->low_warning), v(t->low_alarm), unit);
}

// Severity of a raised lane flag: 2 alarm / loss / fault, 1 warning.
int severity(xcvr::LaneFlag f) {
  const std::string_view n = xcvr::lane_flag_name(f);
  return n.find("warning") != std::string_view::npos ? 1 : 2;
}
int severity(xcvr::ModuleFlag f) {
  const std::string_view n = xcvr::module_flag_name(f);
  return n.find("warning") != std::string_view::npos ? 1 : 2;
}

json thresholds_json(const xcvr::Thresholds& t) {
  auto one = [](const std::optional<xcvr::ThresholdSet>& s) -> json {
    if (!s) return nullptr;
    return {{"high_alarm", s->high_alarm},
            {"high_warning", s->high_warning},
            {"low_warning", s->low_warning},
            {"low_alarm", s->low_alarm}};
  };
  return {{"temperature_c", one(t.temperature_c)},
          {"supply_voltage_v", one(t.supply_voltage_v)},
          {"tx_power_mw", one(t.tx_power_mw)},
          {"rx_power_mw", one(t.rx_power_mw)},
          {"tx_bias_ma", one(t.tx_bias_ma)}};
}

}  // namespace

int ddm_once(System& sys, LinkMonitor& mon, const Common& c) {
  // --card / --port select cards and ports; a selected port must exist.
  for (auto card : c.cards) {
    if (card >= sys.device_count()) {
      std::fprintf(stderr, "npo-link ddm: card %u outside 0..%zu\n", card, sys.device_count() - 1);
      return kExitError;
    }
  }
  for (auto port : c.ports) {
    const auto& dev = sys.device(c.cards.empty() ? 0 : c.cards.front());
    if (dev.info().removed) continue;  // removed before the open: no ports, shown removed below
    const unsigned np = dev.port_count();
    if (port >= np) {
      std::fprintf(stderr, "npo-link ddm: port %u outside 0..%u\n", port, np - 1);
      return kExitError;
    }
  }
  // --state needs each port's verdict: one snapshot (registers only; no mailbox).
  std::optional<LinkSnapshot> snap;
  if (!c.states.empty()) {
    auto sn = mon.snapshot();
    if (!sn) return report(sn.error(), "snapshot");
    snap = std::move(*sn);
  }
  auto state_ok = [&](std::size_t ci, unsigned p) {
    if (!snap) return true;
    for (const auto& cp : snap->cards) {
      if (cp.card != ci || cp.removed || p >= cp.health.size()) continue;
      return std::find(c.states.begin(), c.states.end(), cp.health[p].state) != c.states.end();
    }
    return false;
  };
  print_frame_header(c, "ddm", mon.now_ns());
  json mods = json::array();
  json removed_cards = json::array();
  int worst = 0;  // 0 nothing raised, 1 a warning, 2 an alarm / LOS / fault / module removed
  bool error = false;
  std::size_t shown = 0, lost = 0;
  // Which flags were raised, by where they are (the summary names them: a lane's rx_los is an
  // alarm while the module's own flags are none).
  std::set<std::string> lane_raised, module_raised;
  for (std::size_t ci = 0; ci < sys.device_count(); ++ci) {
    if (!card_selected(c, static_cast<std::uint32_t>(ci))) continue;
    auto& dev = sys.device(ci);
    if (dev.info().removed) {
      // Removed before the open (a shared npo-emud's surprise removal): as one removed now.
      removed_cards.push_back(ci);
      if (!c.json) fmt::print("card {}: REMOVED (config space reads ffff:ffff)\n", ci);
      worst = 2;
      continue;
    }
    // The cages' power and the modules' power class (mailbox POWER_READ; absent on firmware
    // without it): one read per card.
    const auto cage_power = dev.module_power();
    for (unsigned p = 0; p < dev.port_count(); ++p) {
      if (!c.ports.empty() && std::find(c.ports.begin(), c.ports.end(), p) == c.ports.end()) continue;
      if (!state_ok(ci, p)) continue;
      const ModulePower* mp =
          cage_power && p < cage_power->size() && (*cage_power)[p].present ? &(*cage_power)[p] : nullptr;
      auto ps = read_port(dev, p);
      if (!ps) {
        if (ps.error().code() == Code::kUnavailable) {
          // Card removed: mark it and go on with the others.
          removed_cards.push_back(ci);
          if (!c.json) fmt::print("card {}: REMOVED ({})\n", ci, ps.error().message());
          worst = 2;
          break;
        }
        report(ps.error(), fmt::format("card {} port {}: read port", ci, p));
        error = true;
        continue;
      }
      // A port that had a module (it came up, or a module change is latched) and has none is
      // a removed module: always shown. A port that never had one is skipped, or an error when
      // asked for by number outside a watch.
      const bool had = ps->up_count > 0 || ps->events.module_change;
      std::optional<std::vector<std::byte>> img;
      std::optional<Error> img_error;
      if (ps->module_present) {
        auto r = read_module_image(dev, p);
        if (r) {
          img = std::move(*r);
        } else {
          img_error = r.error();
        }
      }
      const bool gone = !ps->module_present || (img_error && img_error->code() == Code::kNotFound);
      if (gone) {
        if (!had && c.ports.empty()) continue;
        if (!had && c.watch <= 0) {
          std::fprintf(stderr, "npo-link ddm: card %zu port %u has no module (no cable)\n", ci, p);
          return kExitError;
        }
        ++lost;
        worst = std::max(worst, had ? 2 : 0);
        if (c.json) {
          mods.push_back({{"card", ci}, {"port", p}, {"module", nullptr}, {"module_removed", had}});
        } else {
          fmt::print("card {} port {}: {}\n", ci, p, had ? "module removed" : "no module");
        }
        continue;
      }
      if (img_error) {
        report(*img_error, fmt::format("card {} port {}: module", ci, p));
        error = true;
        continue;
      }
      auto m = xcvr::decode_module(*img);
      if (!m) {
        report(m.error(), fmt::format("card {} port {}: decode", ci, p));
        error = true;
        continue;
      }
      ++shown;
      for (const auto& l : m->lanes) {
        for (auto f : l.flags) {
          worst = std::max(worst, severity(f));
          lane_raised.emplace(xcvr::lane_flag_name(f));
        }
      }
      for (auto f : m->module_flags) {
        worst = std::max(worst, severity(f));
        module_raised.emplace(xcvr::module_flag_name(f));
      }
      if (c.json) {
        mods.push_back({{"card", ci},
                        {"port", p},
                        {"module", module_json(*m)},
                        {"module_removed", false},
                        {"thresholds", thresholds_json(m->thresholds)},
                        {"power", mp ? nlohmann::json{{"power_class", mp->power_class},
                                                      {"max_power_w", mp->max_power_w},
                                                      {"draw_w", mp->draw_mw / 1000.0},
                                                      {"low_power", mp->low_power},
                                                      {"temperature_c", or_null(mp->temp_c)}}
                                     : nlohmann::json(nullptr)}});
        continue;
      }
      fmt::print("card {} port {}: {} {} {} (SN {}), {}\n", ci, p, m->identifier_name, m->vendor_name, m->part_number,
                 m->serial_number, m->module_state ? m->module_state->name : std::string("state unknown"));
      fmt::print("  temperature {}  supply {}\n",
                 m->temperature_c ? fmt::format("{:.2f} C", *m->temperature_c) : std::string("not reported"),
                 m->supply_voltage_v ? fmt::format("{:.4f} V", *m->supply_voltage_v) : std::string("not reported"));
      if (mp) {
        fmt::print("  power: class {} (max {:.2f} W), cage draw {:.3f} W, {}\n", mp->power_class, mp->max_power_w,
                   mp->draw_mw / 1000.0, mp->low_power ? "low power mode" : "powered up");
      }
      std::string mflags;
      for (auto f : m->module_flags)
        mflags += fmt::format("{}{}", mflags.empty() ? "" : ", ", xcvr::module_flag_name(f));
      fmt::print("  module flags raised: {}\n", mflags.empty() ? "none" : mflags);
      fmt::print("  thresholds (CMIS page 02h):\n    {:<13} {:>10} {:>10} {:>10} {:>10}\n", "", "high alarm",
                 "high warn", "low warn", "low alarm");
      print_threshold("temperature", m->thresholds.temperature_c, "{:.2f}", "C");
      print_threshold("supply", m->thresholds.supply_voltage_v, "{:.4f}", "V");
      print_threshold("tx power", m->thresholds.tx_power_mw, "{:.4f}", "mW");
      print_threshold("rx power", m->thresholds.rx_power_mw, "{:.4f}", "mW");
      print_threshold("tx bias", m->thresholds.tx_bias_ma, "{:.3f}", "mA");
      for (const auto& l : m->lanes) {
        std::string flags;
        for (auto f : l.flags) flags += fmt::format("{}{}", flags.empty() ? "" : ", ", xcvr::lane_flag_name(f));
        fmt::print("  lane {} (CMIS lane {}): bias {}  tx {}  rx {}  flags: {}\n", l.lane - 1, l.lane,
                   l.tx_bias_ma ? fmt::format("{:.3f} mA", *l.tx_bias_ma) : std::string("-"),
                   power_text(l.tx_power_mw, l.tx_power_dbm), power_text(l.rx_power_mw, l.rx_power_dbm),
                   flags.empty() ? "none" : flags);
      }
      // The card's DDM mirrors (registers.md §7.3), read with the port block: the same
      // monitors the firmware copied into BAR0, by physical lane (CMIS numbers them from 1).
      // They were sampled at another instant than the module image (read_port above runs
      // before read_module_image): live monitors move, so the last digits may differ.
      fmt::print(
          "  card's DDM mirror in BAR0 (what LinkMonitor reads without the mailbox; sampled at another instant, just "
          "before the mailbox read, so the last digits may differ):\n");
      for (unsigned l = 0; l < ps->lanes.size(); ++l) {
        const auto& lc = ps->lanes[l];
        fmt::print("  lane {}: bias {:.3f} mA  tx {}  rx {}\n", l, lc.tx_bias_ma,
                   power_text(lc.tx_power_mw, lc.tx_power_dbm), power_text(lc.rx_power_mw, lc.rx_power_dbm));
      }
    }
  }
  const int status = error ? kExitError : worst == 2 ? kExitFailed : worst == 1 ? kExitDegraded : kExitHealthy;
  if (c.json) {
    print_doc(c, {{"backend", sys.uri()},
                  {"modules", mods},
                  {"removed_cards", removed_cards},
                  {"summary",
                   {{"modules", shown},
                    {"removed", lost},
                    {"lane_flags", lane_raised},
                    {"module_flags", module_raised},
                    {"exit_status", status}}}});
  } else {
    // "flags raised: alarm (lane flags rx_los, rx_cdr_lol; no module flag)": the level, and
    // where it comes from, so it does not read as contradicting "module flags raised: none".
    std::vector<std::string> where;
    if (!lane_raised.empty()) where.push_back(fmt::format("lane flags {}", fmt::join(lane_raised, ", ")));
    if (!module_raised.empty()) {
      where.push_back(fmt::format("module flags {}", fmt::join(module_raised, ", ")));
    } else if (!lane_raised.empty()) {
      where.emplace_back("no module flag");
    }
    if (lost != 0) where.emplace_back("module removed");
    if (!removed_cards.empty()) where.emplace_back("card removed");
    fmt::print("\n{} module{} decoded, {} removed{}; flags raised: {}{}\n", shown, shown == 1 ? "" : "s", lost,
               removed_cards.empty() ? "" : fmt::format(", {} card(s) removed", removed_cards.size()),
               worst == 2   ? "alarm"
               : worst == 1 ? "warning"
                            : "none",
               worst == 0 || where.empty() ? std::string() : fmt::format(" ({})", fmt::join(where, "; ")));
  }
  return status;
}

}  // namespace npo::tools::link
