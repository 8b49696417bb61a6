// SPDX-License-Identifier: Apache-2.0
// Topology files: the one writer, YAML and JSON, both read back equal by parse_fabric_spec
// (docs/topology.md "File format").
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "npo/hal/topology_file.hpp"

namespace npo {

namespace {

std::string fmt_bytes(std::uint64_t b) {
  if (b != 0 && b % (1ULL << 30) == 0) return fmt::format("{}G", b >> 30);
  if (b != 0 && b % (1ULL << 20) == 0) return fmt::format("{}M", b >> 20);
  if (b != 0 && b % (1ULL << 10) == 0) return fmt::format("{}K", b >> 10);
  return fmt::format("{}", b);
}

std::string yaml_str(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      out += fmt::format("\\x{:02x}", u);  // YAML double-quoted escape: newlines etc. read back as written
      continue;
    }
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + '"';
}
std::string lanes_list(std::uint8_t m) {
  std::vector<unsigned> l;
  for (unsigned i = 0; i < kFabricLanesPerPort; ++i) {
    if (m & (1u << i)) l.push_back(i);
  }
  return fmt::format("[{}]", fmt::join(l, ", "));
}
}  // namespace

std::string to_yaml(const FabricSpec& s) {
  std::string o;
  o += "# npo-hal topology file (docs/topology.md)\n";
  o += fmt::format("name: {}\n", yaml_str(s.name));
  o += fmt::format("cards:\n  count: {}\n  hbm: {}\n  ports: {}\n", s.cards, fmt_bytes(s.hbm_bytes), s.ports);
  if (!s.overrides.empty()) {
    o += "  overrides:\n";
    for (const auto& v : s.overrides) {
      o += fmt::format("    - {{card: {}", v.card);
      if (v.hbm_bytes) o += fmt::format(", hbm: {}", fmt_bytes(*v.hbm_bytes));
      if (v.ports) o += fmt::format(", ports: {}", *v.ports);
      o += "}\n";
    }
  }
  if (!s.switches.empty()) {
    o += "switches:\n";
    for (const auto& sw : s.switches) {
      o += fmt::format("  - name: {}\n    ports: {}\n    insertion_loss_db: {}\n", yaml_str(sw.name), sw.ports,
                       sw.insertion_loss_db);
      o += "    connect: [";
      for (std::size_t k = 0; k < sw.cross_connects.size(); ++k) {
        o += fmt::format("{}[{}, {}]", k ? ", " : "", sw.cross_connects[k].first, sw.cross_connects[k].second);
      }
      o += "]\n";
    }
  }
  const FabricChannel def{};
  o += s.cables.empty() ? "cables: []\n" : "cables:\n";
  for (const auto& c : s.cables) {
    o += fmt::format("  - {{a: {}, b: {}", yaml_str(s.end_name(c.a)), yaml_str(s.end_name(c.b)));
    if (c.channel.loss_db != def.loss_db) o += fmt::format(", loss_db: {}", c.channel.loss_db);
    if (c.channel.snr_penalty_db != def.snr_penalty_db) {
      o += fmt::format(", snr_penalty_db: {}", c.channel.snr_penalty_db);
    }
    if (c.channel.dead_lanes != 0) o += fmt::format(", dead_lanes: {}", lanes_list(c.channel.dead_lanes));
    o += "}\n";
  }
  if (!s.faults.empty()) {
    o += "faults:\n";
    for (const auto& f : s.faults) {
      o += fmt::format("  - {{at_ns: {}, kind: {}, card: {}", f.at_ns, f.kind, f.card);
      if (f.engine) o += fmt::format(", engine: {}", *f.engine);
      if (f.queue) o += fmt::format(", queue: {}", *f.queue);
      if (f.port) o += fmt::format(", port: {}", *f.port);
      if (f.lane) o += fmt::format(", lane: {}", *f.lane);
      if (f.count != 1) o += fmt::format(", count: {}", f.count);
      if (f.value != 0) o += fmt::format(", value: {}", f.value);
      if (f.duration_ns != 0) o += fmt::format(", duration_ns: {}", f.duration_ns);
      o += "}\n";
    }
  }
  return o;
}

std::string to_json(const FabricSpec& s) {
  using nlohmann::json;
  json j;
  j["name"] = s.name;
  json cards{{"count", s.cards}, {"hbm", s.hbm_bytes}, {"ports", s.ports}};
  if (!s.overrides.empty()) {
    json ov = json::array();
    for (const auto& v : s.overrides) {
      json e{{"card", v.card}};
      if (v.hbm_bytes) e["hbm"] = *v.hbm_bytes;
      if (v.ports) e["ports"] = *v.ports;
      ov.push_back(e);
    }
    cards["overrides"] = ov;
  }
  j["cards"] = cards;
  if (!s.switches.empty()) {
    json sws = json::array();
    for (const auto& sw : s.switches) {
      json cx = json::array();
      for (const auto& [x, y] : sw.cross_connects) cx.push_back({x, y});
      sws.push_back(
          {{"name", sw.name}, {"ports", sw.ports}, {"insertion_loss_db", sw.insertion_loss_db}, {"connect", cx}});
    }
    j["switches"] = sws;
  }
  json cabs = json::array();
  const FabricChannel def{};
  for (const auto& c : s.cables) {
    json e{{"a", s.end_name(c.a)}, {"b", s.end_name(c.b)}};
    if (c.channel.loss_db != def.loss_db) e["loss_db"] = c.channel.loss_db;
    if (c.channel.snr_penalty_db != def.snr_penalty_db) e["snr_penalty_db"] = c.channel.snr_penalty_db;
    if (c.channel.dead_lanes != 0) {
      json l = json::array();
      for (unsigned i = 0; i < kFabricLanesPerPort; ++i) {
        if (c.channel.dead_lanes & (1u << i)) l.push_back(i);
      }
      e["dead_lanes"] = l;
    }
    cabs.push_back(e);
  }
  j["cables"] = cabs;
  if (!s.faults.empty()) {
    json fs = json::array();
    for (const auto& f : s.faults) {
      json e{{"at_ns", f.at_ns}, {"kind", f.kind}, {"card", f.card}};
      if (f.engine) e["engine"] = *f.engine;
      if (f.queue) e["queue"] = *f.queue;
      if (f.port) e["port"] = *f.port;
      if (f.lane) e["lane"] = *f.lane;
      if (f.count != 1) e["count"] = f.count;
      if (f.value != 0) e["value"] = f.value;
      if (f.duration_ns != 0) e["duration_ns"] = f.duration_ns;
      fs.push_back(e);
    }
    j["faults"] = fs;
  }
  return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

}  // namespace npo
