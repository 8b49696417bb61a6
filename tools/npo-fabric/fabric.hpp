// SPDX-License-Identifier: Apache-2.0
// npo-fabric: what the daemon (serve.cpp) and the CLI (main.cpp) share -- the request handler
// of the CLI socket over a PartitionManager, and how a change is printed. docs/partitions.md
// "Operating npo-fabric".
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "npo/hal/partition.hpp"

namespace npo::tools::fabric {

/// Options of `npo-fabric serve`.
struct ServeOptions {
  std::string emud_dir;  ///< npo-emud's --socket-dir (fabric.sock, card-K.sock)
  std::string journal;
  std::string socket;    ///< CLI socket; empty: DIR/npo-fabric.sock
  std::string topology;  ///< pool topology file; empty: generate_fabric(kPool, cards, switches)
  double link_timeout_s = 30;
  bool no_wait = false;  ///< do not wait for added links
};

/// Runs the daemon until SIGTERM/SIGINT. Returns the exit status.
int serve(const ServeOptions& o);

/// What the daemon's routes must be after a change, read through npo-emud's fabric socket.
class RouteSource {
 public:
  virtual ~RouteSource() = default;
  /// Fabric IDs card `card` has a valid ROUTE entry for (registers.md §8). Errors: the daemon's.
  virtual Result<std::vector<std::uint32_t>> routes(std::uint32_t card) = 0;
  /// Fabric ID of every pool card (index order) and which are removed.
  virtual Result<std::vector<std::pair<std::uint32_t, bool>>> cards() = 0;
};

/// One CLI request line -> one reply line over `m` (ops: create, destroy, list, move, swap,
/// health). Errors are {"error":{"code","message"}} replies; a refused change changes nothing
/// (a swap's marking of the failed card included). With `routes`, a create, move or swap
/// replies once every card of each partition it touched routes to exactly the other (not
/// removed) cards of its partition -- npo-emud --manage-links programs them -- or after
/// `route_timeout_ms` with "routes":"pending" (both logged). Thread-safety: one call at a time.
std::string handle(PartitionManager& m, std::string_view line, RouteSource* routes = nullptr,
                   int route_timeout_ms = 5000);

/// A change as JSON: what, seq, the switch operations, links added/removed, IDs set, times in ms.
nlohmann::json change_json(const PartitionChange& c, double wall_ms);

/// "0-63,70" -> {0..63, 70}. Errors: kInvalidArgument.
Result<std::vector<std::uint32_t>> parse_card_list(std::string_view text);

}  // namespace npo::tools::fabric
