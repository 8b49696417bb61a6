// SPDX-License-Identifier: Apache-2.0
#include "common/bring_up.hpp"

#include <utility>

namespace npo::tools {

std::expected<FabricUp, BringUpFailure> bring_up(System& system, const BringUpOptions& options) {
  FabricUp out;
  auto links = bring_up_links(system, options.timeout_ns);
  if (!links) return std::unexpected(BringUpFailure{"link bring-up", std::move(links.error())});
  out.links = std::move(*links);
  if (options.program_routes) {
    auto routes = route_fabric(system);
    if (!routes) return std::unexpected(BringUpFailure{"routing", std::move(routes.error())});
    out.routes = std::move(*routes);
  }
  return out;
}

}  // namespace npo::tools
