// SPDX-License-Identifier: Apache-2.0
// npo-hal public API: Topology -- the fabric graph as discovered from trained links.
// The graph is built from what link training exchanged (each port's NEIGHBOR register,
// registers.md §7.1), never from a configuration file: a miswired or missing cable shows up
// as it really is. Direct links only for now; routing tables and topology files arrive with
// the topology issue.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "npo/hal/error.hpp"

namespace npo {

class System;

/// One link as discovered: both endpoints (fabric ID, port), whether it is Up, lanes trained.
/// Each physical link appears once (a_fabric_id < b_fabric_id, or the same card's loopback).
struct TopologyLink {
  std::uint32_t a_fabric_id = 0;
  unsigned a_port = 0;
  std::uint32_t b_fabric_id = 0;
  unsigned b_port = 0;
  bool up = false;
  unsigned lanes = 0;  ///< lanes Up on the a side
};

/// The discovered graph. Value type; thread-safety: const methods are safe concurrently.
struct Topology {
  std::vector<std::uint32_t> cards;  ///< fabric IDs of every card found, ascending
  std::vector<TopologyLink> links;   ///< every link that trained and exchanged identities
  /// Fewest links between two cards over Up links (0 for the same card); -1 when unreachable
  /// or a card is unknown. O(V + E) breadth-first search.
  [[nodiscard]] int hops(std::uint32_t from, std::uint32_t to) const;
  /// All-pairs hop matrix in `cards` order: matrix[i][j] = hops(cards[i], cards[j]).
  [[nodiscard]] std::vector<std::vector<int>> hop_matrix() const;
  /// Number of Up links directly joining two cards (parallel links count separately).
  [[nodiscard]] unsigned direct_links(std::uint32_t a, std::uint32_t b) const;
};

/// Reads every port of every card (one pass over BAR0 per card) and builds the graph from the
/// NEIGHBOR identities that training exchanged. A link is reported once when both ends agree;
/// a port whose neighbour does not claim it back is still reported (one-sided, up = false).
/// Errors: kUnavailable (a card was removed). Thread-safety: reads registers only.
Result<Topology> discover_topology(System& system);

}  // namespace npo
