// SPDX-License-Identifier: Apache-2.0
// Topology and scenario files: the one reader (YAML, and JSON which YAML reads too) with the
// hardened rules of docs/topology.md "File format". With topology_file_write.cpp the only hal
// code using yaml-cpp.
#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <memory>
#include <sstream>
#include <system_error>

#include <fmt/format.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include "npo/hal/topology_file.hpp"
#include "npo/hal/units.hpp"

namespace npo {

namespace {

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::unexpected<Error> bad(std::string msg) { return fail(Code::kInvalidArgument, std::move(msg)); }

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

/// at_ns / at_us / at_ms (and duration_*) -> ns; at most one of the three may be given.
Result<std::optional<std::uint64_t>> get_time(const YAML::Node& n, std::string_view where, std::string_view stem) {
  static constexpr std::pair<std::string_view, std::uint64_t> kUnits[] = {
      {"_ns", 1}, {"_us", 1'000}, {"_ms", 1'000'000}};
  std::optional<std::uint64_t> out;
  std::string first;
  for (const auto& [suffix, mult] : kUnits) {
    const std::string key = fmt::format("{}{}", stem, suffix);
    if (!n[key]) continue;
    if (out)
      return bad(
          fmt::format("{}.{}: given with {}; give one of {}_ns, {}_us, {}_ms", where, key, first, stem, stem, stem));
    auto v = get_u64(n[key], fmt::format("{}.{}", where, key));
    if (!v) return std::unexpected(v.error());
    if (*v > ~0ULL / mult) return bad(fmt::format("{}.{}: {} overflows 64-bit nanoseconds", where, key, *v));
    out = *v * mult;
    first = key;
  }
  return out;
}

/// A `faults` list of a topology or scenario file: each entry's fields and numbers (the
/// emulator checks kinds and targets).
Result<std::vector<FabricFault>> parse_faults(const YAML::Node& fs) {
  std::vector<FabricFault> out;
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
    // A kind is a name like "lane_loss": letters, digits and '_' (the emulator checks which);
    // anything else -- bytes that are not UTF-8 included -- could not be written back out.
    if (f.kind.empty() || !std::all_of(f.kind.begin(), f.kind.end(), [](char c) {
          return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
        })) {
      return bad(fmt::format("{}.kind: not a fault kind name (letters, digits and '_' only)", w));
    }
    if (!fs[i]["card"]) return bad(fmt::format("{}: needs 'card'", w));
    auto c = get_uint(fs[i]["card"], w + ".card");
    if (!c) return std::unexpected(c.error());
    f.card = *c;
    for (auto [key, field] : {std::pair{"engine", &f.engine}, std::pair{"queue", &f.queue}, std::pair{"port", &f.port},
                              std::pair{"lane", &f.lane}}) {
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
    out.push_back(std::move(f));
  }
  return out;
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
    auto faults = parse_faults(fs);
    if (!faults) return std::unexpected(faults.error());
    s.faults = std::move(*faults);
  }
  return s;
}

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

/// The one YAML document of `text`. `what` ("topology", "scenario") starts every message;
/// `needs` names what an empty document lacks.
Result<YAML::Node> load_document(std::string_view text, std::string_view what, std::string_view needs) {
  try {
    // One document: parse the first, then ask the parser for a second without building it.
    // (YAML::LoadAll is not used: on some malformed streams yaml-cpp 0.7 keeps producing empty
    // documents without consuming input, so it never returns -- found by fuzz_fabric_spec.)
    const std::string owned(text);
    YAML::Node root = YAML::Load(owned);
    if (root.IsNull()) return bad(fmt::format("{}: empty (expected a map with {})", what, needs));
    std::istringstream in(owned);
    YAML::Parser parser(in);
    DiscardEvents discard;
    if (!parser.HandleNextDocument(discard) || parser.HandleNextDocument(discard)) {
      return bad(fmt::format("{}: more than one YAML document ('---'); a {} file holds one", what, what));
    }
    return root;
  } catch (const YAML::Exception& e) {
    return bad(
        fmt::format("{}: not YAML/JSON: line {}, column {}: {}", what, e.mark.line + 1, e.mark.column + 1, e.msg));
  }
}

/// Reads at most kTopologyFileMaxBytes of `path` (a regular file or a pipe). `what` names the
/// file kind in messages ("topology file", "scenario file").
Result<std::string> read_capped(const std::filesystem::path& path, std::string_view what) {
  if (std::error_code ec; std::filesystem::is_directory(path, ec)) {
    return fail(Code::kInvalidArgument, fmt::format("{} '{}': is a directory", what, path.string()));
  }
  const std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) return fail_errno(errno == 0 ? ENOENT : errno, fmt::format("{} '{}'", what, path.string()));
  // Read at most the cap + 1: /dev/zero or a runaway pipe must not hang or exhaust memory.
  std::string text;
  std::array<char, 65536> buf;
  while (text.size() <= kTopologyFileMaxBytes) {
    const std::size_t n = std::fread(buf.data(), 1, buf.size(), f.get());
    text.append(buf.data(), n);
    if (n < buf.size()) break;
  }
  if (std::ferror(f.get()) != 0) {
    return fail_errno(errno == 0 ? EIO : errno, fmt::format("{} '{}': read failed", what, path.string()));
  }
  if (text.size() > kTopologyFileMaxBytes) {
    return fail(Code::kInvalidArgument, fmt::format("{} '{}': larger than {} MiB, not a {}", what, path.string(),
                                                    kTopologyFileMaxBytes >> 20, what));
  }
  return text;
}

}  // namespace

Result<FabricSpec> parse_fabric_spec(std::string_view text) {
  auto root = load_document(text, "topology", "'cards'");
  if (!root) return std::unexpected(root.error());
  Result<FabricSpec> s;
  try {
    s = parse_root(*root);
  } catch (const YAML::Exception& e) {
    return bad(fmt::format("topology: bad value at line {}, column {}: {}", e.mark.line + 1, e.mark.column + 1, e.msg));
  }
  if (!s) return s;
  if (auto r = validate_fabric_spec(*s); !r) return std::unexpected(r.error());
  return s;
}

Result<FabricSpec> load_fabric_spec(const std::filesystem::path& path) {
  auto text = read_capped(path, "topology file");
  if (!text) return std::unexpected(text.error());
  auto s = parse_fabric_spec(*text);
  if (!s) return std::unexpected(std::move(Error(s.error())).prefixed(path.string()));
  return s;
}

Result<FabricScenario> parse_fabric_scenario(std::string_view text) {
  auto root = load_document(text, "scenario", "'faults'");
  if (!root) return std::unexpected(root.error());
  FabricScenario sc;
  try {
    if (auto r = check_keys(*root, "scenario", {"seed", "faults"}); !r) return std::unexpected(r.error());
    if (const auto seed = (*root)["seed"]) {
      auto v = get_u64(seed, "scenario: seed");
      if (!v) return std::unexpected(v.error());
      sc.seed = *v;
    }
    const auto list = (*root)["faults"];
    if (!list) return bad("scenario: needs 'faults' (a list)");
    auto faults = parse_faults(list);
    if (!faults) return std::unexpected(std::move(Error(faults.error())).prefixed("scenario"));
    sc.faults = std::move(*faults);
  } catch (const YAML::Exception& e) {
    return bad(fmt::format("scenario: bad value at line {}, column {}: {}", e.mark.line + 1, e.mark.column + 1, e.msg));
  }
  return sc;
}

Result<FabricScenario> load_fabric_scenario(const std::filesystem::path& path) {
  auto text = read_capped(path, "scenario file");
  if (!text) return std::unexpected(text.error());
  auto s = parse_fabric_scenario(*text);
  if (!s) return std::unexpected(std::move(Error(s.error())).prefixed(path.string()));
  return s;
}

}  // namespace npo
