// SPDX-License-Identifier: Apache-2.0
// The topology plan: per-card lookups and the one validator (docs/topology.md "Validation").
// No yaml-cpp.
#include "npo/hal/topology_plan.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace npo {

namespace {

/// Most optical switches, and most switch ports in all: far above what the generators build
/// (1024 cards: at most ~3,100 switches and 65,536 switch ports), low enough that the per-port
/// tables of validation and tracing stay small for any plan.
constexpr std::size_t kFabricMaxSwitches = 4096;
constexpr std::size_t kFabricMaxTotalSwitchPorts = std::size_t{1} << 18;

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
  return {};
}

}  // namespace npo
