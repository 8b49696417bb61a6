// SPDX-License-Identifier: Apache-2.0
// npo-hal public API: Topology -- the fabric graph discovered from trained links.
// Status: declared; implemented by the topology issue (kUnimplemented until then).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "npo/hal/error.hpp"

namespace npo {

class System;

/// One link as discovered: both endpoints (fabric ID, port), state and lanes trained.
struct TopologyLink {
  std::uint32_t a_fabric_id = 0;
  unsigned a_port = 0;
  std::uint32_t b_fabric_id = 0;
  unsigned b_port = 0;
  bool up = false;
  unsigned lanes = 0;
};

/// The discovered graph.
struct Topology {
  std::vector<std::uint32_t> cards;  ///< fabric IDs, ascending
  std::vector<TopologyLink> links;
  /// Hop count between two cards; -1 when unreachable.
  [[nodiscard]] int hops(std::uint32_t from, std::uint32_t to) const;
};

/// Builds the topology from every port's NEIGHBOR register. Errors: kUnimplemented (not built yet).
Result<Topology> discover_topology(System& system);

}  // namespace npo
