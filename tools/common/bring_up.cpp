// SPDX-License-Identifier: Apache-2.0
#include "common/bring_up.hpp"

#include <chrono>
#include <utility>

namespace npo::tools {

namespace {

/// An observer's "bring-up": the links as they are, read from the registers (no port is
/// enabled or trained: a read-only attach's writes would be dropped, and the owner's training
/// is not ours to drive), then the graph and routes computed from them, never programmed.
std::expected<FabricUp, BringUpFailure> observe(System& system) {
  const auto w0 = std::chrono::steady_clock::now();
  FabricUp out;
  for (std::size_t c = 0; c < system.device_count(); ++c) {
    auto& dev = system.device(c);
    if (dev.info().removed) {
      return std::unexpected(BringUpFailure{
          "link bring-up", Error(Code::kUnavailable, "card removed", 0, {.card = static_cast<std::uint32_t>(c)})});
    }
    for (unsigned p = 0; p < dev.port_count(); ++p) {
      auto ps = read_port(dev, p);
      if (!ps) return std::unexpected(BringUpFailure{"link bring-up", std::move(ps.error())});
      if (!ps->module_present) continue;
      ++out.links.ports_with_module;
      if (ps->state == LinkState::kUp) {
        ++out.links.up;
        if (ps->lane_count < dev.info().lanes_per_port) ++out.links.degraded;
      } else {
        ++out.links.failed;
      }
    }
  }
  out.links.wall_ns = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - w0).count());
  auto topology = discover_topology(system);
  if (!topology) return std::unexpected(BringUpFailure{"link bring-up", std::move(topology.error())});
  out.topology = std::move(*topology);
  auto routes = RouteTable::compute(out.topology);
  if (!routes) return std::unexpected(BringUpFailure{"routing", std::move(routes.error())});
  out.routes = std::move(*routes);
  for (const std::uint32_t a : out.topology.cards) {
    for (const std::uint32_t b : out.topology.cards)
      out.unreachable_pairs += a != b && out.routes.hops(a, b) < 0 ? 1 : 0;
  }
  return out;
}

}  // namespace

std::expected<FabricUp, BringUpFailure> bring_up(System& system, const BringUpOptions& options) {
  if (system.device_count() != 0 && system.device(0).info().read_only) {
    if (options.program_routes) {
      return std::unexpected(BringUpFailure{
          "routing",
          Error(Code::kPermissionDenied, "a read-only attach (mode=ro) cannot program routes: attach as the owner")});
    }
    return observe(system);
  }
  // The library's one bring-up call; the tool chooses the timeout and whether routes are
  // written into the cards.
  npo::BringUpOptions lib;
  lib.timeout_ns = options.timeout_ns;
  lib.program_routes = options.program_routes;
  auto up = bring_up_fabric(system, lib);
  if (!up)
    return std::unexpected(BringUpFailure{options.program_routes ? "routing" : "link bring-up", std::move(up.error())});
  return std::move(*up);
}

}  // namespace npo::tools
