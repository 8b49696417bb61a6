// SPDX-License-Identifier: Apache-2.0
// The emulator's optical fabric: the system's plan and its light paths (docs/topology.md).
#include "fabric.hpp"

#include <algorithm>
#include <mutex>

#include <fmt/format.h>

namespace npo::emu {

FabricSpec plan_of(const SystemConfig& cfg) {
  FabricSpec p;
  p.cards = cfg.num_cards;
  p.hbm_bytes = cfg.card.hbm_bytes;
  p.ports = cfg.card.num_ports;
  for (std::size_t i = 0; i < cfg.per_card.size(); ++i) {
    const auto& pc = cfg.per_card[i];
    FabricCardOverride o{static_cast<std::uint32_t>(i)};
    if (pc.hbm_bytes != cfg.card.hbm_bytes) o.hbm_bytes = pc.hbm_bytes;
    if (pc.num_ports != cfg.card.num_ports) o.ports = pc.num_ports;
    if (o.hbm_bytes || o.ports) p.overrides.push_back(o);
  }
  p.switches = cfg.switches;
  p.cables.reserve(cfg.cables.size() + cfg.switch_cables.size());
  for (const auto& c : cfg.cables) {
    p.cables.push_back(
        FabricCable{FabricEnd{false, c.card_a, c.port_a}, FabricEnd{false, c.card_b, c.port_b}, c.channel});
  }
  p.cables.insert(p.cables.end(), cfg.switch_cables.begin(), cfg.switch_cables.end());
  return p;
}

Result<void> OpticalFabric::build(FabricSpec plan) {
  if (auto r = validate_fabric_spec(plan); !r) return std::unexpected(std::move(Error(r.error())).prefixed("emulator"));
  plan.faults.clear();
  std::unique_lock lock(mu_);
  plan_ = std::move(plan);
  paths_ = LightPaths(plan_);
  return {};
}

std::optional<PortRef> OpticalFabric::resolve(std::uint32_t card, unsigned port) const {
  std::shared_lock lock(mu_);
  const auto lp = paths_.trace(card, port);
  if (!lp) return std::nullopt;
  return PortRef{lp->card, lp->port};
}

ChannelParams OpticalFabric::channel(std::uint32_t card, unsigned port) const {
  std::shared_lock lock(mu_);
  const auto lp = paths_.trace(card, port);
  return lp ? lp->channel : ChannelParams{};
}

std::vector<std::optional<PortRef>> OpticalFabric::snapshot_locked() const {
  std::vector<std::optional<PortRef>> v;
  v.reserve(paths_.cabled_card_ports().size());
  for (const auto& here : paths_.cabled_card_ports()) {
    const auto lp = paths_.trace(here.card, here.port);
    v.push_back(lp ? std::optional<PortRef>(PortRef{lp->card, lp->port}) : std::nullopt);
  }
  return v;
}

std::vector<OpticalFabric::Change> OpticalFabric::reindex_locked(const std::vector<std::optional<PortRef>>& before) {
  paths_ = LightPaths(plan_);
  std::vector<Change> out;
  const auto after = snapshot_locked();  // the cabled card ports are the same: only cross-connects changed
  for (std::size_t i = 0; i < after.size(); ++i) {
    if (after[i] != before[i]) out.push_back(Change{paths_.cabled_card_ports()[i], after[i]});
  }
  return out;
}

Result<std::size_t> OpticalFabric::find_locked(std::string_view name) const {
  if (const auto i = plan_.switch_index(name)) return std::size_t{*i};
  return fail(Code::kNotFound, fmt::format("emulator: no optical switch '{}'", name));
}

std::optional<unsigned> OpticalFabric::partner_locked(std::size_t sw, unsigned port) const {
  for (const auto& [x, y] : plan_.switches[sw].cross_connects) {
    if (x == port) return y;
    if (y == port) return x;
  }
  return std::nullopt;
}

bool OpticalFabric::cabled_locked(std::size_t sw, unsigned port) const {
  const FabricEnd end{true, static_cast<std::uint32_t>(sw), port};
  return std::any_of(plan_.cables.begin(), plan_.cables.end(),
                     [&](const FabricCable& c) { return c.a == end || c.b == end; });
}

Result<std::vector<OpticalFabric::Change>> OpticalFabric::connect(std::string_view name, unsigned a, unsigned b) {
  std::unique_lock lock(mu_);
  auto i = find_locked(name);
  if (!i) return std::unexpected(i.error());
  auto& s = plan_.switches[*i];
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
    if (const auto q = partner_locked(*i, p)) {
      return fail(
          Code::kFailedPrecondition,
          fmt::format("emulator: switch '{}': port {} is cross-connected to {}; disconnect it first", s.name, p, *q));
    }
    if (!cabled_locked(*i, p)) {
      return fail(Code::kFailedPrecondition, fmt::format("emulator: switch '{}': port {} has no cable", s.name, p));
    }
  }
  const auto before = snapshot_locked();
  s.cross_connects.emplace_back(a, b);
  return reindex_locked(before);
}

Result<std::vector<OpticalFabric::Change>> OpticalFabric::disconnect(std::string_view name, unsigned port) {
  std::unique_lock lock(mu_);
  auto i = find_locked(name);
  if (!i) return std::unexpected(i.error());
  auto& s = plan_.switches[*i];
  if (port >= s.ports) {
    return fail(Code::kOutOfRange,
                fmt::format("emulator: switch '{}': port {} beyond its {} ports", s.name, port, s.ports));
  }
  if (!partner_locked(*i, port)) {
    return fail(Code::kFailedPrecondition,
                fmt::format("emulator: switch '{}': port {} is not cross-connected", s.name, port));
  }
  const auto before = snapshot_locked();
  std::erase_if(s.cross_connects, [port](const auto& xc) { return xc.first == port || xc.second == port; });
  return reindex_locked(before);
}

Result<std::vector<std::pair<unsigned, unsigned>>> OpticalFabric::cross_connects(std::string_view name) const {
  std::shared_lock lock(mu_);
  auto i = find_locked(name);
  if (!i) return std::unexpected(i.error());
  std::vector<std::pair<unsigned, unsigned>> out;
  for (auto [x, y] : plan_.switches[*i].cross_connects) out.emplace_back(std::min(x, y), std::max(x, y));
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace npo::emu
