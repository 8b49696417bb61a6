// SPDX-License-Identifier: Apache-2.0
// npo-link: port views shared by show and fec -- the raw port register words interpreted in
// one place, BER per lane, the JSON of a port -- and the tool's error line.
#include <string>

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
  return {{"card", card},
          {"port", ps.port},
          {"state", std::string(port_state_name(h.state))},
          {"reason", h.reason},
          {"link_state", std::string(link_state_name(ps.state))},
          {"module_present", ps.module_present},
          {"speed_gbps", ps.speed_gbps()},
          {"lane_count", ps.lane_count},
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
  if (ps.state != LinkState::kUp) return w;
  for (unsigned l = 0; l < ps.lanes.size(); ++l) {
    if (!lane_enabled(ps, l)) continue;
    const auto b = lane_ber(ps, h, l);
    if (b && (!w || *b > *w)) w = b;
  }
  return w;
}

bool listed(const Common& c, const PortStatus& ps) { return c.all || ps.module_present; }

void print_ports_json(System& sys, const LinkSnapshot& snap, const Common& c) {
  json ports = json::array();
  for (const auto& cp : snap.cards) {
    for (std::size_t i = 0; i < cp.ports.size(); ++i) {
      if (!listed(c, cp.ports[i])) continue;
      ports.push_back(port_json(sys, cp.card, cp.ports[i], cp.health[i]));
    }
  }
  print_json({{"backend", sys.uri()},
              {"timestamp_ns", snap.timestamp_ns},
              {"interval_ns", snap.interval_ns},
              {"ports", ports}});
}

void say_if_empty(std::size_t rows) {
  if (rows == 0) std::fprintf(stderr, "npo-link: no port has a module (--all lists every port)\n");
}

}  // namespace npo::tools::link
