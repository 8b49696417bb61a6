// SPDX-License-Identifier: Apache-2.0
#include "common/bring_up.hpp"

#include <utility>

namespace npo::tools {

std::expected<FabricUp, BringUpFailure> bring_up(System& system, const BringUpOptions& options) {
  // The library's one bring-up call; the tool chooses the timeout and whether routes are
  // written into the cards.
  npo::BringUpOptions lib;
  lib.timeout_ns = options.timeout_ns;
  lib.program_routes = options.program_routes;
  lib.train = options.train;
  auto up = bring_up_fabric(system, lib);
  if (!up)
    return std::unexpected(BringUpFailure{options.program_routes ? "routing" : "link bring-up", std::move(up.error())});
  return std::move(*up);
}

}  // namespace npo::tools
