// SPDX-License-Identifier: Apache-2.0
// The emulator's optical fabric: cables and optical circuit switches (docs/topology.md).
#include "fabric.hpp"

#include <algorithm>
#include <mutex>

#include <fmt/format.h>

#include "npo/fw/regs.hpp"

namespace npo::emu {

namespace {
constexpr unsigned kMaxPorts = fw::regs::kMaxPorts;
constexpr unsigned kMaxSwitchPorts = 4096;
}  // namespace

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
  for (const auto& s : spec.switches) {
    c.switches.push_back(SwitchConfig{s.name, s.ports, s.insertion_loss_db, s.cross_connects});
  }
  auto ch = [](const FabricChannel& f) { return ChannelParams{f.loss_db, f.snr_penalty_db, f.dead_lanes}; };
  for (const auto& cab : spec.cables) {
    if (!cab.a.on_switch && !cab.b.on_switch) {
      c.cables.push_back(Cable{cab.a.node, cab.a.port, cab.b.node, cab.b.port, ch(cab.channel)});
    } else {
      c.switch_cables.push_back(SwitchCable{FabricPort{cab.a.on_switch, cab.a.node, cab.a.port},
                                            FabricPort{cab.b.on_switch, cab.b.node, cab.b.port}, ch(cab.channel)});
    }
  }
  for (std::size_t i = 0; i < spec.faults.size(); ++i) {
    const auto& f = spec.faults[i];
    auto kind = parse_fault_kind(f.kind);
    if (!kind) return std::unexpected(std::move(Error(kind.error())).prefixed(fmt::format("faults[{}].kind", i)));
    c.faults.push_back(
        Fault{f.at_ns, *kind, f.card, f.engine, f.queue, f.port, f.lane, f.count, f.value, f.duration_ns});
  }
  return c;
}

Result<void> OpticalFabric::build(const SystemConfig& cfg, const std::vector<unsigned>& ports_of) {
  std::unique_lock lock(mu_);
  card_ports_ = std::size_t{cfg.num_cards} * kMaxPorts;
  std::size_t total = card_ports_;
  switches_.clear();
  for (std::size_t i = 0; i < cfg.switches.size(); ++i) {
    const auto& s = cfg.switches[i];
    if (s.name.empty() || s.ports < 1 || s.ports > kMaxSwitchPorts) {
      return fail(Code::kInvalidArgument,
                  fmt::format("emulator: switches[{}] '{}': needs a name and 1..{} ports", i, s.name, kMaxSwitchPorts));
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (switches_[j].name == s.name) {
        return fail(Code::kInvalidArgument, fmt::format("emulator: switches[{}]: name '{}' used twice", i, s.name));
      }
    }
    switches_.push_back(Switch{s.name, s.ports, s.insertion_loss_db, total});
    total += s.ports;
  }
  hop_.assign(total, Hop{});
  xc_.assign(total, -1);
  auto dense = [&](const FabricPort& e, const std::string& what) -> Result<std::size_t> {
    if (e.on_switch) {
      if (e.node >= switches_.size() || e.port >= switches_[e.node].ports) {
        return fail(Code::kInvalidArgument,
                    fmt::format("emulator: {}: switch #{} port {} outside the fabric", what, e.node, e.port));
      }
      return switches_[e.node].base + e.port;
    }
    if (e.node >= cfg.num_cards || e.port >= ports_of[e.node]) {
      return fail(Code::kInvalidArgument,
                  fmt::format("emulator: {}: card {} port {} outside the system", what, e.node, e.port));
    }
    return std::size_t{e.node} * kMaxPorts + e.port;
  };
  auto plug = [&](const FabricPort& a, const FabricPort& b, const ChannelParams& ch,
                  const std::string& what) -> Result<void> {
    auto da = dense(a, what);
    if (!da) return std::unexpected(da.error());
    auto db = dense(b, what);
    if (!db) return std::unexpected(db.error());
    if (*da == *db || hop_[*da].far >= 0 || hop_[*db].far >= 0) {
      return fail(Code::kInvalidArgument, fmt::format("emulator: {}: a port is used by two cables", what));
    }
    hop_[*da] = Hop{static_cast<std::int64_t>(*db), ch};
    hop_[*db] = Hop{static_cast<std::int64_t>(*da), ch};
    return {};
  };
  for (std::size_t i = 0; i < cfg.cables.size(); ++i) {
    const auto& c = cfg.cables[i];
    if (auto r = plug(FabricPort{false, c.card_a, c.port_a}, FabricPort{false, c.card_b, c.port_b}, c.channel,
                      fmt::format("cable {}:{} - {}:{}", c.card_a, c.port_a, c.card_b, c.port_b));
        !r) {
      return r;
    }
  }
  for (std::size_t i = 0; i < cfg.switch_cables.size(); ++i) {
    const auto& c = cfg.switch_cables[i];
    if (auto r = plug(c.a, c.b, c.channel, fmt::format("switch_cables[{}]", i)); !r) return r;
  }
  for (std::size_t i = 0; i < cfg.switches.size(); ++i) {
    for (const auto& [a, b] : cfg.switches[i].cross_connects) {
      const auto& s = switches_[i];
      if (a >= s.ports || b >= s.ports || a == b || xc_[s.base + a] >= 0 || xc_[s.base + b] >= 0 ||
          hop_[s.base + a].far < 0 || hop_[s.base + b].far < 0) {
        return fail(Code::kInvalidArgument,
                    fmt::format("emulator: switch '{}': cross-connect {}-{} is out of range, repeats a port or joins "
                                "a port without cable",
                                s.name, a, b));
      }
      xc_[s.base + a] = static_cast<std::int64_t>(s.base + b);
      xc_[s.base + b] = static_cast<std::int64_t>(s.base + a);
    }
  }
  cabled_card_ports_.clear();
  for (std::size_t d = 0; d < card_ports_; ++d) {
    if (hop_[d].far >= 0) cabled_card_ports_.emplace_back(static_cast<std::uint32_t>(d / kMaxPorts), d % kMaxPorts);
  }
  return {};
}

std::optional<OpticalFabric::Traced> OpticalFabric::trace_locked(std::uint32_t card, unsigned port) const {
  if (port >= kMaxPorts) return std::nullopt;
  std::size_t at = std::size_t{card} * kMaxPorts + port;
  if (at >= card_ports_) return std::nullopt;
  Traced t{{}, ChannelParams{0.0, 0.0, 0}};
  for (std::size_t guard = 0; guard <= switches_.size() * 2 + 2; ++guard) {
    const Hop& h = hop_[at];
    if (h.far < 0) return std::nullopt;
    t.channel.loss_db += h.channel.loss_db;
    t.channel.snr_penalty_db += h.channel.snr_penalty_db;
    t.channel.dead_lanes |= h.channel.dead_lanes;
    const auto far = static_cast<std::size_t>(h.far);
    if (far < card_ports_) {
      t.peer = PortRef{static_cast<std::uint32_t>(far / kMaxPorts), static_cast<unsigned>(far % kMaxPorts)};
      return t;
    }
    const std::int64_t next = xc_[far];
    if (next < 0) return std::nullopt;
    const auto sw = std::upper_bound(switches_.begin(), switches_.end(), far,
                                     [](std::size_t v, const Switch& s) { return v < s.base; }) -
                    1;
    t.channel.loss_db += sw->insertion_loss_db;
    at = static_cast<std::size_t>(next);
  }
  return std::nullopt;  // switch-to-switch loop
}

std::optional<PortRef> OpticalFabric::resolve(std::uint32_t card, unsigned port) const {
  std::shared_lock lock(mu_);
  auto t = trace_locked(card, port);
  if (!t) return std::nullopt;
  return t->peer;
}

ChannelParams OpticalFabric::channel(std::uint32_t card, unsigned port) const {
  std::shared_lock lock(mu_);
  auto t = trace_locked(card, port);
  return t ? t->channel : ChannelParams{};
}

std::vector<std::optional<PortRef>> OpticalFabric::snapshot_locked() const {
  std::vector<std::optional<PortRef>> v;
  v.reserve(cabled_card_ports_.size());
  for (auto [c, p] : cabled_card_ports_) {
    auto t = trace_locked(c, p);
    v.push_back(t ? std::optional<PortRef>(t->peer) : std::nullopt);
  }
  return v;
}

std::vector<OpticalFabric::Change> OpticalFabric::diff_locked(const std::vector<std::optional<PortRef>>& before) const {
  std::vector<Change> out;
  const auto after = snapshot_locked();
  for (std::size_t i = 0; i < after.size(); ++i) {
    if (after[i] != before[i]) {
      out.push_back(Change{PortRef{cabled_card_ports_[i].first, cabled_card_ports_[i].second}, after[i]});
    }
  }
  return out;
}

Result<std::size_t> OpticalFabric::find_locked(std::string_view name) const {
  for (std::size_t i = 0; i < switches_.size(); ++i) {
    if (switches_[i].name == name) return i;
  }
  return fail(Code::kNotFound, fmt::format("emulator: no optical switch '{}'", name));
}

Result<std::vector<OpticalFabric::Change>> OpticalFabric::connect(std::string_view name, unsigned a, unsigned b) {
  std::unique_lock lock(mu_);
  auto i = find_locked(name);
  if (!i) return std::unexpected(i.error());
  const Switch& s = switches_[*i];
  for (unsigned p : {a, b}) {
    if (p >= s.ports) {
      return fail(Code::kOutOfRange,
                  fmt::format("emulator: switch '{}': port {} beyond its {} ports", s.name, p, s.ports));
    }
  }
  if (a == b) {
    return fail(Code::kInvalidArgument, fmt::format("emulator: switch '{}': port {} joined to itself", s.name, a));
  }
  for (unsigned p : {a, b}) {
    if (xc_[s.base + p] >= 0) {
      return fail(Code::kFailedPrecondition,
                  fmt::format("emulator: switch '{}': port {} is cross-connected to {}; disconnect it first", s.name, p,
                              static_cast<std::size_t>(xc_[s.base + p]) - s.base));
    }
    if (hop_[s.base + p].far < 0) {
      return fail(Code::kFailedPrecondition, fmt::format("emulator: switch '{}': port {} has no cable", s.name, p));
    }
  }
  const auto before = snapshot_locked();
  xc_[s.base + a] = static_cast<std::int64_t>(s.base + b);
  xc_[s.base + b] = static_cast<std::int64_t>(s.base + a);
  return diff_locked(before);
}

Result<std::vector<OpticalFabric::Change>> OpticalFabric::disconnect(std::string_view name, unsigned port) {
  std::unique_lock lock(mu_);
  auto i = find_locked(name);
  if (!i) return std::unexpected(i.error());
  const Switch& s = switches_[*i];
  if (port >= s.ports) {
    return fail(Code::kOutOfRange,
                fmt::format("emulator: switch '{}': port {} beyond its {} ports", s.name, port, s.ports));
  }
  const std::int64_t partner = xc_[s.base + port];
  if (partner < 0) {
    return fail(Code::kFailedPrecondition,
                fmt::format("emulator: switch '{}': port {} is not cross-connected", s.name, port));
  }
  const auto before = snapshot_locked();
  xc_[s.base + port] = -1;
  xc_[static_cast<std::size_t>(partner)] = -1;
  return diff_locked(before);
}

Result<std::vector<std::pair<unsigned, unsigned>>> OpticalFabric::cross_connects(std::string_view name) const {
  std::shared_lock lock(mu_);
  auto i = find_locked(name);
  if (!i) return std::unexpected(i.error());
  const Switch& s = switches_[*i];
  std::vector<std::pair<unsigned, unsigned>> out;
  for (unsigned p = 0; p < s.ports; ++p) {
    const std::int64_t q = xc_[s.base + p];
    if (q >= 0 && static_cast<std::size_t>(q) - s.base > p) {
      out.emplace_back(p, static_cast<unsigned>(static_cast<std::size_t>(q) - s.base));
    }
  }
  return out;
}

}  // namespace npo::emu
