// SPDX-License-Identifier: Apache-2.0
// npo-link decode FILE [--json]: decodes a transceiver EEPROM dump (raw bytes as `ethtool -m
// IF raw on` writes them, `ethtool -m IF hex on` text, or a tests/data/eeprom .hex file) into
// an ethtool-like listing or JSON. module_json and power_text serve `ddm` too.
#include <optional>
#include <string>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/output.hpp"
#include "link.hpp"
#include "npo/hal/xcvr_decode.hpp"

namespace npo::tools::link {

using nlohmann::json;
using xcvr::DecodedModule;

namespace {

json thresholds_json(const std::optional<npo::xcvr::ThresholdSet>& t) {
  if (!t) return nullptr;
  return {{"high_alarm", t->high_alarm},
          {"low_alarm", t->low_alarm},
          {"high_warning", t->high_warning},
          {"low_warning", t->low_warning}};
}

}  // namespace

json module_json(const DecodedModule& m) {
  json lanes = json::array();
  for (const auto& l : m.lanes) {
    json flags = json::array();
    for (auto f : l.flags) flags.push_back(std::string(npo::xcvr::lane_flag_name(f)));
    lanes.push_back({{"lane", l.lane},
                     {"tx_bias_ma", or_null(l.tx_bias_ma)},
                     {"tx_power_mw", or_null(l.tx_power_mw)},
                     {"tx_power_dbm", or_null(l.tx_power_dbm)},
                     {"rx_power_mw", or_null(l.rx_power_mw)},
                     {"rx_power_dbm", or_null(l.rx_power_dbm)},
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
      {"max_power_w", or_null(m.max_power_w)},
      {"media_type", media},
      {"media", m.media_type_name},
      {"passive_copper", m.passive_copper},
      {"applications", apps},
      {"active_app_sel", m.active_app_sel ? json(*m.active_app_sel) : json(nullptr)},
      {"media_lane_count", m.media_lane_count},
      {"media_lane_source", m.media_lane_source},
      {"monitors_valid", m.monitors_valid},
      {"rx_power_type", m.rx_power_is_average ? "average" : "oma"},
      {"temperature_c", or_null(m.temperature_c)},
      {"supply_voltage_v", or_null(m.supply_voltage_v)},
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

std::string power_text(const std::optional<double>& mw, const std::optional<double>& dbm) {
  if (!mw) return "not reported";
  if (!dbm) return fmt::format("{:.4f} mW / no light (dBm undefined)", *mw);
  return fmt::format("{:.4f} mW / {:.2f} dBm", *mw, *dbm);
}

// ---- Text listing, in the manner of `ethtool -m` -------------------------------------------

namespace {

void line(std::string_view name, std::string_view value) { fmt::print("\t{:<41} : {}\n", name, value); }

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

}  // namespace

int decode(const std::string& file, bool as_json) {
  auto bytes = npo::xcvr::load_dump_file(file);
  if (!bytes) return fail(kTool, bytes.error());
  auto m = npo::xcvr::decode_module(*bytes);
  if (!m) return report(m.error(), file);
  if (as_json) {
    json j = module_json(*m);
    j["file"] = file;
    print_json(j);
  } else {
    print_text(*m, file);
  }
  return 0;
}

}  // namespace npo::tools::link
