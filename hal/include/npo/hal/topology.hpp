// SPDX-License-Identifier: Apache-2.0
// npo-hal public API: Topology -- the fabric graph as discovered from trained links.
// The graph is built from what link training exchanged (each port's NEIGHBOR register,
// registers.md §7.1), never from a configuration file: a miswired or missing cable shows up
// as it really is. RouteTable computes shortest paths and equal-cost (ECMP) next hops over
// the Up links and programs them into the cards' route tables (registers.md §8), which is
// what lets a remote window DMA cross several hops.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "npo/hal/error.hpp"
#include "npo/hal/topology_graph.hpp"

namespace npo {

class Device;
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

/// Shortest-path routes between every pair of cards of a Topology, over Up links, with the
/// equal-cost next hops (ECMP) at every step: the graph module's ShortestPaths
/// (npo/hal/topology_graph.hpp) keyed by fabric ID. Built in O(V·(V+E)) time (one
/// breadth-first search per destination) and O(V²) memory: 1024 cards take ~4 MB.
/// Value type; thread-safety: const methods are safe concurrently.
class RouteTable {
 public:
  /// Builds the routes of `topology`. Cards are identified by fabric ID (1..2047).
  /// Errors: kInvalidArgument (a fabric ID outside 1..2047 or a port >= 16).
  static Result<RouteTable> compute(const Topology& topology);

  /// Cards in the table (fabric IDs, ascending).
  [[nodiscard]] const std::vector<std::uint32_t>& cards() const noexcept { return cards_; }
  /// Links on a shortest path from `from` to `to`: 0 for the same card, -1 when unreachable
  /// or a card is unknown.
  [[nodiscard]] int hops(std::uint32_t from, std::uint32_t to) const noexcept;
  /// Egress ports of `from` that start a shortest path to `to` (bit n = port n): the ECMP set
  /// a card's route-table entry holds (registers.md §8). 0 when unreachable, unknown or same.
  [[nodiscard]] std::uint16_t egress_ports(std::uint32_t from, std::uint32_t to) const noexcept;
  /// One shortest path as the fabric IDs visited, `from` first and `to` last (the lowest
  /// port of each ECMP set at each step, as the card would pick for flow 0 if it picked the
  /// lowest). Empty when unreachable.
  [[nodiscard]] std::vector<std::uint32_t> path(std::uint32_t from, std::uint32_t to) const;
  /// Number of distinct shortest paths from `from` to `to` (saturates at 2^32-1), counting
  /// parallel links separately: the path diversity ECMP can spread flows over.
  [[nodiscard]] std::uint32_t path_count(std::uint32_t from, std::uint32_t to) const;
  /// Longest shortest path between two reachable cards (the fabric's diameter in hops).
  [[nodiscard]] int diameter() const noexcept;
  /// Ordered pairs (a, b) of distinct cards with no path from a to b over Up links: 0 for a
  /// connected fabric (diameter() alone does not tell: it covers reachable pairs only).
  [[nodiscard]] std::size_t unreachable_pairs() const noexcept;

 private:
  /// Position of fabric ID `fid` in cards_ (a vertex of paths_), or 0xffffffff if absent.
  [[nodiscard]] std::uint32_t index_of(std::uint32_t fid) const noexcept;
  std::vector<std::uint32_t> cards_;
  std::vector<int> index_;  ///< fabric ID -> position in cards_, -1 if absent
  ShortestPaths paths_;     ///< over the Up links, vertices = positions in cards_
};

/// Writes every card's route table (registers.md §8) from `routes`: for each destination
/// fabric ID the ECMP egress-port set; entries of unreachable destinations are cleared.
/// After it returns, remote window DMA to any reachable card is forwarded hop by hop. A removed
/// card (BAR0 reads all-ones) is left alone and the others are programmed (so a fabric manager
/// keeps routing the cards that remain, e.g. around a removed card replaced by a spare).
/// Errors: none from the emulator or VFIO today (the Result is kept for backends whose writes
/// can fail). Thread-safety: one caller at a time per System.
Result<void> program_routes(System& system, const RouteTable& routes);

/// Writes one route-table entry of `device` (registers.md §8): remote ops for
/// `dst_fabric_id` leave by one of the ports in `port_mask` (bit n = port n); 0 clears the
/// entry (the card then uses a direct link to the destination only).
/// Errors: kOutOfRange (dst outside 1..2047, or a port the card does not have),
/// kUnavailable (card removed). Thread-safety: one writer per entry.
Result<void> set_route(Device& device, std::uint32_t dst_fabric_id, std::uint16_t port_mask);

/// discover_topology + RouteTable::compute + program_routes in one call.
/// Errors: those of the three steps.
Result<RouteTable> route_fabric(System& system);

/// Reads every port of every card (one pass over BAR0 per card) and builds the graph from the
/// NEIGHBOR identities that training exchanged. A link is reported once when both ends agree;
/// a port whose neighbour does not claim it back is still reported (one-sided, up = false).
/// A removed card (BAR0 reads all-ones, also when removed during the pass) is listed in `cards`
/// with no link, so a neighbour's port that still names it is one-sided and routes go around
/// it. Errors: none from the emulator or VFIO today. Thread-safety: reads registers only.
Result<Topology> discover_topology(System& system);

}  // namespace npo
