// SPDX-License-Identifier: Apache-2.0
// FabricSpec: topology files (parse, validate, write), light-path tracing, generators and
// graph properties. docs/topology.md is the reference for every rule here.
#include "npo/hal/fabric_spec.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <memory>
#include <numeric>
#include <sstream>
#include <system_error>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include "npo/hal/units.hpp"

namespace npo {

namespace {

constexpr std::string_view kFaultKinds[] = {
    "iommu_fault", "engine_hang", "completion_error", "mailbox_timeout", "mailbox_corrupt", "surprise_removal",
    "ber_ramp",    "lane_loss",   "flap_storm",       "module_removal",  "training_timeout"};
/// Largest topology file load_fabric_spec reads (a 1024-card fat-tree in JSON is ~1 MB).
constexpr std::size_t kFabricMaxFileBytes = std::size_t{16} << 20;
/// Most optical switches, and most switch ports in all: far above what the generators build
/// (1024 cards: at most ~3,100 switches and 65,536 switch ports), low enough that the per-port
/// tables of validation and tracing stay small for any file.
constexpr std::size_t kFabricMaxSwitches = 4096;
constexpr std::size_t kFabricMaxTotalSwitchPorts = std::size_t{1} << 18;
constexpr unsigned kEngines = 4;          // registers.md: DMA engines per card
constexpr unsigned kQueuesPerEngine = 8;  // registers.md: queues per engine

bool is_link_fault(std::string_view k) {
  return k == "ber_ramp" || k == "lane_loss" || k == "flap_storm" || k == "module_removal" || k == "training_timeout";
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::unexpected<Error> bad(std::string msg) { return fail(Code::kInvalidArgument, std::move(msg)); }

/// Offset of the first byte that is not part of well-formed UTF-8, or npos.
std::size_t bad_utf8_at(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t len = 0;
    std::uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    }
    if ((c & 0xe0) == 0xc0) {
      len = 2;
      cp = c & 0x1fu;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3;
      cp = c & 0x0fu;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4;
      cp = c & 0x07u;
    } else {
      return i;
    }
    if (i + len > s.size()) return i;
    for (std::size_t k = 1; k < len; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xc0) != 0x80) return i;
      cp = (cp << 6) | (d & 0x3fu);
    }
    // Overlong forms, surrogates and code points beyond U+10FFFF are not UTF-8.
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10ffff ||
        (cp >= 0xd800 && cp <= 0xdfff)) {
      return i;
    }
    i += len;
  }
  return std::string_view::npos;
}

Result<void> check_text(std::string_view s, std::string_view where) {
  if (const auto at = bad_utf8_at(s); at != std::string_view::npos) {
    return bad(
        fmt::format("{}: not valid UTF-8 (byte 0x{:02x} at offset {})", where, static_cast<unsigned char>(s[at]), at));
  }
  return {};
}

std::string fmt_bytes(std::uint64_t b) {
  if (b != 0 && b % (1ULL << 30) == 0) return fmt::format("{}G", b >> 30);
  if (b != 0 && b % (1ULL << 20) == 0) return fmt::format("{}M", b >> 20);
  if (b != 0 && b % (1ULL << 10) == 0) return fmt::format("{}K", b >> 10);
  return fmt::format("{}", b);
}

/// Dense index of every port: card ports first (card * 16 + port), then each switch's ports.
struct PortIndex {
  std::vector<std::size_t> switch_base;
  std::size_t total = 0;
  explicit PortIndex(const FabricSpec& s) {
    total = std::size_t{s.cards} * kFabricMaxCardPorts;
    for (const auto& sw : s.switches) {
      switch_base.push_back(total);
      total += sw.ports;
    }
  }
  [[nodiscard]] std::size_t of(const FabricEnd& e) const {
    return e.on_switch ? switch_base[e.node] + e.port : std::size_t{e.node} * kFabricMaxCardPorts + e.port;
  }
};

/// For each port: the cable plugged into it (index, and whether it is that cable's b end).
struct CableIndex {
  PortIndex ports;
  std::vector<std::int32_t> cable;  // -1: none
  std::vector<std::uint8_t> is_b;
  std::vector<std::int32_t> xc;  // switch ports: partner port's dense index, -1 none
  explicit CableIndex(const FabricSpec& s)
      : ports(s), cable(ports.total, -1), is_b(ports.total, 0), xc(ports.total, -1) {
    for (std::size_t i = 0; i < s.cables.size(); ++i) {
      cable[ports.of(s.cables[i].a)] = static_cast<std::int32_t>(i);
      const auto b = ports.of(s.cables[i].b);
      cable[b] = static_cast<std::int32_t>(i);
      is_b[b] = 1;
    }
    for (std::size_t w = 0; w < s.switches.size(); ++w) {
      for (const auto& [x, y] : s.switches[w].cross_connects) {
        xc[ports.switch_base[w] + x] = static_cast<std::int32_t>(ports.switch_base[w] + y);
        xc[ports.switch_base[w] + y] = static_cast<std::int32_t>(ports.switch_base[w] + x);
      }
    }
  }
  [[nodiscard]] FabricEnd end_at(const FabricSpec& s, std::size_t dense) const {
    if (dense < std::size_t{s.cards} * kFabricMaxCardPorts) {
      return FabricEnd{false, static_cast<std::uint32_t>(dense / kFabricMaxCardPorts),
                       static_cast<unsigned>(dense % kFabricMaxCardPorts)};
    }
    const auto it = std::upper_bound(ports.switch_base.begin(), ports.switch_base.end(), dense) - 1;
    return FabricEnd{true, static_cast<std::uint32_t>(it - ports.switch_base.begin()),
                     static_cast<unsigned>(dense - *it)};
  }
  [[nodiscard]] std::optional<FabricLightPath> trace(const FabricSpec& s, std::uint32_t card, unsigned port) const {
    if (card >= s.cards || port >= kFabricMaxCardPorts) return std::nullopt;
    std::size_t at = std::size_t{card} * kFabricMaxCardPorts + port;
    FabricLightPath p;
    p.channel = FabricChannel{0.0, 0.0, 0};
    for (std::size_t guard = 0; guard <= s.switches.size() * 2 + 2; ++guard) {
      const std::int32_t ci = cable[at];
      if (ci < 0) return std::nullopt;
      const auto& c = s.cables[static_cast<std::size_t>(ci)];
      p.channel.loss_db += c.channel.loss_db;
      p.channel.snr_penalty_db += c.channel.snr_penalty_db;
      p.channel.dead_lanes |= c.channel.dead_lanes;
      const FabricEnd far = is_b[at] ? c.a : c.b;
      if (!far.on_switch) {
        p.card = far.node;
        p.port = far.port;
        return p;
      }
      const std::int32_t next = xc[ports.of(far)];
      if (next < 0) return std::nullopt;
      p.channel.loss_db += s.switches[far.node].insertion_loss_db;
      ++p.switch_hops;
      at = static_cast<std::size_t>(next);
    }
    return std::nullopt;  // a loop of switches (only possible with switch-to-switch cycles)
  }
};

// ---- Parsing helpers -------------------------------------------------------------------------

Result<std::uint64_t> parse_size(std::string_view s, std::string_view where) {
  auto v = parse_bytes(s);
  if (!v) {
    if (v.error().code() == Code::kOutOfRange) return bad(fmt::format("{}: '{}' is too large", where, s));
    return bad(fmt::format("{}: expected a non-negative integer (optionally K/M/G), got '{}'", where, s));
  }
  return *v;
}

Result<std::uint64_t> get_u64(const YAML::Node& n, std::string_view where) {
  if (!n.IsScalar()) return bad(fmt::format("{}: expected a number", where));
  return parse_size(n.Scalar(), where);
}

Result<unsigned> get_uint(const YAML::Node& n, std::string_view where, std::uint64_t max = 0xffffffffULL) {
  auto v = get_u64(n, where);
  if (!v) return std::unexpected(v.error());
  if (*v > max) return bad(fmt::format("{}: {} is larger than {}", where, *v, max));
  return static_cast<unsigned>(*v);
}

Result<double> get_double(const YAML::Node& n, std::string_view where) {
  if (!n.IsScalar()) return bad(fmt::format("{}: expected a number", where));
  double v = 0;
  try {
    v = n.as<double>();
  } catch (const YAML::Exception&) {
    return bad(fmt::format("{}: expected a number, got '{}'", where, n.Scalar()));
  }
  if (!std::isfinite(v)) return bad(fmt::format("{}: expected a finite number, got '{}'", where, n.Scalar()));
  return v;
}

Result<void> check_keys(const YAML::Node& n, std::string_view where, std::initializer_list<std::string_view> keys) {
  if (!n.IsMap()) return bad(fmt::format("{}: expected a map", where));
  std::vector<std::string> seen;
  for (const auto& kv : n) {
    if (!kv.first.IsScalar()) return bad(fmt::format("{}: a key is not a plain name", where));
    const std::string k = kv.first.Scalar();
    if (std::find(seen.begin(), seen.end(), k) != seen.end()) {
      return bad(fmt::format("{}: field '{}' given twice", where, k));
    }
    seen.push_back(k);
    if (std::find(keys.begin(), keys.end(), k) == keys.end()) {
      std::string list;
      for (auto x : keys) list += fmt::format("{}{}", list.empty() ? "" : ", ", x);
      return bad(fmt::format("{}: unknown field '{}' (accepted: {})", where, k, list));
    }
  }
  return {};
}

/// "12:3" or "leaf0:7" -> end; the switch is resolved by name against `spec.switches`.
Result<FabricEnd> parse_end(const FabricSpec& spec, const YAML::Node& n, std::string_view where) {
  if (!n || !n.IsScalar()) return bad(fmt::format("{}: expected CARD:PORT or SWITCH:PORT", where));
  const std::string s = n.Scalar();
  const auto colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0 || !all_digits(std::string_view(s).substr(colon + 1))) {
    return bad(fmt::format("{}: expected CARD:PORT or SWITCH:PORT, got '{}'", where, s));
  }
  const std::string node = s.substr(0, colon);
  auto port = parse_size(std::string_view(s).substr(colon + 1), where);
  if (!port || *port > 0xffff) return bad(fmt::format("{}: bad port in '{}'", where, s));
  FabricEnd e;
  e.port = static_cast<unsigned>(*port);
  if (all_digits(node)) {
    auto c = parse_size(node, where);
    if (!c || *c > 0xffffffffULL) return bad(fmt::format("{}: bad card in '{}'", where, s));
    e.node = static_cast<std::uint32_t>(*c);
  } else {
    const auto idx = spec.switch_index(node);
    if (!idx) return bad(fmt::format("{}: unknown switch '{}' in '{}'", where, node, s));
    e.on_switch = true;
    e.node = *idx;
  }
  return e;
}

Result<std::uint8_t> parse_lanes(const YAML::Node& n, std::string_view where) {
  if (n.IsSequence()) {
    std::uint8_t m = 0;
    for (std::size_t i = 0; i < n.size(); ++i) {
      auto l = get_uint(n[i], fmt::format("{}[{}]", where, i));
      if (!l) return std::unexpected(l.error());
      if (*l >= kFabricLanesPerPort) {
        return bad(fmt::format("{}[{}]: lane {} outside 0..{}", where, i, *l, kFabricLanesPerPort - 1));
      }
      if ((m >> *l) & 1u) return bad(fmt::format("{}[{}]: lane {} listed twice", where, i, *l));
      m = static_cast<std::uint8_t>(m | (1u << *l));
    }
    return m;
  }
  auto v = get_uint(n, where);
  if (!v) return std::unexpected(v.error());
  if (*v > 0xff) return bad(fmt::format("{}: lane bitmap 0x{:x} has bits beyond the 8 lanes", where, *v));
  return static_cast<std::uint8_t>(*v);
}

Result<void> parse_channel(const YAML::Node& n, std::string_view where, FabricChannel& ch) {
  if (n["loss_db"]) {
    auto v = get_double(n["loss_db"], fmt::format("{}.loss_db", where));
    if (!v) return std::unexpected(v.error());
    ch.loss_db = *v;
  }
  if (n["snr_penalty_db"]) {
    auto v = get_double(n["snr_penalty_db"], fmt::format("{}.snr_penalty_db", where));
    if (!v) return std::unexpected(v.error());
    ch.snr_penalty_db = *v;
  }
  if (n["dead_lanes"]) {
    auto v = parse_lanes(n["dead_lanes"], fmt::format("{}.dead_lanes", where));
    if (!v) return std::unexpected(v.error());
    ch.dead_lanes = *v;
  }
  return {};
}

/// at_ns / at_us / at_ms (and duration_*) -> ns.
Result<std::optional<std::uint64_t>> get_time(const YAML::Node& n, std::string_view where, std::string_view stem) {
  static constexpr std::pair<std::string_view, std::uint64_t> kUnits[] = {
      {"_ns", 1}, {"_us", 1'000}, {"_ms", 1'000'000}};
  for (const auto& [suffix, mult] : kUnits) {
    const std::string key = fmt::format("{}{}", stem, suffix);
    if (n[key]) {
      auto v = get_u64(n[key], fmt::format("{}.{}", where, key));
      if (!v) return std::unexpected(v.error());
      if (*v > ~0ULL / mult) return bad(fmt::format("{}.{}: {} overflows 64-bit nanoseconds", where, key, *v));
      return std::optional<std::uint64_t>(*v * mult);
    }
  }
  return std::optional<std::uint64_t>{};
}

Result<FabricSpec> parse_root(const YAML::Node& root) {
  FabricSpec s;
  if (auto r = check_keys(root, "topology", {"name", "cards", "switches", "cables", "faults"}); !r) {
    return std::unexpected(r.error());
  }
  if (const auto nm = root["name"]; nm && !nm.IsNull()) {
    if (!nm.IsScalar()) return bad("name: expected a string");
    s.name = nm.Scalar();
  }
  const auto cards = root["cards"];
  if (!cards) return bad("topology: needs 'cards' (a count, or {count, hbm, ports, overrides})");
  if (cards.IsScalar()) {
    auto n = get_uint(cards, "cards");
    if (!n) return std::unexpected(n.error());
    s.cards = *n;
  } else {
    if (auto r = check_keys(cards, "cards", {"count", "hbm", "ports", "overrides"}); !r)
      return std::unexpected(r.error());
    if (!cards["count"]) return bad("cards: needs 'count'");
    auto n = get_uint(cards["count"], "cards.count");
    if (!n) return std::unexpected(n.error());
    s.cards = *n;
    if (cards["hbm"]) {
      auto v = get_u64(cards["hbm"], "cards.hbm");
      if (!v) return std::unexpected(v.error());
      s.hbm_bytes = *v;
    }
    if (cards["ports"]) {
      auto v = get_uint(cards["ports"], "cards.ports");
      if (!v) return std::unexpected(v.error());
      s.ports = *v;
    }
    if (const auto ov = cards["overrides"]) {
      if (!ov.IsSequence()) return bad("cards.overrides: expected a list");
      for (std::size_t i = 0; i < ov.size(); ++i) {
        const std::string w = fmt::format("cards.overrides[{}]", i);
        if (auto r = check_keys(ov[i], w, {"card", "hbm", "ports"}); !r) return std::unexpected(r.error());
        if (!ov[i]["card"]) return bad(fmt::format("{}: needs 'card'", w));
        FabricCardOverride o;
        auto c = get_uint(ov[i]["card"], w + ".card");
        if (!c) return std::unexpected(c.error());
        o.card = *c;
        if (ov[i]["hbm"]) {
          auto v = get_u64(ov[i]["hbm"], w + ".hbm");
          if (!v) return std::unexpected(v.error());
          o.hbm_bytes = *v;
        }
        if (ov[i]["ports"]) {
          auto v = get_uint(ov[i]["ports"], w + ".ports");
          if (!v) return std::unexpected(v.error());
          o.ports = *v;
        }
        s.overrides.push_back(o);
      }
    }
  }
  if (const auto sws = root["switches"]) {
    if (!sws.IsSequence()) return bad("switches: expected a list");
    for (std::size_t i = 0; i < sws.size(); ++i) {
      const std::string w = fmt::format("switches[{}]", i);
      if (auto r = check_keys(sws[i], w, {"name", "ports", "insertion_loss_db", "connect"}); !r) {
        return std::unexpected(r.error());
      }
      FabricSwitch sw;
      if (!sws[i]["name"] || !sws[i]["name"].IsScalar()) return bad(fmt::format("{}: needs 'name'", w));
      sw.name = sws[i]["name"].Scalar();
      if (!sws[i]["ports"]) return bad(fmt::format("{}: needs 'ports'", w));
      auto p = get_uint(sws[i]["ports"], w + ".ports");
      if (!p) return std::unexpected(p.error());
      sw.ports = *p;
      if (sws[i]["insertion_loss_db"]) {
        auto v = get_double(sws[i]["insertion_loss_db"], w + ".insertion_loss_db");
        if (!v) return std::unexpected(v.error());
        sw.insertion_loss_db = *v;
      }
      if (const auto cx = sws[i]["connect"]) {
        if (!cx.IsSequence()) return bad(fmt::format("{}.connect: expected a list of [A, B] port pairs", w));
        for (std::size_t k = 0; k < cx.size(); ++k) {
          const std::string wk = fmt::format("{}.connect[{}]", w, k);
          if (!cx[k].IsSequence() || cx[k].size() != 2) return bad(fmt::format("{}: expected [A, B]", wk));
          auto x = get_uint(cx[k][0], wk);
          if (!x) return std::unexpected(x.error());
          auto y = get_uint(cx[k][1], wk);
          if (!y) return std::unexpected(y.error());
          sw.cross_connects.emplace_back(*x, *y);
        }
      }
      s.switches.push_back(std::move(sw));
    }
  }
  if (const auto cabs = root["cables"]) {
    if (!cabs.IsSequence()) return bad("cables: expected a list");
    s.cables.reserve(cabs.size());
    for (std::size_t i = 0; i < cabs.size(); ++i) {
      const std::string w = fmt::format("cables[{}]", i);
      if (auto r = check_keys(cabs[i], w, {"a", "b", "loss_db", "snr_penalty_db", "dead_lanes"}); !r) {
        return std::unexpected(r.error());
      }
      FabricCable c;
      auto a = parse_end(s, cabs[i]["a"], w + ".a");
      if (!a) return std::unexpected(a.error());
      auto b = parse_end(s, cabs[i]["b"], w + ".b");
      if (!b) return std::unexpected(b.error());
      c.a = *a;
      c.b = *b;
      if (auto r = parse_channel(cabs[i], w, c.channel); !r) return std::unexpected(r.error());
      s.cables.push_back(c);
    }
  }
  if (const auto fs = root["faults"]) {
    if (!fs.IsSequence()) return bad("faults: expected a list");
    for (std::size_t i = 0; i < fs.size(); ++i) {
      const std::string w = fmt::format("faults[{}]", i);
      if (auto r = check_keys(fs[i], w,
                              {"at_ns", "at_us", "at_ms", "kind", "card", "engine", "queue", "port", "lane", "count",
                               "value", "duration_ns", "duration_us", "duration_ms"});
          !r) {
        return std::unexpected(r.error());
      }
      FabricFault f;
      auto at = get_time(fs[i], w, "at");
      if (!at) return std::unexpected(at.error());
      if (!*at) return bad(fmt::format("{}: needs at_ns, at_us or at_ms", w));
      f.at_ns = **at;
      auto dur = get_time(fs[i], w, "duration");
      if (!dur) return std::unexpected(dur.error());
      f.duration_ns = dur->value_or(0);
      if (!fs[i]["kind"] || !fs[i]["kind"].IsScalar()) return bad(fmt::format("{}: needs 'kind'", w));
      f.kind = fs[i]["kind"].Scalar();
      if (!fs[i]["card"]) return bad(fmt::format("{}: needs 'card'", w));
      auto c = get_uint(fs[i]["card"], w + ".card");
      if (!c) return std::unexpected(c.error());
      f.card = *c;
      for (auto [key, field] : {std::pair{"engine", &f.engine}, std::pair{"queue", &f.queue},
                                std::pair{"port", &f.port}, std::pair{"lane", &f.lane}}) {
        if (!fs[i][key]) continue;
        auto v = get_uint(fs[i][key], fmt::format("{}.{}", w, key));
        if (!v) return std::unexpected(v.error());
        *field = *v;
      }
      if (fs[i]["count"]) {
        auto v = get_uint(fs[i]["count"], w + ".count");
        if (!v) return std::unexpected(v.error());
        f.count = *v;
      }
      if (fs[i]["value"]) {
        auto v = get_double(fs[i]["value"], w + ".value");
        if (!v) return std::unexpected(v.error());
        f.value = *v;
      }
      s.faults.push_back(std::move(f));
    }
  }
  return s;
}

}  // namespace

// ==== FabricSpec ==============================================================================

unsigned FabricSpec::ports_of(std::uint32_t card) const noexcept {
  for (const auto& o : overrides) {
    if (o.card == card && o.ports) return *o.ports;
  }
  return ports;
}

std::uint64_t FabricSpec::hbm_of(std::uint32_t card) const noexcept {
  for (const auto& o : overrides) {
    if (o.card == card && o.hbm_bytes) return *o.hbm_bytes;
  }
  return hbm_bytes;
}

std::optional<std::uint32_t> FabricSpec::switch_index(std::string_view n) const noexcept {
  for (std::size_t i = 0; i < switches.size(); ++i) {
    if (switches[i].name == n) return static_cast<std::uint32_t>(i);
  }
  return std::nullopt;
}

std::string FabricSpec::end_name(const FabricEnd& e) const {
  if (e.on_switch) {
    return fmt::format("{}:{}", e.node < switches.size() ? switches[e.node].name : fmt::format("switch#{}", e.node),
                       e.port);
  }
  return fmt::format("{}:{}", e.node, e.port);
}

// ==== Validation ==============================================================================

Result<void> validate_fabric_spec(const FabricSpec& s) {
  if (s.cards < 1 || s.cards > kFabricMaxCards) {
    return bad(fmt::format("cards.count: {} outside 1..{}", s.cards, kFabricMaxCards));
  }
  auto check_hbm = [](std::uint64_t b, const std::string& w) -> Result<void> {
    if (b < (1ULL << 20) || b % 4096 != 0 || b > (64ULL << 30)) {
      return bad(fmt::format("{}: {} bytes; must be a multiple of 4 KiB in [1M, 64G]", w, b));
    }
    return {};
  };
  if (auto r = check_text(s.name, "name"); !r) return r;
  if (auto r = check_hbm(s.hbm_bytes, "cards.hbm"); !r) return r;
  if (s.ports < 1 || s.ports > kFabricMaxCardPorts) {
    return bad(fmt::format("cards.ports: {} outside 1..{}", s.ports, kFabricMaxCardPorts));
  }
  for (std::size_t i = 0; i < s.overrides.size(); ++i) {
    const auto& o = s.overrides[i];
    const std::string w = fmt::format("cards.overrides[{}]", i);
    if (o.card >= s.cards) return bad(fmt::format("{}.card: card {} outside 0..{}", w, o.card, s.cards - 1));
    for (std::size_t j = 0; j < i; ++j) {
      if (s.overrides[j].card == o.card) {
        return bad(fmt::format("{}.card: card {} already overridden by cards.overrides[{}]", w, o.card, j));
      }
    }
    if (o.hbm_bytes) {
      if (auto r = check_hbm(*o.hbm_bytes, w + ".hbm"); !r) return r;
    }
    if (o.ports && (*o.ports < 1 || *o.ports > kFabricMaxCardPorts)) {
      return bad(fmt::format("{}.ports: {} outside 1..{}", w, *o.ports, kFabricMaxCardPorts));
    }
  }
  if (s.switches.size() > kFabricMaxSwitches) {
    return bad(fmt::format("switches: {} switches; at most {}", s.switches.size(), kFabricMaxSwitches));
  }
  std::size_t switch_ports = 0;
  for (std::size_t i = 0; i < s.switches.size(); ++i) {
    const auto& sw = s.switches[i];
    const std::string w = fmt::format("switches[{}]", i);
    switch_ports += std::min<std::size_t>(sw.ports, kFabricMaxSwitchPorts + 1);
    if (switch_ports > kFabricMaxTotalSwitchPorts) {
      return bad(fmt::format("{}.ports: the switches have more than {} ports in all", w, kFabricMaxTotalSwitchPorts));
    }
    if (sw.name.empty()) return bad(fmt::format("{}.name: empty", w));
    if (all_digits(sw.name)) {
      return bad(fmt::format("{}.name: '{}' is all digits (reserved for card indices)", w, sw.name));
    }
    if (auto r = check_text(sw.name, w + ".name"); !r) return r;
    if (sw.name.find(':') != std::string::npos) return bad(fmt::format("{}.name: '{}' contains ':'", w, sw.name));
    for (std::size_t j = 0; j < i; ++j) {
      if (s.switches[j].name == sw.name) {
        return bad(fmt::format("{}.name: '{}' already names switches[{}]", w, sw.name, j));
      }
    }
    if (sw.ports < 1 || sw.ports > kFabricMaxSwitchPorts) {
      return bad(fmt::format("{}.ports: {} outside 1..{}", w, sw.ports, kFabricMaxSwitchPorts));
    }
    if (!(sw.insertion_loss_db >= 0) || !std::isfinite(sw.insertion_loss_db)) {
      return bad(fmt::format("{}.insertion_loss_db: {} must be finite and >= 0", w, sw.insertion_loss_db));
    }
  }
  // Cables: ends in range, each port used once.
  PortIndex idx(s);
  std::vector<std::int64_t> used(idx.total, -1);  // cable index * 2 + (b ? 1 : 0)
  for (std::size_t i = 0; i < s.cables.size(); ++i) {
    const auto& c = s.cables[i];
    for (int side = 0; side < 2; ++side) {
      const FabricEnd& e = side == 0 ? c.a : c.b;
      const std::string w = fmt::format("cables[{}].{}", i, side == 0 ? 'a' : 'b');
      if (e.on_switch) {
        if (e.node >= s.switches.size()) return bad(fmt::format("{}: unknown switch #{}", w, e.node));
        const auto& sw = s.switches[e.node];
        if (e.port >= sw.ports) {
          return bad(fmt::format("{}: port {} beyond switch '{}' ({} ports: 0..{})", w, e.port, sw.name, sw.ports,
                                 sw.ports - 1));
        }
      } else {
        if (e.node >= s.cards) {
          return bad(fmt::format("{}: card {} outside 0..{}", w, e.node, s.cards - 1));
        }
        const unsigned np = s.ports_of(e.node);
        if (e.port >= np) {
          return bad(fmt::format("{}: port {} beyond card {} ({} ports: 0..{})", w, e.port, e.node, np, np - 1));
        }
      }
      const auto d = idx.of(e);
      if (used[d] >= 0) {
        return bad(fmt::format("{}: port {} already used by cables[{}].{}", w, s.end_name(e), used[d] / 2,
                               used[d] % 2 ? 'b' : 'a'));
      }
      used[d] = static_cast<std::int64_t>(i * 2 + static_cast<std::size_t>(side));
    }
    const std::string w = fmt::format("cables[{}]", i);
    if (!(c.channel.loss_db >= 0)) return bad(fmt::format("{}.loss_db: {} must be >= 0", w, c.channel.loss_db));
    if (!std::isfinite(c.channel.loss_db))
      return bad(fmt::format("{}.loss_db: {} must be finite", w, c.channel.loss_db));
    if (!(c.channel.snr_penalty_db >= 0) || !std::isfinite(c.channel.snr_penalty_db)) {
      return bad(fmt::format("{}.snr_penalty_db: {} must be >= 0", w, c.channel.snr_penalty_db));
    }
  }
  for (std::size_t i = 0; i < s.switches.size(); ++i) {
    const auto& sw = s.switches[i];
    std::vector<std::int64_t> in(sw.ports, -1);
    for (std::size_t k = 0; k < sw.cross_connects.size(); ++k) {
      const std::string w = fmt::format("switches[{}].connect[{}]", i, k);
      const auto [x, y] = sw.cross_connects[k];
      for (unsigned p : {x, y}) {
        if (p >= sw.ports) {
          return bad(
              fmt::format("{}: port {} beyond switch '{}' ({} ports: 0..{})", w, p, sw.name, sw.ports, sw.ports - 1));
        }
      }
      if (x == y) return bad(fmt::format("{}: port {} cross-connected to itself", w, x));
      for (unsigned p : {x, y}) {
        if (in[p] >= 0) return bad(fmt::format("{}: port {} already in connect[{}]", w, p, in[p]));
        in[p] = static_cast<std::int64_t>(k);
        if (used[idx.switch_base[i] + p] < 0) {
          return bad(fmt::format("{}: port {} of switch '{}' has no cable", w, p, sw.name));
        }
      }
    }
  }
  for (std::size_t i = 0; i < s.faults.size(); ++i) {
    const auto& f = s.faults[i];
    const std::string w = fmt::format("faults[{}]", i);
    if (std::find(std::begin(kFaultKinds), std::end(kFaultKinds), f.kind) == std::end(kFaultKinds)) {
      return bad(fmt::format("{}.kind: unknown fault kind '{}' (accepted: {})", w, f.kind,
                             fmt::join(std::begin(kFaultKinds), std::end(kFaultKinds), ", ")));
    }
    if (f.card >= s.cards) return bad(fmt::format("{}.card: card {} outside 0..{}", w, f.card, s.cards - 1));
    if (f.engine && *f.engine >= kEngines) {
      return bad(fmt::format("{}.engine: {} outside 0..{}", w, *f.engine, kEngines - 1));
    }
    if (f.queue && *f.queue >= kQueuesPerEngine) {
      return bad(fmt::format("{}.queue: {} outside 0..{}", w, *f.queue, kQueuesPerEngine - 1));
    }
    if (f.port && *f.port >= s.ports_of(f.card)) {
      return bad(fmt::format("{}.port: port {} beyond card {} ({} ports)", w, *f.port, f.card, s.ports_of(f.card)));
    }
    if (f.lane && *f.lane >= kFabricLanesPerPort) {
      return bad(fmt::format("{}.lane: {} outside 0..{}", w, *f.lane, kFabricLanesPerPort - 1));
    }
    if (f.count == 0) return bad(fmt::format("{}.count: must be >= 1", w));
    if (!std::isfinite(f.value)) return bad(fmt::format("{}.value: {} must be finite", w, f.value));
    if (is_link_fault(f.kind) && !f.port) return bad(fmt::format("{}.port: {} needs a port", w, f.kind));
    if (f.kind == "lane_loss" && !f.lane) return bad(fmt::format("{}.lane: lane_loss needs a lane", w));
    if ((f.kind == "engine_hang" || f.kind == "completion_error") && !f.engine) {
      return bad(fmt::format("{}.engine: {} needs an engine", w, f.kind));
    }
  }
  return {};
}

// ==== Parse / load / write ====================================================================

namespace {
/// A YAML event sink that keeps nothing: used to see whether a second document follows.
class DiscardEvents final : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};
}  // namespace

Result<FabricSpec> parse_fabric_spec(std::string_view text) {
  YAML::Node root;
  try {
    // One document: parse the first, then ask the parser for a second without building it.
    // (YAML::LoadAll is not used: on some malformed streams yaml-cpp 0.7 keeps producing empty
    // documents without consuming input, so it never returns -- found by fuzz_fabric_spec.)
    const std::string owned(text);
    root = YAML::Load(owned);
    if (root.IsNull()) return bad("topology: empty (expected a map with 'cards')");
    std::istringstream in(owned);
    YAML::Parser parser(in);
    DiscardEvents discard;
    if (!parser.HandleNextDocument(discard) || parser.HandleNextDocument(discard)) {
      return bad("topology: more than one YAML document ('---'); a topology file holds one");
    }
  } catch (const YAML::Exception& e) {
    return bad(
        fmt::format("topology: not YAML/JSON: line {}, column {}: {}", e.mark.line + 1, e.mark.column + 1, e.msg));
  }
  Result<FabricSpec> s;
  try {
    s = parse_root(root);
  } catch (const YAML::Exception& e) {
    return bad(fmt::format("topology: bad value at line {}, column {}: {}", e.mark.line + 1, e.mark.column + 1, e.msg));
  }
  if (!s) return s;
  if (auto r = validate_fabric_spec(*s); !r) return std::unexpected(r.error());
  return s;
}

Result<FabricSpec> load_fabric_spec(const std::filesystem::path& path) {
  if (std::error_code ec; std::filesystem::is_directory(path, ec)) {
    return fail(Code::kInvalidArgument, fmt::format("topology file '{}': is a directory", path.string()));
  }
  const std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) return fail_errno(errno == 0 ? ENOENT : errno, fmt::format("topology file '{}'", path.string()));
  // Read at most kFabricMaxFileBytes + 1: /dev/zero or a runaway pipe must not hang or exhaust memory.
  std::string text;
  std::array<char, 65536> buf;
  while (text.size() <= kFabricMaxFileBytes) {
    const std::size_t n = std::fread(buf.data(), 1, buf.size(), f.get());
    text.append(buf.data(), n);
    if (n < buf.size()) break;
  }
  if (std::ferror(f.get()) != 0) {
    return fail_errno(errno == 0 ? EIO : errno, fmt::format("topology file '{}': read failed", path.string()));
  }
  if (text.size() > kFabricMaxFileBytes) {
    return fail(Code::kInvalidArgument, fmt::format("topology file '{}': larger than {} MiB, not a topology file",
                                                    path.string(), kFabricMaxFileBytes >> 20));
  }
  auto s = parse_fabric_spec(text);
  if (!s) return std::unexpected(std::move(Error(s.error())).prefixed(path.string()));
  return s;
}

namespace {
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

// ==== Light paths ===========================================================================

std::optional<FabricLightPath> trace_light_path(const FabricSpec& spec, std::uint32_t card, unsigned port) {
  return CableIndex(spec).trace(spec, card, port);
}

// ==== Generators ============================================================================

std::string_view fabric_kind_name(FabricKind k) noexcept {
  switch (k) {
    case FabricKind::kMesh: return "mesh";
    case FabricKind::kTorus2d: return "torus2d";
    case FabricKind::kTorus3d: return "torus3d";
    case FabricKind::kHypercube: return "hypercube";
    case FabricKind::kFatTree: return "fat-tree";
    case FabricKind::kDragonfly: return "dragonfly";
  }
  return "unknown";
}

Result<FabricKind> parse_fabric_kind(std::string_view n) {
  for (auto k : {FabricKind::kMesh, FabricKind::kTorus2d, FabricKind::kTorus3d, FabricKind::kHypercube,
                 FabricKind::kFatTree, FabricKind::kDragonfly}) {
    if (fabric_kind_name(k) == n) return k;
  }
  if (n == "torus" || n == "torus2") return FabricKind::kTorus2d;
  if (n == "torus3") return FabricKind::kTorus3d;
  if (n == "fattree" || n == "clos") return FabricKind::kFatTree;
  if (n == "full-mesh" || n == "fullmesh") return FabricKind::kMesh;
  return bad(
      fmt::format("unknown fabric kind '{}' (accepted: mesh, torus2d, torus3d, hypercube, fat-tree, dragonfly)", n));
}

Result<std::vector<unsigned>> parse_fabric_dims(std::string_view text) {
  std::vector<unsigned> d;
  const std::string_view orig = text;
  while (true) {
    const auto x = text.find_first_of("xX");
    const auto part = text.substr(0, x);
    unsigned v = 0;
    auto [p, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
    if (part.empty() || ec != std::errc() || p != part.data() + part.size() || v == 0) {
      return bad(fmt::format("dims '{}': expected AxB or AxBxC with positive integers", orig));
    }
    d.push_back(v);
    if (x == std::string_view::npos) break;
    text = text.substr(x + 1);
  }
  if (d.size() < 2 || d.size() > 3) return bad(fmt::format("dims '{}': expected 2 or 3 dimensions", orig));
  return d;
}

namespace {

void add_cable(FabricSpec& s, FabricEnd a, FabricEnd b, const FabricChannel& ch) {
  s.cables.push_back(FabricCable{a, b, ch});
}
FabricEnd card_end(std::uint32_t c, unsigned p) { return FabricEnd{false, c, p}; }
FabricEnd sw_end(std::uint32_t s, unsigned p) { return FabricEnd{true, s, p}; }

Result<FabricSpec> gen_mesh(unsigned n, const FabricGenOptions& o) {
  const FabricChannel ch = o.channel.value_or(FabricChannel{});
  if (n > kFabricMaxCardPorts + 1) {
    return bad(fmt::format("mesh of {} cards needs {} ports per card; a card has at most {} (mesh fits 1..{} cards)", n,
                           n - 1, kFabricMaxCardPorts, kFabricMaxCardPorts + 1));
  }
  FabricSpec s;
  s.name = fmt::format("mesh {}", n);
  s.cards = n;
  s.ports = std::max(1u, n - 1);
  for (std::uint32_t a = 0; a < n; ++a) {
    for (std::uint32_t b = a + 1; b < n; ++b) add_cable(s, card_end(a, b - 1), card_end(b, a), ch);
  }
  return s;
}

std::vector<unsigned> near_cubic(unsigned n, unsigned k) {
  std::vector<unsigned> best;
  double best_score = 1e18;
  if (k == 2) {
    for (unsigned a = 1; a * a <= n; ++a) {
      if (n % a == 0) best = {a, n / a};
    }
    return best;
  }
  for (unsigned a = 1; a * a * a <= n; ++a) {
    if (n % a) continue;
    for (unsigned b = a; b * b <= n / a; ++b) {
      if ((n / a) % b) continue;
      const unsigned c = n / a / b;
      const double score = static_cast<double>(c) / a;
      if (score < best_score) {
        best_score = score;
        best = {a, b, c};
      }
    }
  }
  return best;
}

Result<FabricSpec> gen_torus(unsigned n, unsigned nd, const FabricGenOptions& o) {
  const FabricChannel ch = o.channel.value_or(FabricChannel{});
  std::vector<unsigned> dims = o.dims;
  if (dims.empty()) dims = near_cubic(n, nd);
  if (dims.size() != nd) {
    return bad(fmt::format("torus{}d needs {} dims, got {}", nd, nd, dims.size()));
  }
  std::uint64_t prod = 1;  // 64-bit: dims up to 2^32-1 each must not wrap to a matching count
  for (unsigned d : dims) prod = std::min<std::uint64_t>(prod * d, std::uint64_t{1} << 40);
  if (prod != n) {
    return bad(fmt::format("torus dims {} hold {} cards, not {}", fmt::join(dims, "x"), prod, n));
  }
  FabricSpec s;
  s.name = fmt::format("torus {}", fmt::join(dims, "x"));
  s.cards = n;
  s.ports = 2 * nd;
  std::vector<unsigned> stride(nd, 1);
  for (unsigned i = 1; i < nd; ++i) stride[i] = stride[i - 1] * dims[i - 1];
  for (std::uint32_t c = 0; c < n; ++c) {
    for (unsigned i = 0; i < nd; ++i) {
      const unsigned k = dims[i];
      const unsigned x = (c / stride[i]) % k;
      if (k == 1) continue;
      if (k == 2 && x == 1) continue;  // one link per pair when the ring has two cards
      const std::uint32_t next = c - x * stride[i] + ((x + 1) % k) * stride[i];
      add_cable(s, card_end(c, 2 * i), card_end(next, 2 * i + 1), ch);
    }
  }
  return s;
}

Result<FabricSpec> gen_hypercube(unsigned n, const FabricGenOptions& o) {
  const FabricChannel ch = o.channel.value_or(FabricChannel{});
  if (!std::has_single_bit(n)) {
    return bad(fmt::format("hypercube needs a power of two cards (2, 4, ..., 1024), got {}", n));
  }
  const unsigned d = static_cast<unsigned>(std::countr_zero(n));
  FabricSpec s;
  s.name = fmt::format("hypercube {}", d);
  s.cards = n;
  s.ports = std::max(1u, d);
  for (std::uint32_t c = 0; c < n; ++c) {
    for (unsigned i = 0; i < d; ++i) {
      const std::uint32_t p = c ^ (1u << i);
      if (c < p) add_cable(s, card_end(c, i), card_end(p, i), ch);
    }
  }
  return s;
}

Result<FabricSpec> gen_fat_tree(unsigned n, const FabricGenOptions& o) {
  const FabricChannel ch = o.channel.value_or(FabricChannel{0.5, 0.0, 0});
  const unsigned u = o.card_uplinks ? o.card_uplinks : 4;
  const unsigned rl = o.leaf_radix ? o.leaf_radix : 32;
  if (u > kFabricMaxCardPorts) return bad(fmt::format("fat-tree: {} uplinks per card; a card has at most 16 ports", u));
  if (rl % 2 || rl < 2 * u) {
    return bad(
        fmt::format("fat-tree: leaf radix {} must be even and >= 2 x uplinks ({}): half the ports face cards, "
                    "half face spines",
                    rl, 2 * u));
  }
  const unsigned down = rl / 2;
  if (down % u) {
    return bad(
        fmt::format("fat-tree: a leaf's {} card-facing ports are not a multiple of {} uplinks per card", down, u));
  }
  const unsigned per_leaf = down / u;
  if (n % per_leaf || n / per_leaf < 2) {
    return bad(
        fmt::format("fat-tree: {} cards do not fill 2 or more leaves of {} cards (leaf radix {}, {} uplinks); "
                    "use a multiple of {} cards, at least {}",
                    n, per_leaf, rl, u, per_leaf, 2 * per_leaf));
  }
  const unsigned leaves = n / per_leaf;
  unsigned ppl = 1;  // ports of each spine per leaf
  if (o.spine_radix) {
    if (o.spine_radix % leaves || down % (o.spine_radix / leaves)) {
      return bad(
          fmt::format("fat-tree: spine radix {} must be a multiple k of the {} leaves with k dividing the {} "
                      "up ports of a leaf (e.g. {})",
                      o.spine_radix, leaves, down, leaves));
    }
    ppl = o.spine_radix / leaves;
  }
  const unsigned spines = down / ppl;
  const unsigned rs = leaves * ppl;
  if (rs > kFabricMaxSwitchPorts) {
    return bad(fmt::format("fat-tree: spine radix {} exceeds {}", rs, kFabricMaxSwitchPorts));
  }
  FabricSpec s;
  s.name = fmt::format("fat-tree {} cards, {} leaves x{}, {} spines x{}", n, leaves, rl, spines, rs);
  s.cards = n;
  s.ports = u;
  for (unsigned l = 0; l < leaves; ++l) {
    FabricSwitch sw{fmt::format("leaf{}", l), rl, o.switch_insertion_loss_db, {}};
    // Down port d to up port (d + l) mod down: rotating by the leaf index mixes which card of
    // the far leaf a light path reaches, so the circuit graph is connected.
    for (unsigned d = 0; d < down; ++d) sw.cross_connects.emplace_back(d, down + (d + l) % down);
    s.switches.push_back(std::move(sw));
  }
  // Spines: up index k pairs the leaves by a pseudo-random perfect matching (seeded,
  // deterministic; odd leaf counts leave one leaf idle per k). Random matchings make the
  // circuit graph an expander: connected with a small diameter. Of 8 seeds the one with the
  // smallest circuit diameter is kept.
  const std::size_t first_spine = s.switches.size();
  auto add_spines = [&](std::uint64_t seed) {
    s.switches.resize(first_spine);
    std::uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 0x632BE59BD9B4E019ULL;
    auto next = [&x]() {  // splitmix64: the same numbers on every platform
      std::uint64_t z = (x += 0x9E3779B97F4A7C15ULL);
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
      return z ^ (z >> 31);
    };
    std::vector<std::vector<unsigned>> match(down);  // per up index k: leaves in pairing order
    for (auto& m : match) {
      m.resize(leaves);
      std::iota(m.begin(), m.end(), 0u);
      for (unsigned i = leaves - 1; i > 0; --i) std::swap(m[i], m[next() % (i + 1)]);
    }
    for (unsigned sp = 0; sp < spines; ++sp) {
      FabricSwitch sw{fmt::format("spine{}", sp), rs, o.switch_insertion_loss_db, {}};
      for (unsigned j = 0; j < ppl; ++j) {
        const auto& m = match[sp * ppl + j];  // the leaves' up port index using this spine port
        for (unsigned i = 0; i + 1 < leaves; i += 2) sw.cross_connects.emplace_back(m[i] * ppl + j, m[i + 1] * ppl + j);
      }
      s.switches.push_back(std::move(sw));
    }
  };
  for (std::uint32_t c = 0; c < n; ++c) {
    const unsigned l = c / per_leaf, local = c % per_leaf;
    for (unsigned j = 0; j < u; ++j) add_cable(s, card_end(c, j), sw_end(l, local * u + j), ch);
  }
  for (unsigned l = 0; l < leaves; ++l) {
    for (unsigned k = 0; k < down; ++k) {
      const unsigned sp = k / ppl, j = k % ppl;
      add_cable(s, sw_end(l, down + k), sw_end(leaves + sp, l * ppl + j), ch);
    }
  }
  std::uint64_t best_seed = 0;
  int best_diameter = -1;
  for (std::uint64_t seed = 0; seed < 8; ++seed) {
    add_spines(seed);
    const int d = analyze_fabric(s, FabricView::kCircuit).diameter;
    if (d >= 0 && (best_diameter < 0 || d < best_diameter)) {
      best_diameter = d;
      best_seed = seed;
    }
  }
  add_spines(best_seed);
  return s;
}

unsigned dragonfly_ports(unsigned g, unsigned a) { return (a - 1) + (g - 1 + a - 1) / a; }

Result<FabricSpec> gen_dragonfly(unsigned n, const FabricGenOptions& o) {
  const FabricChannel ch = o.channel.value_or(FabricChannel{});
  unsigned g = o.groups;
  if (g == 0) {
    unsigned best = 0, best_ports = ~0u;
    for (unsigned cand = 2; cand <= n; ++cand) {
      if (n % cand) continue;
      const unsigned p = dragonfly_ports(cand, n / cand);
      if (p <= best_ports) {  // ties: more groups
        best_ports = p;
        best = cand;
      }
    }
    g = best;
  }
  if (n < 2) return bad(fmt::format("dragonfly needs at least 2 cards (2 groups of 1), got {}", n));
  if (g < 2 || n % g) {
    return bad(fmt::format("dragonfly: {} groups must be >= 2 and divide {} cards", g, n));
  }
  const unsigned a = n / g;
  const unsigned h = (g - 1 + a - 1) / a;
  const unsigned ports = (a - 1) + h;
  if (ports > kFabricMaxCardPorts) {
    return bad(
        fmt::format("dragonfly: {} groups of {} cards need {} local + {} global = {} ports per card (max {}); "
                    "one global link per group pair fits about 730 cards at most",
                    g, a, a - 1, h, ports, kFabricMaxCardPorts));
  }
  FabricSpec s;
  s.name = fmt::format("dragonfly {} groups x {} cards, {} global ports", g, a, h);
  s.cards = n;
  s.ports = std::max(1u, ports);
  for (unsigned grp = 0; grp < g; ++grp) {
    for (unsigned x = 0; x < a; ++x) {
      for (unsigned y = x + 1; y < a; ++y) {
        add_cable(s, card_end(grp * a + x, y - 1), card_end(grp * a + y, x), ch);
      }
    }
  }
  std::vector<unsigned> next(g, 0);  // next free global slot per group: card slot % a, port a-1 + slot / a
  for (unsigned x = 0; x < g; ++x) {
    for (unsigned y = x + 1; y < g; ++y) {
      const unsigned sx = next[x]++, sy = next[y]++;
      add_cable(s, card_end(x * a + sx % a, a - 1 + sx / a), card_end(y * a + sy % a, a - 1 + sy / a), ch);
    }
  }
  return s;
}

}  // namespace

Result<FabricSpec> generate_fabric(FabricKind kind, unsigned cards, const FabricGenOptions& o) {
  if (cards < 1 || cards > kFabricMaxCards) {
    return bad(fmt::format("{}: {} cards outside 1..{}", fabric_kind_name(kind), cards, kFabricMaxCards));
  }
  Result<FabricSpec> s;
  switch (kind) {
    case FabricKind::kMesh: s = gen_mesh(cards, o); break;
    case FabricKind::kTorus2d: s = gen_torus(cards, 2, o); break;
    case FabricKind::kTorus3d: s = gen_torus(cards, 3, o); break;
    case FabricKind::kHypercube: s = gen_hypercube(cards, o); break;
    case FabricKind::kFatTree: s = gen_fat_tree(cards, o); break;
    case FabricKind::kDragonfly: s = gen_dragonfly(cards, o); break;
  }
  if (!s) return s;
  s->hbm_bytes = o.hbm_bytes;
  if (auto r = validate_fabric_spec(*s); !r) {
    return std::unexpected(std::move(Error(r.error())).prefixed("generated fabric invalid"));
  }
  return s;
}

// ==== Graph properties ======================================================================

FabricProperties analyze_fabric(const FabricSpec& s, FabricView view) {
  FabricProperties pr;
  const std::size_t nc = s.cards;
  const bool physical = view == FabricView::kPhysical;
  const std::size_t nv = nc + (physical ? s.switches.size() : 0);
  std::vector<std::pair<std::uint32_t, std::uint32_t>> edges;
  if (physical) {
    auto vtx = [&](const FabricEnd& e) { return e.on_switch ? static_cast<std::uint32_t>(nc + e.node) : e.node; };
    for (const auto& c : s.cables) edges.emplace_back(vtx(c.a), vtx(c.b));
  } else {
    const CableIndex ci(s);
    for (std::uint32_t c = 0; c < nc; ++c) {
      for (unsigned p = 0; p < s.ports_of(c); ++p) {
        const auto lp = ci.trace(s, c, p);
        if (lp && (std::pair(c, p) < std::pair(lp->card, lp->port))) edges.emplace_back(c, lp->card);
      }
    }
  }
  pr.edges = static_cast<unsigned>(edges.size());
  std::vector<std::vector<std::uint32_t>> adj(nv);
  for (auto [a, b] : edges) {
    adj[a].push_back(b);
    adj[b].push_back(a);
  }
  for (std::size_t v = 0; v < nc; ++v) ++pr.card_degrees[static_cast<unsigned>(adj[v].size())];
  for (const auto& sw : s.switches) ++pr.switch_radixes[sw.ports];
  if (physical) {
    for (std::size_t v = nc; v < nv; ++v) ++pr.switch_degrees[static_cast<unsigned>(adj[v].size())];
  }
  // Diameter: BFS from every card, over all vertices, measured between cards.
  std::vector<int> dist(nv);
  std::vector<std::uint32_t> q(nv);
  for (std::uint32_t src = 0; src < nc && pr.diameter >= 0; ++src) {
    std::fill(dist.begin(), dist.end(), -1);
    dist[src] = 0;
    std::size_t head = 0, tail = 0;
    q[tail++] = src;
    while (head < tail) {
      const auto v = q[head++];
      for (auto w : adj[v]) {
        if (dist[w] < 0) {
          dist[w] = dist[v] + 1;
          q[tail++] = w;
        }
      }
    }
    for (std::size_t c = 0; c < nc; ++c) {
      if (dist[c] < 0) {
        pr.diameter = -1;
        break;
      }
      pr.diameter = std::max(pr.diameter, dist[c]);
    }
  }
  // Bisection.
  const std::size_t half = nc / 2;
  if (nc < 2) return pr;
  if (nc <= 20 && nv == nc) {
    unsigned best = ~0u;
    const std::uint32_t full = (1u << nc) - 1;
    for (std::uint32_t m = 1; m <= full; m += 2) {  // card 0 always on side 1 (symmetry)
      if (static_cast<std::size_t>(std::popcount(m)) != half && static_cast<std::size_t>(std::popcount(m)) != nc - half)
        continue;
      unsigned cut = 0;
      for (auto [a, b] : edges) cut += ((m >> a) & 1u) != ((m >> b) & 1u);
      best = std::min(best, cut);
    }
    pr.bisection_width = best;
    pr.bisection_exact = true;
    return pr;
  }
  std::vector<std::uint8_t> side(nv, 0);
  unsigned best = ~0u;
  const std::size_t step = nc > 1024 ? nc / 1024 : 1;
  for (std::size_t off = 0; off < nc; off += step) {
    for (std::size_t c = 0; c < nc; ++c) side[c] = ((c + nc - off) % nc) < half ? 1 : 0;
    // Switches: on the side most of their neighbours are, a few sweeps (leaves first, then spines).
    for (std::size_t v = nc; v < nv; ++v) side[v] = 0;
    for (int sweep = 0; sweep < 3; ++sweep) {
      for (std::size_t v = nc; v < nv; ++v) {
        int ones = 0, zeros = 0;
        for (auto w : adj[v]) {
          if (w >= nc && sweep == 0 && w > v) continue;  // not placed yet in the first sweep
          (side[w] ? ones : zeros)++;
        }
        side[v] = ones > zeros ? 1 : 0;
      }
    }
    unsigned cut = 0;
    for (auto [a, b] : edges) cut += side[a] != side[b];
    best = std::min(best, cut);
  }
  pr.bisection_width = best;
  pr.bisection_exact = false;
  return pr;
}

}  // namespace npo
