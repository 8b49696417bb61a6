// SPDX-License-Identifier: Apache-2.0
// npo-link: optical link tool. `decode FILE` decodes a transceiver EEPROM dump (raw bytes as
// `ethtool -m IF raw on` writes them, `ethtool -m IF hex on` text, or a tests/data/eeprom .hex
// file) into an ethtool-like listing or JSON. The link subcommands (show, ddm, fec, prbs, train,
// health) work on live cards of a backend (default emu:mesh8). Uses only the public npo-hal API.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "npo/hal/error.hpp"
#include "npo/hal/link_health.hpp"
#include "npo/hal/link_monitor.hpp"
#include "npo/hal/link_training.hpp"
#include "npo/hal/port.hpp"
#include "npo/hal/system.hpp"
#include "npo/hal/transceiver.hpp"
#include "npo/hal/xcvr_decode.hpp"

namespace {

using nlohmann::json;
using npo::xcvr::DecodedModule;

json opt(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

json thresholds_json(const std::optional<npo::xcvr::ThresholdSet>& t) {
  if (!t) return nullptr;
  return {{"high_alarm", t->high_alarm},
          {"low_alarm", t->low_alarm},
          {"high_warning", t->high_warning},
          {"low_warning", t->low_warning}};
}

json module_json(const DecodedModule& m) {
  json lanes = json::array();
  for (const auto& l : m.lanes) {
    json flags = json::array();
    for (auto f : l.flags) flags.push_back(std::string(npo::xcvr::lane_flag_name(f)));
    lanes.push_back({{"lane", l.lane},
                     {"tx_bias_ma", opt(l.tx_bias_ma)},
                     {"tx_power_mw", opt(l.tx_power_mw)},
                     {"tx_power_dbm", opt(l.tx_power_dbm)},
                     {"rx_power_mw", opt(l.rx_power_mw)},
                     {"rx_power_dbm", opt(l.rx_power_dbm)},
                     {"flags", flags}});
  }
  json apps = json::array();
  for (const auto& a : m.applications) {
    apps.push_back({{"app_sel", a.app_sel},
                    {"host_interface_id", a.host_interface_id},
                    {"host_interface", a.host_interface},
                    {"media_interface_id", a.media_interface_id},
                    {"media_interface", a.media_interface},
                    {"host_lane_count", a.host_lane_count},
                    {"media_lane_count", a.media_lane_count},
                    {"host_lane_assignment", a.host_lane_assignment}});
  }
  json pages = json::array();
  for (auto p : m.pages) pages.push_back(fmt::format("{:02X}h", p));
  json mflags = json::array();
  for (auto f : m.module_flags) mflags.push_back(std::string(npo::xcvr::module_flag_name(f)));
  json state = nullptr;
  if (m.module_state) state = {{"code", m.module_state->code}, {"name", m.module_state->name}};
  json media = nullptr;
  if (m.media_type) media = {{"code", *m.media_type}, {"name", m.media_type_name}};
  return {
      {"spec", std::string(npo::xcvr::spec_name(m.spec))},
      {"spec_revision", m.spec_revision},
      {"identifier",
       {{"code", m.identifier}, {"hex", fmt::format("0x{:02x}", m.identifier)}, {"name", m.identifier_name}}},
      {"vendor_name", m.vendor_name},
      {"vendor_oui", m.vendor_oui},
      {"part_number", m.part_number},
      {"serial_number", m.serial_number},
      {"revision", m.revision},
      {"date_code", m.date_code},
      {"manufacture_date", m.manufacture_date ? json(*m.manufacture_date) : json(nullptr)},
      {"module_state", state},
      {"flat_memory", m.flat_memory},
      {"pages", pages},
      {"ignored_bytes", m.ignored_bytes},
      {"power_class", m.power_class ? json(*m.power_class) : json(nullptr)},
      {"max_power_w", opt(m.max_power_w)},
      {"media_type", media},
      {"media", m.media_type_name},
      {"passive_copper", m.passive_copper},
      {"applications", apps},
      {"active_app_sel", m.active_app_sel ? json(*m.active_app_sel) : json(nullptr)},
      {"media_lane_count", m.media_lane_count},
      {"media_lane_source", m.media_lane_source},
      {"monitors_valid", m.monitors_valid},
      {"rx_power_type", m.rx_power_is_average ? "average" : "oma"},
      {"temperature_c", opt(m.temperature_c)},
      {"supply_voltage_v", opt(m.supply_voltage_v)},
      {"module_flags", mflags},
      {"lanes", lanes},
      {"thresholds",
       {{"temperature_c", thresholds_json(m.thresholds.temperature_c)},
        {"supply_voltage_v", thresholds_json(m.thresholds.supply_voltage_v)},
        {"tx_power_mw", thresholds_json(m.thresholds.tx_power_mw)},
        {"tx_bias_ma", thresholds_json(m.thresholds.tx_bias_ma)},
        {"rx_power_mw", thresholds_json(m.thresholds.rx_power_mw)}}},
      {"checksums_valid", m.checksums_valid ? json(*m.checksums_valid) : json(nullptr)},
      {"notes", m.notes},
  };
}

// ---- Text listing, in the manner of `ethtool -m` -------------------------------------------

void line(std::string_view name, std::string_view value) { fmt::print("\t{:<41} : {}\n", name, value); }

std::string power_text(const std::optional<double>& mw, const std::optional<double>& dbm) {
  if (!mw) return "not reported";
  if (!dbm) return fmt::format("{:.4f} mW / no light (dBm undefined)", *mw);
  return fmt::format("{:.4f} mW / {:.2f} dBm", *mw, *dbm);
}

void print_thresholds(std::string_view what, const std::optional<npo::xcvr::ThresholdSet>& t,
                      std::string (*fmt_value)(double)) {
  if (!t) return;
  line(fmt::format("{} high alarm threshold", what), fmt_value(t->high_alarm));
  line(fmt::format("{} low alarm threshold", what), fmt_value(t->low_alarm));
  line(fmt::format("{} high warning threshold", what), fmt_value(t->high_warning));
  line(fmt::format("{} low warning threshold", what), fmt_value(t->low_warning));
}

std::string fmt_ma(double v) { return fmt::format("{:.3f} mA", v); }
std::string fmt_mw(double v) { return power_text(v, npo::xcvr::mw_to_dbm(v)); }
std::string fmt_c(double v) { return fmt::format("{:.2f} degrees C / {:.2f} degrees F", v, v * 9.0 / 5.0 + 32.0); }
std::string fmt_v(double v) { return fmt::format("{:.4f} V", v); }

void print_text(const DecodedModule& m, const std::string& file) {
  fmt::print("npo-link decode {}\n", file);
  line("Identifier", fmt::format("0x{:02x} ({})", m.identifier, m.identifier_name));
  const std::string_view spec = m.spec == npo::xcvr::Spec::kCmis      ? "CMIS"
                                : m.spec == npo::xcvr::Spec::kSff8636 ? "SFF-8636"
                                                                      : "SFF-8472";
  line("Management interface", fmt::format("{} (revision {})", spec, m.spec_revision));
  line("Vendor name", m.vendor_name);
  line("Vendor OUI", m.vendor_oui);
  line("Vendor PN", m.part_number);
  line("Vendor rev", m.revision);
  line("Vendor SN", m.serial_number);
  line("Date code", m.manufacture_date ? fmt::format("{} ({})", m.date_code, *m.manufacture_date) : m.date_code);
  if (m.module_state) line("Module State", fmt::format("0x{:02x} ({})", m.module_state->code, m.module_state->name));
  std::string pages;
  for (auto p : m.pages) pages += fmt::format("{}{:02X}h", pages.empty() ? "" : " ", p);
  if (m.spec != npo::xcvr::Spec::kSff8472) line("Memory model", m.flat_memory ? "flat" : "paged");
  line("Pages decoded", pages);
  if (m.power_class) {
    line("Power class", m.max_power_w ? fmt::format("{} (max {:.2f} W)", *m.power_class, *m.max_power_w)
                                      : fmt::format("{}", *m.power_class));
  }
  line("Media", m.media_type ? fmt::format("0x{:02x} ({})", *m.media_type, m.media_type_name) : m.media_type_name);
  for (const auto& a : m.applications) {
    line(fmt::format("Application {}", a.app_sel),
         fmt::format("host 0x{:02x} ({}) x{} / media 0x{:02x} ({}) x{}", a.host_interface_id, a.host_interface,
                     a.host_lane_count, a.media_interface_id, a.media_interface, a.media_lane_count));
  }
  line("Media lanes in use",
       m.active_app_sel ? fmt::format("{} (AppSel {}, {})", m.media_lane_count, *m.active_app_sel, m.media_lane_source)
                        : fmt::format("{} ({})", m.media_lane_count, m.media_lane_source));
  line("Monitors", m.monitors_valid ? "reported" : "not reported");
  line("Module temperature", m.temperature_c ? fmt_c(*m.temperature_c) : "not reported");
  line("Module voltage", m.supply_voltage_v ? fmt_v(*m.supply_voltage_v) : "not reported");
  // One line per lane and monitor the module reports; one line in all when it reports none.
  bool bias = false, tx = false, rx = false;
  for (const auto& l : m.lanes) {
    bias = bias || l.tx_bias_ma.has_value();
    tx = tx || l.tx_power_mw.has_value();
    rx = rx || l.rx_power_mw.has_value();
  }
  if (!bias && !tx && !rx) line("Lane monitors", "not reported");
  for (const auto& l : m.lanes) {
    if (bias) {
      line(fmt::format("Laser tx bias current (Lane {})", l.lane),
           l.tx_bias_ma ? fmt_ma(*l.tx_bias_ma) : "not reported");
    }
  }
  for (const auto& l : m.lanes) {
    if (tx)
      line(fmt::format("Transmit avg optical power (Lane {})", l.lane), power_text(l.tx_power_mw, l.tx_power_dbm));
  }
  const std::string_view rx_kind = m.rx_power_is_average ? "Rcvr signal avg optical power" : "Rcvr signal OMA";
  for (const auto& l : m.lanes) {
    if (rx) line(fmt::format("{} (Lane {})", rx_kind, l.lane), power_text(l.rx_power_mw, l.rx_power_dbm));
  }
  if (m.lane_flags) {
    for (const auto& l : m.lanes) {
      std::string f;
      for (auto x : l.flags) f += fmt::format("{}{}", f.empty() ? "" : ", ", npo::xcvr::lane_flag_name(x));
      line(fmt::format("Flags (Lane {})", l.lane), f.empty() ? "none" : f);
    }
  }
  std::string mf;
  for (auto x : m.module_flags) mf += fmt::format("{}{}", mf.empty() ? "" : ", ", npo::xcvr::module_flag_name(x));
  if (m.monitors_valid) line("Module flags", mf.empty() ? "none" : mf);
  print_thresholds("Laser bias current", m.thresholds.tx_bias_ma, fmt_ma);
  print_thresholds("Laser output power", m.thresholds.tx_power_mw, fmt_mw);
  print_thresholds("Module temperature", m.thresholds.temperature_c, fmt_c);
  print_thresholds("Module voltage", m.thresholds.supply_voltage_v, fmt_v);
  print_thresholds("Laser rx power", m.thresholds.rx_power_mw, fmt_mw);
  if (m.checksums_valid) line("Checksums", *m.checksums_valid ? "valid" : "INVALID");
  for (const auto& n : m.notes) line("Note", n);
}

int decode(const std::string& file, bool as_json) {
  auto bytes = npo::xcvr::load_dump_file(file);
  if (!bytes) {
    std::fprintf(stderr, "npo-link: %s\n", bytes.error().to_string().c_str());
    return 1;
  }
  auto m = npo::xcvr::decode_module(*bytes);
  if (!m) {
    std::fprintf(stderr, "npo-link: %s: %s\n", file.c_str(), m.error().to_string().c_str());
    return 1;
  }
  if (as_json) {
    json j = module_json(*m);
    j["file"] = file;
    std::puts(j.dump(2, ' ', false, json::error_handler_t::replace).c_str());
  } else {
    print_text(*m, file);
  }
  return 0;
}

// ---- Live subcommands ----------------------------------------------------------------------

/// The default backend: $NPO_BACKEND if set (as npo-smi), else emu:mesh8.
std::string default_backend() {
  const char* env = std::getenv("NPO_BACKEND");
  return env != nullptr && *env != '\0' ? std::string(env) : std::string(npo::kDefaultUri);
}

struct Common {
  std::string backend = default_backend();
  bool json = false;
  double watch = 0;    ///< seconds between repeats; 0: run once
  unsigned count = 0;  ///< repeats with --watch; 0: until interrupted
  bool all = false;    ///< include ports without a module
};

void add_common(CLI::App* s, Common& c) {
  s->add_option(
      "--backend", c.backend,
      "backend URI: emu:mesh8 (default; env NPO_BACKEND overrides it), emu:N, emu:file=PATH, vfio:all, vfio:BDF");
  s->add_flag("--json", c.json, "print JSON");
  s->add_option("--watch", c.watch,
                "repeat every SECONDS > 0 until interrupted (on the emulator's virtual clock, waiting advances time)");
  s->add_option("--count", c.count, "with --watch: stop after N >= 1 repeats");
}

int report(const npo::Error& e, std::string_view what) {
  std::fprintf(stderr, "npo-link: %.*s: %s\n", static_cast<int>(what.size()), what.data(), e.to_string().c_str());
  return 1;
}

json opt_u(const std::optional<unsigned>& v) { return v ? json(*v) : json(nullptr); }

/// Card index of a fabric ID, if the card is in this system.
std::optional<std::uint32_t> card_of(npo::System& sys, std::optional<std::uint32_t> fid) {
  if (!fid) return std::nullopt;
  auto d = sys.device_by_fabric_id(*fid);
  if (!d) return std::nullopt;
  return (*d)->info().index;
}

/// Brings links up when a port with a module is not Up (as `npo-smi topo` does).
npo::Result<void> ensure_up(npo::System& sys, npo::LinkMonitor& mon) {
  bool need = false;
  for (std::size_t c = 0; c < sys.device_count() && !need; ++c) {
    for (unsigned p = 0; p < sys.device(c).port_count(); ++p) {
      auto ps = npo::read_port(sys.device(c), p);
      if (!ps) return std::unexpected(ps.error());
      if (ps->module_present && ps->state != npo::LinkState::kUp && !ps->enabled) need = true;
      if (ps->module_present && ps->state == npo::LinkState::kFault) need = true;
      if (ps->module_present && ps->state != npo::LinkState::kUp && ps->enabled) need = true;
    }
  }
  if (!need) return {};
  auto up = npo::bring_up_links(sys, 10'000'000'000ULL);
  if (!up) return std::unexpected(up.error());
  mon.note_training(up->ports);
  return {};
}

/// Repeats `body` per --watch / --count.
int repeat(const Common& c, npo::LinkMonitor& mon, const std::function<int()>& body) {
  for (unsigned i = 0;; ++i) {
    const int rc = body();
    if (rc != 0 || c.watch <= 0) return rc;
    if (c.count != 0 && i + 1 >= c.count) return 0;
    std::fflush(stdout);
    mon.sleep_ns(static_cast<std::uint64_t>(c.watch * 1e9));
  }
}

std::string ber_text(const std::optional<double>& b) { return b ? fmt::format("{:.2e}", *b) : std::string("-"); }

/// The BER to show for a lane: over the last interval when the monitor has one, else since clear.
std::optional<double> lane_ber(const npo::PortStatus& ps, const npo::PortHealth& h, unsigned lane) {
  for (const auto& l : h.lanes) {
    if (l.lane == lane && l.ber) return l.ber;
  }
  return ps.lanes[lane].pre_fec_ber;
}

std::optional<double> worst_ber(const npo::PortStatus& ps, const npo::PortHealth& h) {
  std::optional<double> w;
  if (ps.state != npo::LinkState::kUp) return w;
  for (unsigned l = 0; l < ps.lanes.size(); ++l) {
    if (((ps.lane_enable >> l) & 1u) == 0) continue;
    const auto b = lane_ber(ps, h, l);
    if (b && (!w || *b > *w)) w = b;
  }
  return w;
}

json fec_json(const npo::LaneCounters& l) {
  json bins = json::array();
  for (auto b : l.fec_bins) bins.push_back(b);
  return {{"codewords", l.codewords},
          {"corrected", l.corrected},
          {"uncorrectable", l.uncorrectable},
          {"symbol_errors", l.symbol_errors},
          {"bins", bins}};
}

json lane_json(const npo::PortStatus& ps, const npo::PortHealth& h, unsigned lane) {
  const auto& l = ps.lanes[lane];
  json j = {{"lane", lane},
            {"in_use", ((npo::lanes_in_use(ps) >> lane) & 1u) != 0 && ps.state == npo::LinkState::kUp},
            {"cdr_lock", ((ps.lanes_up >> lane) & 1u) != 0},
            {"tx_power_mw", l.tx_power_mw},
            {"tx_power_dbm", opt(l.tx_power_dbm)},
            {"rx_power_mw", l.rx_power_mw},
            {"rx_power_dbm", opt(l.rx_power_dbm)},
            {"tx_bias_ma", l.tx_bias_ma},
            {"snr_db", l.snr_db},
            {"tx_eq", {{"pre", l.tx_eq.pre}, {"main", l.tx_eq.main}, {"post", l.tx_eq.post}}},
            {"fec", fec_json(l)},
            {"pre_fec_ber", opt(lane_ber(ps, h, lane))}};
  for (const auto& r : h.lanes) {
    if (r.lane == lane) {
      j["verdict"] = std::string(npo::lane_health_name(r.verdict));
      j["reasons"] = r.reasons;
    }
  }
  return j;
}

json port_json(npo::System& sys, std::uint32_t card, const npo::PortStatus& ps, const npo::PortHealth& h) {
  json nb = nullptr;
  if (ps.neighbor_fabric_id) {
    nb = {{"card", card_of(sys, ps.neighbor_fabric_id) ? json(*card_of(sys, ps.neighbor_fabric_id)) : json(nullptr)},
          {"port", opt_u(ps.neighbor_port)},
          {"fabric_id", *ps.neighbor_fabric_id}};
  }
  json lanes = json::array();
  for (unsigned l = 0; l < ps.lanes.size(); ++l) lanes.push_back(lane_json(ps, h, l));
  return {{"card", card},
          {"port", ps.port},
          {"state", std::string(npo::port_state_name(h.state))},
          {"reason", h.reason},
          {"link_state", std::string(npo::link_state_name(ps.state))},
          {"module_present", ps.module_present},
          {"speed_gbps", ps.speed_gbps()},
          {"lane_count", ps.lane_count},
          {"lane_enable", ps.lane_enable},
          {"lane_rate_mbd", ps.lane_rate_mbd},
          {"modulation", ps.pam4 ? "PAM4" : "NRZ"},
          {"neighbor", nb},
          {"worst_pre_fec_ber", opt(worst_ber(ps, h))},
          {"train_count", ps.train_count},
          {"flap_count", ps.flap_count},
          {"up_count", ps.up_count},
          {"coeff_updates", ps.coeff_updates},
          {"train_result",
           {{"code", ps.train_result.code},
            {"attempt", ps.train_result.attempt},
            {"failed_lanes", ps.train_result.failed_lanes}}},
          {"module_temp_c", opt(ps.module_temp_c)},
          {"module_vcc_v", opt(ps.module_vcc_v)},
          {"lanes", lanes}};
}

int show_once(npo::System& sys, npo::LinkMonitor& mon, const Common& c, bool fec) {
  auto snap = mon.snapshot();
  if (!snap) return report(snap.error(), "snapshot");
  if (c.json) {
    json ports = json::array();
    for (const auto& cp : snap->cards) {
      for (std::size_t i = 0; i < cp.ports.size(); ++i) {
        if (!c.all && !cp.ports[i].module_present) continue;
        ports.push_back(port_json(sys, cp.card, cp.ports[i], cp.health[i]));
      }
    }
    json j = {{"backend", sys.uri()},
              {"timestamp_ns", snap->timestamp_ns},
              {"interval_ns", snap->interval_ns},
              {"ports", ports}};
    std::puts(j.dump(2, ' ', false, json::error_handler_t::replace).c_str());
    return 0;
  }
  std::size_t rows = 0;
  if (!fec) {
    fmt::print("{:>4} {:>4}  {:<9} {:>6} {:>5}  {:<9} {:>9}  {}\n", "CARD", "PORT", "STATE", "Gb/s", "LANES",
               "NEIGHBOR", "WORST-BER", "REASON");
  }
  for (const auto& cp : snap->cards) {
    for (std::size_t i = 0; i < cp.ports.size(); ++i) {
      const auto& ps = cp.ports[i];
      const auto& h = cp.health[i];
      if (!c.all && !ps.module_present) continue;
      ++rows;
      if (!fec) {
        std::string nb = "-";
        if (auto nc = card_of(sys, ps.neighbor_fabric_id)) nb = fmt::format("{}:{}", *nc, ps.neighbor_port.value_or(0));
        fmt::print("{:>4} {:>4}  {:<9} {:>6g} {:>5}  {:<9} {:>9}  {}\n", cp.card, ps.port,
                   npo::port_state_name(h.state), ps.speed_gbps(), fmt::format("{}/{}", ps.lane_count, ps.lanes.size()),
                   nb, ber_text(worst_ber(ps, h)), h.reason);
        continue;
      }
      fmt::print("card {} port {}: {} ({})\n", cp.card, ps.port, npo::port_state_name(h.state), h.reason);
      fmt::print("  {:>4} {:>14} {:>12} {:>8} {:>12} {:>9}  {}\n", "LANE", "CODEWORDS", "CORRECTED", "UNCORR",
                 "SYM-ERRORS", "PRE-BER", "BINS (errors:codewords, bins 1..15)");
      for (unsigned l = 0; l < ps.lanes.size(); ++l) {
        const auto& lc = ps.lanes[l];
        std::string bins;
        for (unsigned b = 1; b < lc.fec_bins.size(); ++b) {
          if (lc.fec_bins[b] != 0) bins += fmt::format("{}{}:{}", bins.empty() ? "" : " ", b, lc.fec_bins[b]);
        }
        fmt::print("  {:>4} {:>14} {:>12} {:>8} {:>12} {:>9}  {}\n", l, lc.codewords, lc.corrected, lc.uncorrectable,
                   lc.symbol_errors, ber_text(lane_ber(ps, h, l)), bins.empty() ? "-" : bins);
      }
    }
  }
  // An empty table alone reads like a tool failure: say why (e.g. emu:N, which has no cables).
  if (rows == 0) std::fprintf(stderr, "npo-link: no port has a module (--all lists every port)\n");
  if (rows != 0 && !fec) {
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

int ddm_once(npo::System& sys, const Common& c, std::optional<unsigned> card, std::optional<unsigned> port) {
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
      auto ps = npo::read_port(dev, p);
      if (!ps) return report(ps.error(), "read port");
      if (!ps->module_present) {
        if (!port) continue;
        std::fprintf(stderr, "npo-link ddm: card %zu port %u has no module (no cable)\n", ci, p);
        return 1;
      }
      auto img = npo::read_module_image(dev, p);
      if (!img) return report(img.error(), fmt::format("card {} port {}: module", ci, p));
      auto m = npo::xcvr::decode_module(*img);
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
  if (c.json)
    std::puts(
        json{{"backend", sys.uri()}, {"modules", mods}}.dump(2, ' ', false, json::error_handler_t::replace).c_str());
  return 0;
}

json training_json(npo::System& sys, const npo::PortTraining& r) {
  json stages = json::object();
  for (std::size_t s = 0; s + 1 < npo::kTrainStageCount; ++s) {
    stages[std::string(npo::train_stage_name(static_cast<npo::TrainStage>(s)))] =
        static_cast<double>(r.stage_ns[s]) / 1e6;
  }
  json attempts = json::array();
  for (const auto& a : r.attempts) {
    attempts.push_back({{"attempt", a.attempt},
                        {"result", std::string(npo::train_code_name(a.code))},
                        {"failed_lanes", a.failed_lanes},
                        {"from_card", a.from_card},
                        {"at_ms", static_cast<double>(a.at_ns) / 1e6}});
  }
  json nb = nullptr;
  if (r.neighbor_fabric_id) {
    auto nc = card_of(sys, r.neighbor_fabric_id);
    nb = {{"card", nc ? json(*nc) : json(nullptr)}, {"port", opt_u(r.neighbor_port)}};
  }
  return {{"card", r.card},
          {"port", r.port},
          {"result", std::string(npo::train_code_name(r.code))},
          {"stage", std::string(npo::train_stage_name(r.stage))},
          {"total_ms", static_cast<double>(r.total_ns) / 1e6},
          {"stage_ms", stages},
          {"attempts", attempts},
          {"host_retries", r.host_retries},
          {"lanes_up", r.lanes_up},
          {"lanes_total", r.lanes_total},
          {"failed_lanes", r.failed_lanes},
          {"dropped_lanes", r.dropped_lanes},
          {"module_ready_timeout_ms", static_cast<double>(r.module_ready_timeout_ns) / 1e6},
          {"datapath_init_timeout_ms", static_cast<double>(r.datapath_init_timeout_ns) / 1e6},
          {"neighbor", nb},
          {"cmis_module_state", r.cmis_module_state ? json(*r.cmis_module_state) : json(nullptr)},
          {"cmis_datapath_activated", r.cmis_datapath_activated ? json(*r.cmis_datapath_activated) : json(nullptr)},
          {"detail", r.detail}};
}

int train_once(npo::System& sys, const Common& c, std::optional<unsigned> card, std::optional<unsigned> port) {
  std::vector<npo::PortRef> ports;
  if (card || port) {
    const unsigned ci = card.value_or(0), pi = port.value_or(0);
    if (ci >= sys.device_count()) {
      std::fprintf(stderr, "npo-link train: card %u outside 0..%zu\n", ci, sys.device_count() - 1);
      return 1;
    }
    ports.push_back({ci, pi});
    // Both ends of the link: the far end learned in the last training, if any.
    if (auto ps = npo::read_port(sys.device(ci), pi); ps && ps->neighbor_fabric_id) {
      if (auto nc = card_of(sys, ps->neighbor_fabric_id)) ports.push_back({*nc, ps->neighbor_port.value_or(0)});
    }
  }
  auto res = npo::train_ports(sys, ports, {}, 20'000'000'000ULL, true);
  if (!res) return report(res.error(), "train");
  // A port asked for by --card/--port is always listed, also when it has no module.
  const bool all = c.all || card || port;
  if (c.json) {
    json out = json::array();
    for (const auto& r : *res) {
      if (!all && r.code == npo::TrainCode::kNoModule && r.stage == npo::TrainStage::kDetect) continue;
      out.push_back(training_json(sys, r));
    }
    std::puts(json{{"backend", sys.uri()}, {"ports", out}}.dump(2, ' ', false, json::error_handler_t::replace).c_str());
    return 0;
  }
  for (const auto& r : *res) {
    if (!all && r.code == npo::TrainCode::kNoModule && r.stage == npo::TrainStage::kDetect) continue;
    std::string stages;
    for (std::size_t s = 0; s + 1 < npo::kTrainStageCount; ++s) {
      stages +=
          fmt::format("{}{}={:.1f}ms", stages.empty() ? "" : " ",
                      npo::train_stage_name(static_cast<npo::TrainStage>(s)), static_cast<double>(r.stage_ns[s]) / 1e6);
    }
    fmt::print("card {} port {}: {} in {:.1f} ms ({})\n  {}\n", r.card, r.port, npo::train_code_name(r.code),
               static_cast<double>(r.total_ns) / 1e6, r.detail, stages);
    for (const auto& a : r.attempts) {
      fmt::print("  attempt {} at {:.1f} ms: {}{}{}\n", a.attempt, static_cast<double>(a.at_ns) / 1e6,
                 npo::train_code_name(a.code), a.failed_lanes ? fmt::format(" lanes 0x{:02x}", a.failed_lanes) : "",
                 a.from_card ? "" : " (host deadline)");
    }
  }
  return 0;
}

int prbs_once(npo::System& sys, const Common& c, const std::string& pattern, double seconds, const std::string& side,
              unsigned card, unsigned port, unsigned lanes) {
  auto pat = npo::parse_prbs_pattern(pattern);
  if (!pat) return report(pat.error(), "prbs");
  if (side != "media" && side != "host") {
    std::fprintf(stderr, "npo-link prbs: --side is media or host, not '%s'\n", side.c_str());
    return 1;
  }
  if (card < sys.device_count()) {
    // A port without a module (no cable) has nothing to test: say so instead of printing
    // unlocked lanes with zero bits.
    if (auto ps = npo::read_port(sys.device(card), port); ps && !ps->module_present) {
      std::fprintf(stderr, "npo-link prbs: card %u port %u has no module (no cable): nothing to test\n", card, port);
      return 1;
    }
  }
  npo::PrbsOptions o{.pattern = *pat,
                     .host_side = side == "host",
                     .lanes = static_cast<std::uint8_t>(lanes),
                     .duration_ns = static_cast<std::uint64_t>(seconds * 1e9)};
  auto r = npo::run_prbs(sys, card, port, o);
  if (!r) return report(r.error(), "prbs");
  if (c.json) {
    json ports = json::array();
    for (const auto& pr : *r) {
      json ls = json::array();
      for (const auto& l : pr.lanes) {
        ls.push_back(
            {{"lane", l.lane}, {"locked", l.locked}, {"bits", l.bits}, {"errors", l.errors}, {"ber", opt(l.ber)}});
      }
      ports.push_back({{"card", pr.card}, {"port", pr.port}, {"lanes", ls}});
    }
    std::puts(json{
        {"pattern", std::string(npo::prbs_pattern_name(*pat))}, {"side", side}, {"seconds", seconds}, {"ports", ports}}
                  .dump(2, ' ', false, json::error_handler_t::replace)
                  .c_str());
    return 0;
  }
  fmt::print("PRBS {} {} side, {:g} s\n", npo::prbs_pattern_name(*pat), side, seconds);
  for (const auto& pr : *r) {
    fmt::print("card {} port {}:\n  {:>4} {:>6} {:>16} {:>12} {:>10}\n", pr.card, pr.port, "LANE", "LOCK", "BITS",
               "ERRORS", "BER");
    for (const auto& l : pr.lanes) {
      fmt::print("  {:>4} {:>6} {:>16} {:>12} {:>10}\n", l.lane, l.locked ? "yes" : "no", l.bits, l.errors,
                 ber_text(l.ber));
    }
  }
  return 0;
}

int health_once(npo::System& sys, npo::LinkMonitor& mon, const Common& c, double interval) {
  if (auto s0 = mon.snapshot(); !s0) return report(s0.error(), "snapshot");
  mon.sleep_ns(static_cast<std::uint64_t>(interval * 1e9));
  auto snap = mon.snapshot();
  if (!snap) return report(snap.error(), "snapshot");
  json ports = json::array();
  for (const auto& cp : snap->cards) {
    for (std::size_t i = 0; i < cp.ports.size(); ++i) {
      const auto& ps = cp.ports[i];
      const auto& h = cp.health[i];
      if (!c.all && !ps.module_present) continue;
      if (c.json) {
        json lanes = json::array();
        for (const auto& l : h.lanes) {
          lanes.push_back({{"lane", l.lane},
                           {"verdict", std::string(npo::lane_health_name(l.verdict))},
                           {"raw", std::string(npo::lane_health_name(l.raw))},
                           {"pre_fec_ber", opt(l.ber)},
                           {"baseline_ber", opt(l.baseline_ber)},
                           {"tail_codewords", l.tail_codewords},
                           {"uncorrectable", l.uncorrectable},
                           {"reasons", l.reasons}});
        }
        ports.push_back({{"card", cp.card},
                         {"port", ps.port},
                         {"state", std::string(npo::port_state_name(h.state))},
                         {"reason", h.reason},
                         {"lanes", lanes}});
        continue;
      }
      fmt::print("card {} port {}: {} ({})\n", cp.card, ps.port, npo::port_state_name(h.state), h.reason);
      for (const auto& l : h.lanes) {
        std::string why;
        for (const auto& r : l.reasons) why += fmt::format("{}{}", why.empty() ? "" : "; ", r);
        fmt::print("  lane {}: {:<8} {}\n", l.lane, npo::lane_health_name(l.verdict), why);
      }
    }
  }
  if (c.json) {
    std::puts(json{{"backend", sys.uri()}, {"interval_ns", snap->interval_ns}, {"ports", ports}}
                  .dump(2, ' ', false, json::error_handler_t::replace)
                  .c_str());
  }
  return 0;
}

/// A time option: finite, > 0 and at most a day (a negative, NaN or huge value would wrap when
/// converted to nanoseconds). Prints the error and returns false otherwise.
bool check_seconds(const char* sub, const char* name, double v) {
  if (std::isfinite(v) && v > 0 && v <= 86400.0) return true;
  std::fprintf(stderr, "npo-link %s: %s %g: expected seconds in (0, 86400]\n", sub, name, v);
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"npo-link: optical links and transceivers of NPO cards"};
  app.require_subcommand(1);

  auto* dec = app.add_subcommand("decode", "decode a transceiver EEPROM dump (raw, ethtool -m hex, or .hex file)");
  std::string file;
  bool as_json = false;
  dec->add_option("FILE", file, "dump file")->required();
  dec->add_flag("--json", as_json, "print one JSON object");

  Common c;
  auto* show = app.add_subcommand("show", "one line per port: state, reason, speed, lanes, neighbour, worst-lane BER");
  auto* ddm = app.add_subcommand("ddm", "decode each live module over the mailbox (CMIS) and the card's DDM mirrors");
  auto* fec = app.add_subcommand("fec", "FEC counters and symbol-error bins per lane");
  auto* prbs = app.add_subcommand("prbs", "PRBS test on both ends of a link, per-lane bits/errors/BER");
  auto* train = app.add_subcommand("train", "retrain and print the supervisor's per-stage times and result codes");
  auto* health = app.add_subcommand("health", "lane verdicts with reasons over an interval between two snapshots");
  for (auto* s : {show, ddm, fec, prbs, train, health}) add_common(s, c);
  for (auto* s : {show, fec, train, health}) s->add_flag("--all", c.all, "include ports without a module");
  std::string pattern = "PRBS31", side = "media";
  double seconds = 1.0, interval = 1.0;
  std::optional<unsigned> card, port;
  unsigned lanes = 0xff;
  prbs->add_option("--pattern", pattern, "PRBS7, PRBS9, PRBS11, PRBS13, PRBS15, PRBS23, PRBS31 (default PRBS31)");
  prbs->add_option("--seconds", seconds, "checking time in seconds > 0 (platform clock; default 1)");
  prbs->add_option("--side", side, "media (over the fibre, default) or host (card <-> module)");
  prbs->add_option("--lanes", lanes, "PRBS_LANES bitmap 0x01..0xff (default 0xff)");
  prbs->add_option("--card", card, "card index (default 0)");
  prbs->add_option("--port", port, "port (default 0)");
  ddm->add_option("--card", card, "only this card (default: every card)");
  ddm->add_option("--port", port, "only this port (of --card, else of card 0); it must have a module");
  train->add_option("--card", card, "card index (with --port: that link, both ends; neither: every port)");
  train->add_option("--port", port, "port (default 0 when --card is given)");
  health->add_option("--interval", interval, "seconds > 0 between the two snapshots (platform clock; default 1)");

  CLI11_PARSE(app, argc, argv);
  if (dec->parsed()) return decode(file, as_json);

  // Bad numbers are refused before any card is touched.
  const char* sub = app.get_subcommands().front()->get_name().c_str();
  auto* parsed = app.get_subcommands().front();
  if (parsed->count("--watch") != 0 && !check_seconds(sub, "--watch", c.watch)) return 2;
  if (parsed->count("--count") != 0) {
    if (parsed->count("--watch") == 0) {
      std::fprintf(stderr, "npo-link %s: --count needs --watch\n", sub);
      return 2;
    }
    if (c.count == 0) {
      std::fprintf(stderr, "npo-link %s: --count 0: expected N >= 1 (omit --count to repeat until interrupted)\n", sub);
      return 2;
    }
  }
  if (prbs->parsed()) {
    if (!check_seconds(sub, "--seconds", seconds)) return 2;
    if (lanes == 0 || lanes > 0xff) {
      std::fprintf(stderr, "npo-link prbs: --lanes 0x%x: expected a bitmap of lanes 0..7, 0x01..0xff\n", lanes);
      return 2;
    }
  }
  if (health->parsed() && !check_seconds(sub, "--interval", interval)) return 2;

  auto sys = npo::System::open(c.backend);
  if (!sys) return report(sys.error(), c.backend);
  npo::System& s = **sys;
  // `health` also judges the modules' DDM (thresholds, Rx LOS, Tx fault) over the mailbox.
  npo::LinkMonitorOptions mo;
  mo.check_module_ddm = health->parsed();
  npo::LinkMonitor mon(s, mo);
  // Links are brought up first when they are down (like `npo-smi topo`); `train` with a port
  // needs the neighbour known to retrain both ends.
  if (show->parsed() || fec->parsed() || health->parsed() || prbs->parsed() || ddm->parsed() ||
      (train->parsed() && (card || port))) {
    if (auto r = ensure_up(s, mon); !r) return report(r.error(), "link bring-up");
  }
  if (show->parsed()) return repeat(c, mon, [&] { return show_once(s, mon, c, false); });
  if (fec->parsed()) return repeat(c, mon, [&] { return show_once(s, mon, c, true); });
  if (ddm->parsed()) return repeat(c, mon, [&] { return ddm_once(s, c, card, port); });
  if (health->parsed()) return repeat(c, mon, [&] { return health_once(s, mon, c, interval); });
  if (train->parsed()) return repeat(c, mon, [&] { return train_once(s, c, card, port); });
  if (prbs->parsed()) {
    return repeat(c, mon,
                  [&] { return prbs_once(s, c, pattern, seconds, side, card.value_or(0), port.value_or(0), lanes); });
  }
  return 2;
}
