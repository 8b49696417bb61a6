// SPDX-License-Identifier: Apache-2.0
// Emulator configuration: the URI forms (emu:mesh8, emu:N, emu:file=PATH and their options)
// and the configuration a topology plan describes. emu:mesh8 is the generated 8-card mesh.
#include <charconv>
#include <set>

#include <fmt/format.h>

#include "npo/emu/emulator.hpp"
#include "npo/hal/topology_file.hpp"
#include "npo/hal/topology_gen.hpp"
#include "npo/hal/units.hpp"
#include "scenario.hpp"

namespace npo::emu {

Result<SystemConfig> system_config_from_spec(const FabricSpec& spec) {
  SystemConfig c;
  c.num_cards = spec.cards;
  c.card.hbm_bytes = spec.hbm_bytes;
  c.card.num_ports = spec.ports;
  if (!spec.overrides.empty()) {
    c.per_card.assign(spec.cards, c.card);
    for (const auto& o : spec.overrides) {
      if (o.card >= spec.cards) continue;
      if (o.hbm_bytes) c.per_card[o.card].hbm_bytes = *o.hbm_bytes;
      if (o.ports) c.per_card[o.card].num_ports = *o.ports;
    }
  }
  c.switches = spec.switches;
  for (const auto& cab : spec.cables) {
    if (!cab.a.on_switch && !cab.b.on_switch) {
      c.cables.push_back(Cable{cab.a.node, cab.a.port, cab.b.node, cab.b.port, cab.channel});
    } else {
      c.switch_cables.push_back(cab);
    }
  }
  auto faults = faults_of_plan(spec);
  if (!faults) return std::unexpected(faults.error());
  c.faults = std::move(*faults);
  return c;
}

// ==== URI ===================================================================================

namespace {

constexpr std::string_view kForms =
    "emu:mesh8 (8 cards, every pair cabled), emu:N (N = 1..1024 cards, no cables), emu:file=PATH (topology "
    "file); options "
    "?clock=virtual|realtime&seed=N&hbm=BYTES[K|M|G]&ports=N&workers=1..4&scenario=PATH";

Result<std::uint64_t> parse_u64(std::string_view s, std::string_view what) {
  std::uint64_t v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || s.empty()) {
    return fail(Code::kInvalidArgument, fmt::format("emulator URI: bad {} '{}'", what, s));
  }
  return v;
}

/// emu:mesh8: the generated 8-card full mesh (port p of card a leads to the p-th other card)
/// on cards with the default 8 ports, so port 7 of every card stays free.
SystemConfig mesh8() {
  auto plan = generate_fabric(FabricKind::kMesh, 8);  // always fits: 8 cards need 7 ports
  SystemConfig c;
  if (plan) {
    plan->ports = CardConfig{}.num_ports;
    if (auto sc = system_config_from_spec(*plan)) c = std::move(*sc);
  }
  c.name = "mesh8";
  return c;
}

}  // namespace

Result<SystemConfig> parse_uri(std::string_view rest) {
  SystemConfig c;
  bool from_file = false;
  std::string_view opts;
  if (auto q = rest.find('?'); q != std::string_view::npos) {
    opts = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  if (rest == "mesh8" || rest.empty()) {
    c = mesh8();
  } else if (rest.starts_with("file=")) {
    // A topology file (docs/topology.md); options below apply on top of it.
    const std::string_view path = rest.substr(5);
    if (path.empty()) return fail(Code::kInvalidArgument, "emulator URI 'emu:file=': needs a path");
    auto spec = load_fabric_spec(std::filesystem::path(std::string(path)));
    if (!spec) return std::unexpected(std::move(Error(spec.error())).prefixed("emulator URI 'emu:file='"));
    auto fc = system_config_from_spec(*spec);
    if (!fc) {
      return std::unexpected(std::move(Error(fc.error())).prefixed(fmt::format("emulator URI 'emu:file=': {}", path)));
    }
    c = std::move(*fc);
    c.name = std::string(rest);
    from_file = true;
  } else {
    auto n = parse_u64(rest, "card count");
    if (!n) {
      return fail(Code::kInvalidArgument,
                  fmt::format("unknown emulator URI 'emu:{}'; accepted forms: {}", rest, kForms));
    }
    if (*n < 1 || *n > 1024) {
      return fail(Code::kInvalidArgument, fmt::format("emulator URI 'emu:{}': the card count must be 1..1024", rest));
    }
    c.name = std::string(rest);
    c.num_cards = static_cast<unsigned>(*n);
  }
  std::set<std::string> seen_keys;
  while (!opts.empty()) {
    const auto amp = opts.find('&');
    const std::string_view kv = opts.substr(0, amp);
    opts = amp == std::string_view::npos ? std::string_view{} : opts.substr(amp + 1);
    const auto eq = kv.find('=');
    if (eq == std::string_view::npos)
      return fail(Code::kInvalidArgument, fmt::format("emulator URI option '{}' lacks '=': {}", kv, kForms));
    const std::string_view k = kv.substr(0, eq), v = kv.substr(eq + 1);
    if (!seen_keys.insert(std::string(k)).second) {
      return fail(Code::kInvalidArgument, fmt::format("emulator URI option '{}' given twice", k));
    }
    if (from_file && k == "ports") {
      return fail(Code::kInvalidArgument,
                  "emulator URI option 'ports' does not combine with file=: the topology file's cabling sets it");
    }
    if (k == "clock") {
      if (v == "virtual")
        c.clock = ClockMode::kVirtual;
      else if (v == "realtime")
        c.clock = ClockMode::kRealtime;
      else
        return fail(Code::kInvalidArgument,
                    fmt::format("emulator URI: clock must be virtual or realtime, got '{}'", v));
    } else if (k == "seed") {
      auto s = parse_u64(v, "seed");
      if (!s) return std::unexpected(s.error());
      c.seed = *s;
    } else if (k == "hbm") {
      auto s = parse_bytes(v);
      if (!s) return fail(Code::kInvalidArgument, fmt::format("emulator URI: bad hbm size: {}", s.error().message()));
      c.card.hbm_bytes = *s;
      for (auto& pc : c.per_card) pc.hbm_bytes = *s;  // file=: overrides every card's HBM
    } else if (k == "ports") {
      auto s = parse_u64(v, "port count");
      if (!s) return std::unexpected(s.error());
      // Checked here under the option's own name (the file check would say "cards.ports").
      if (*s < 1 || *s > kFabricMaxCardPorts) {
        return fail(Code::kInvalidArgument,
                    fmt::format("emulator URI: ports={} must be 1..{}", *s, kFabricMaxCardPorts));
      }
      c.card.num_ports = static_cast<unsigned>(*s);
    } else if (k == "workers") {
      auto s = parse_u64(v, "worker count");
      if (!s) return std::unexpected(s.error());
      if (*s < 1 || *s > 4)
        return fail(Code::kInvalidArgument, fmt::format("emulator URI: workers={} must be 1..4", *s));
      c.workers = static_cast<unsigned>(*s);
    } else if (k == "scenario") {
      c.scenario = std::string(v);
    } else {
      return fail(Code::kInvalidArgument, fmt::format("unknown emulator URI option '{}'; accepted: {}", k, kForms));
    }
  }
  return c;
}

}  // namespace npo::emu
