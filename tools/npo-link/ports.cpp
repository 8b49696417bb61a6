// SPDX-License-Identifier: Apache-2.0
// npo-link: port views shared by show and fec -- the raw port register words interpreted in
// one place, BER per lane, the JSON of a port -- and the tool's error line.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <string>

#include <fmt/chrono.h>
#include <fmt/format.h>

#include "common/output.hpp"
#include "link.hpp"

namespace npo::tools::link {

using nlohmann::json;

int report(const Error& e, std::string_view what) { return fail(kTool, what, e); }

// ---- Port registers -------------------------------------------------------------------------

bool needs_bring_up(const PortStatus& ps) { return ps.module_present && ps.state != LinkState::kUp; }

bool lane_enabled(const PortStatus& ps, unsigned lane) { return ((ps.lane_enable >> lane) & 1u) != 0; }

bool lane_cdr_locked(const PortStatus& ps, unsigned lane) { return ((ps.lanes_up >> lane) & 1u) != 0; }

bool lane_carries_link(const PortStatus& ps, unsigned lane) {
  return ((lanes_in_use(ps) >> lane) & 1u) != 0 && ps.state == LinkState::kUp;
}

namespace {

/// PORT.LANE_ENABLE as the JSON shows it (a bitmap over physical lanes).
unsigned lane_enable_mask(const PortStatus& ps) { return ps.lane_enable; }

json fec_json(const LaneCounters& l) {
  json bins = json::array();
  for (auto b : l.fec_bins) bins.push_back(b);
  return {{"codewords", l.codewords},
          {"corrected", l.corrected},
          {"uncorrectable", l.uncorrectable},
          {"symbol_errors", l.symbol_errors},
          {"bins", bins}};
}

json lane_json(const PortStatus& ps, const PortHealth& h, unsigned lane) {
  const auto& l = ps.lanes[lane];
  json j = {{"lane", lane},
            {"in_use", lane_carries_link(ps, lane)},
            {"cdr_lock", lane_cdr_locked(ps, lane)},
            {"tx_power_mw", l.tx_power_mw},
            {"tx_power_dbm", or_null(l.tx_power_dbm)},
            {"rx_power_mw", l.rx_power_mw},
            {"rx_power_dbm", or_null(l.rx_power_dbm)},
            {"tx_bias_ma", l.tx_bias_ma},
            {"snr_db", l.snr_db},
            {"tx_eq", {{"pre", l.tx_eq.pre}, {"main", l.tx_eq.main}, {"post", l.tx_eq.post}}},
            {"fec", fec_json(l)},
            {"pre_fec_ber", or_null(lane_ber(ps, h, lane))}};
  for (const auto& r : h.lanes) {
    if (r.lane == lane) {
      j["verdict"] = std::string(lane_health_name(r.verdict));
      j["reasons"] = r.reasons;
    }
  }
  return j;
}

json port_json(System& sys, std::uint32_t card, const PortStatus& ps, const PortHealth& h) {
  json nb = nullptr;
  if (ps.neighbor_fabric_id) {
    nb = {{"card", or_null(card_of(sys, ps.neighbor_fabric_id))},
          {"port", or_null(ps.neighbor_port)},
          {"fabric_id", *ps.neighbor_fabric_id}};
  }
  json lanes = json::array();
  for (unsigned l = 0; l < ps.lanes.size(); ++l) lanes.push_back(lane_json(ps, h, l));
  // The link's state is the verdict's: "up" only when both ends are Up with lock; the card's
  // own STATUS.STATE is card_state. Speed and lanes of a link that is not up are 0.
  const std::string link_state =
      h.link_up ? "up" : (ps.state == LinkState::kUp ? "down" : std::string(link_state_name(ps.state)));
  return {{"card", card},
          {"port", ps.port},
          {"state", std::string(port_state_name(h.state))},
          {"reason", h.reason},
          {"link_state", link_state},
          {"link_up", h.link_up},
          {"card_state", std::string(link_state_name(ps.state))},
          {"module_present", ps.module_present},
          {"module_lost", h.module_lost},
          {"speed_gbps", h.link_up ? ps.speed_gbps() : 0.0},
          {"lane_count", h.link_up ? h.lane_count : 0u},
          {"lane_enable", lane_enable_mask(ps)},
          {"lane_rate_mbd", ps.lane_rate_mbd},
          {"modulation", ps.pam4 ? "PAM4" : "NRZ"},
          {"neighbor", nb},
          {"worst_pre_fec_ber", or_null(worst_ber(ps, h))},
          {"train_count", ps.train_count},
          {"flap_count", ps.flap_count},
          {"up_count", ps.up_count},
          {"coeff_updates", ps.coeff_updates},
          {"train_result",
           {{"code", ps.train_result.code},
            {"attempt", ps.train_result.attempt},
            {"failed_lanes", ps.train_result.failed_lanes}}},
          {"module_temp_c", or_null(ps.module_temp_c)},
          {"module_vcc_v", or_null(ps.module_vcc_v)},
          {"lanes", lanes}};
}

}  // namespace

// ---- Port views -----------------------------------------------------------------------------

std::optional<std::uint32_t> card_of(System& sys, std::optional<std::uint32_t> fid) {
  if (!fid) return std::nullopt;
  auto d = sys.device_by_fabric_id(*fid);
  if (!d) return std::nullopt;
  return (*d)->info().index;
}

std::string ber_text(const std::optional<double>& b) { return b ? fmt::format("{:.2e}", *b) : std::string("-"); }

std::optional<double> lane_ber(const PortStatus& ps, const PortHealth& h, unsigned lane) {
  for (const auto& l : h.lanes) {
    if (l.lane == lane && l.ber) return l.ber;
  }
  return ps.lanes[lane].pre_fec_ber;
}

std::optional<double> worst_ber(const PortStatus& ps, const PortHealth& h) {
  std::optional<double> w;
  if (!h.link_up) return w;
  for (unsigned l = 0; l < ps.lanes.size(); ++l) {
    if (!lane_enabled(ps, l)) continue;
    const auto b = lane_ber(ps, h, l);
    if (b && (!w || *b > *w)) w = b;
  }
  return w;
}

int print_ports_json(System& sys, const LinkSnapshot& snap, const Common& c) {
  json ports = json::array();
  json removed = json::array();
  for (const auto& cp : snap.cards) {
    if (!card_selected(c, cp.card)) continue;
    if (cp.removed) removed.push_back(cp.card);
    for (std::size_t i = 0; i < cp.ports.size(); ++i) {
      if (!selected(c, cp.card, cp.ports[i], cp.health[i])) continue;
      ports.push_back(port_json(sys, cp.card, cp.ports[i], cp.health[i]));
    }
  }
  const Summary sum = summarize(snap, c);
  print_doc(c, {{"backend", sys.uri()},
                {"timestamp_ns", snap.timestamp_ns},
                {"interval_ns", snap.interval_ns},
                {"ports", ports},
                {"removed_cards", removed},
                {"summary", sum.to_json()}});
  return sum.exit_status();
}

// ---- Selection, summary, exit status --------------------------------------------------------

std::optional<PortState> parse_state(std::string_view name) {
  for (auto st : {PortState::kHealthy, PortState::kDegraded, PortState::kFailed, PortState::kDisabled}) {
    const auto n = port_state_name(st);
    if (n.size() == name.size() &&
        std::equal(n.begin(), n.end(), name.begin(), [](char a, char b) { return a == std::toupper(b); })) {
      return st;
    }
  }
  return std::nullopt;
}

bool card_selected(const Common& c, std::uint32_t card) {
  return c.cards.empty() || std::find(c.cards.begin(), c.cards.end(), card) != c.cards.end();
}

std::size_t for_each_selected(
    const LinkSnapshot& snap, const Common& c, bool brief, const std::function<void(std::uint32_t card)>& on_removed,
    const std::function<void(std::uint32_t card, const PortStatus& ps, const PortHealth& h)>& on_port) {
  std::size_t hidden = 0;
  for (const auto& cp : snap.cards) {
    if (!card_selected(c, cp.card)) continue;
    if (cp.removed) {
      on_removed(cp.card);
      continue;
    }
    for (std::size_t i = 0; i < cp.ports.size(); ++i) {
      if (!selected(c, cp.card, cp.ports[i], cp.health[i])) continue;
      if (brief && cp.health[i].state == PortState::kHealthy) {
        ++hidden;
        continue;
      }
      on_port(cp.card, cp.ports[i], cp.health[i]);
    }
  }
  return hidden;
}

bool selected(const Common& c, std::uint32_t card, const PortStatus& ps, const PortHealth& h) {
  if (!card_selected(c, card)) return false;
  if (!c.ports.empty() && std::find(c.ports.begin(), c.ports.end(), ps.port) == c.ports.end()) return false;
  if (!c.states.empty() && std::find(c.states.begin(), c.states.end(), h.state) == c.states.end()) return false;
  // A port asked for by number is listed also without a module.
  return c.all || !c.ports.empty() || ps.module_present || h.module_lost;
}

std::size_t count_without_module(const LinkSnapshot& snap, const Common& c) {
  if (c.all || !c.ports.empty()) return 0;
  std::size_t n = 0;
  for (const auto& cp : snap.cards) {
    if (!card_selected(c, cp.card) || cp.removed) continue;
    for (std::size_t i = 0; i < cp.ports.size(); ++i) {
      const auto& h = cp.health[i];
      if (cp.ports[i].module_present || h.module_lost) continue;
      if (!c.states.empty() && std::find(c.states.begin(), c.states.end(), h.state) == c.states.end()) continue;
      ++n;
    }
  }
  return n;
}

void say_if_without_module(std::size_t n) {
  if (n != 0) fmt::print("{} port{} without a module not listed (--all shows them)\n", n, n == 1 ? "" : "s");
}

void Summary::add(std::uint32_t card, const PortStatus& ps, const PortHealth& h) {
  ++ports;
  ++by_state[static_cast<std::size_t>(h.state)];
  if (h.state == PortState::kDisabled && h.reason.starts_with("held down")) ++held_down;
  if (h.link_up) {
    for (unsigned l = 0; l < ps.lanes.size(); ++l) {
      if (!lane_carries_link(ps, l)) continue;
      const auto b = lane_ber(ps, h, l);
      if (b && (!worst_ber || *b > *worst_ber)) {
        worst_ber = b;
        worst_card = card;
        worst_port = ps.port;
        worst_lane = l;
      }
    }
  }
  if (ps.flap_count > 0) {
    ++flapped;
    if (ps.flap_count > most_flaps) {
      most_flaps = ps.flap_count;
      flap_card = card;
      flap_port = ps.port;
    }
  }
}

std::string Summary::line() const {
  std::string s = fmt::format("{} port{}: {} HEALTHY, {} DEGRADED, {} FAILED, {} DISABLED", ports,
                              ports == 1 ? "" : "s", by_state[0], by_state[1], by_state[2], by_state[3]);
  s += worst_ber ? fmt::format("; worst lane {:.2e} (card {} port {} lane {})", *worst_ber, worst_card, worst_port,
                               worst_lane)
                 : std::string("; worst lane -");
  s += flapped == 0
           ? std::string("; no port flapped")
           : fmt::format("; {} port{} flapped since reset (most: card {} port {}, {} flap{})", flapped,
                         flapped == 1 ? "" : "s", flap_card, flap_port, most_flaps, most_flaps == 1 ? "" : "s");
  if (held_down != 0) s += fmt::format("; {} held down by the flap policy", held_down);
  for (auto c : removed_cards) s += fmt::format("; card {} REMOVED", c);
  return s;
}

json Summary::to_json() const {
  json st = json::object();
  for (std::size_t i = 0; i < by_state.size(); ++i) {
    st[std::string(port_state_name(static_cast<PortState>(i)))] = by_state[i];
  }
  json worst = nullptr;
  if (worst_ber) {
    worst = {{"card", worst_card}, {"port", worst_port}, {"lane", worst_lane}, {"pre_fec_ber", *worst_ber}};
  }
  return {{"ports", ports},
          {"by_state", st},
          {"worst_lane", worst},
          {"flapped", flapped},
          {"held_down", held_down},
          {"removed_cards", removed_cards},
          {"exit_status", exit_status()}};
}

int Summary::exit_status() const {
  if (by_state[static_cast<std::size_t>(PortState::kFailed)] != 0 || held_down != 0 || !removed_cards.empty()) {
    return kExitFailed;
  }
  if (by_state[static_cast<std::size_t>(PortState::kDegraded)] != 0) return kExitDegraded;
  return kExitHealthy;
}

Summary summarize(const LinkSnapshot& snap, const Common& c) {
  Summary s;
  for (const auto& cp : snap.cards) {
    if (!card_selected(c, cp.card)) continue;
    if (cp.removed) s.add_removed(cp.card);
    for (std::size_t i = 0; i < cp.ports.size(); ++i) {
      if (selected(c, cp.card, cp.ports[i], cp.health[i])) s.add(cp.card, cp.ports[i], cp.health[i]);
    }
  }
  return s;
}

bool brief_view(const Common& c, const Summary& s) { return !c.full && !c.filtered() && s.ports > kFullListMax; }

// ---- Watch frames ---------------------------------------------------------------------------

namespace {
std::string utc_now() {
  const auto now = std::chrono::system_clock::now();
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  return fmt::format("{:%Y-%m-%dT%H:%M:%S}.{:03}Z", std::chrono::floor<std::chrono::seconds>(now), ms);
}
}  // namespace

Result<LinkSnapshot> frame_snapshot(LinkMonitor& mon, const Common& c, double interval_s) {
  if (c.frame != 0) return mon.snapshot();
  // Unset: kSampleIntervalS, or a shorter --watch period (the watch's own interval).
  const double s = interval_s > 0 ? interval_s : (c.watch > 0 ? std::min(c.watch, kSampleIntervalS) : kSampleIntervalS);
  return mon.sample(static_cast<std::uint64_t>(s * 1e9));
}

void print_frame_header(const Common& c, std::string_view sub, std::uint64_t platform_ns) {
  if (c.watch <= 0 || c.json) return;
  fmt::print("--- npo-link {} frame {}  {}  platform clock {:.6f} s ---\n", sub, c.frame + 1, utc_now(),
             static_cast<double>(platform_ns) / 1e9);
}

void print_doc(const Common& c, json j) {
  if (c.watch > 0) {
    j["time"] = utc_now();
    j["frame"] = c.frame + 1;
    std::puts(j.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
  } else {
    print_json(j);
  }
}

void print_legend_once(const Common& c, std::string_view legend) {
  if (c.frame == 0) fmt::print("{}", legend);
}

void hint_if_untrained(const LinkSnapshot& snap, const Common& c) {
  std::size_t with_module = 0, enabled = 0;
  for (const auto& cp : snap.cards) {
    if (!card_selected(c, cp.card)) continue;
    for (const auto& ps : cp.ports) {
      if (!ps.module_present) continue;
      ++with_module;
      enabled += ps.enabled ? 1 : 0;
    }
  }
  if (with_module != 0 && enabled == 0 && c.frame == 0) {
    std::fprintf(stderr,
                 "npo-link: no port is enabled: the links have not been trained (reading never trains them). Train "
                 "with `npo-link train`, or add --train to train first in this process (an in-process emu: backend "
                 "starts every process with its links down).\n");
  }
}

void say_if_empty(std::size_t rows) {
  // MODULE_PRESENT = 0 is also a port cabled to an optical-switch port not cross-connected yet
  // (a fresh pool): the registers cannot tell the two apart.
  if (rows == 0) {
    std::fprintf(stderr,
                 "npo-link: no port has a module (--all lists every port), or every cabled port ends at an "
                 "optical-switch port with no cross-connect yet (dark; it shows no module)\n");
  }
}

}  // namespace npo::tools::link
