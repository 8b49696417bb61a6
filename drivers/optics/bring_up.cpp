// SPDX-License-Identifier: Apache-2.0
// drivers/optics: bring_up_fabric -- link training, topology discovery and routing in one
// call, over the public API only.
#include "npo/hal/bring_up.hpp"

#include "npo/hal/system.hpp"

namespace npo {

Result<FabricBringUp> bring_up_fabric(System& system, const BringUpOptions& options) {
  FabricBringUp out;
  auto links = bring_up_links(system, options.policy, options.timeout_ns);
  if (!links) return std::unexpected(links.error());
  out.links = std::move(*links);
  auto topology = discover_topology(system);
  if (!topology) return std::unexpected(topology.error());
  out.topology = std::move(*topology);
  auto routes = RouteTable::compute(out.topology);
  if (!routes) return std::unexpected(routes.error());
  out.routes = std::move(*routes);
  if (options.program_routes) {
    if (auto r = program_routes(system, out.routes); !r) return std::unexpected(r.error());
  }
  const auto& cards = out.topology.cards;
  for (const std::uint32_t a : cards) {
    for (const std::uint32_t b : cards) out.unreachable_pairs += a != b && out.routes.hops(a, b) < 0 ? 1 : 0;
  }
  return out;
}

}  // namespace npo
