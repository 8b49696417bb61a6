// SPDX-License-Identifier: Apache-2.0
// Emulator internals: the optical fabric -- the system's topology plan (cables with card or
// switch ends, optical circuit switches) whose cross-connects can be reconfigured at runtime.
// It answers one question for the card model: where does the light leaving (card, port) end,
// and through what channel -- the graph module's light paths (npo/hal/topology_graph.hpp).
// docs/topology.md "Optical switches".
#pragma once

#include <cstdint>
#include <optional>
#include <shared_mutex>
#include <string_view>
#include <utility>
#include <vector>

#include "npo/emu/emulator.hpp"
#include "npo/hal/topology_graph.hpp"
#include "npo/hal/topology_plan.hpp"

namespace npo::emu {

/// One card port (the plan's card-port type: card index and port).
using PortRef = CardPort;

/// The topology plan a SystemConfig describes: its cards, per-card differences as overrides,
/// switches, card-to-card cables then switch cables (in that order, which is what "cables[i]"
/// in a validation message counts), no faults. Not validated.
[[nodiscard]] FabricSpec plan_of(const SystemConfig& cfg);

/// Cables and switches. Thread-safety: every method may be called from any thread; lookups
/// take a shared lock, reconfiguration an exclusive one.
class OpticalFabric {
 public:
  /// Builds from `plan` after validate_fabric_spec accepts it (ends in range, each port used
  /// once, cross-connects on cabled ports, each port once). Errors: kInvalidArgument naming
  /// the cable or switch entry.
  Result<void> build(FabricSpec plan);

  /// The card port where the light from (card, port) ends: cable -> (switch cross-connect ->
  /// cable)* -> card port. nullopt: no cable, or the light ends at an idle switch port.
  [[nodiscard]] std::optional<PortRef> resolve(std::uint32_t card, unsigned port) const;
  /// Channel of that light path: cable losses + each switch's insertion loss, SNR penalties
  /// summed, dead lanes OR-ed. Defaults (ChannelParams{}) when there is no path.
  [[nodiscard]] ChannelParams channel(std::uint32_t card, unsigned port) const;

  /// A card port whose far end changed in a reconfiguration, and its new far end.
  struct Change {
    PortRef port;
    std::optional<PortRef> peer;
  };
  /// Cross-connects ports a and b of switch `name`. Returns the card ports whose light path
  /// changed. Errors: see Emulator::connect.
  Result<std::vector<Change>> connect(std::string_view name, unsigned a, unsigned b);
  /// Removes the cross-connect holding `port`. Errors: see Emulator::disconnect.
  Result<std::vector<Change>> disconnect(std::string_view name, unsigned port);
  /// Current cross-connects of switch `name`, lower port first, sorted. Errors: kNotFound.
  [[nodiscard]] Result<std::vector<std::pair<unsigned, unsigned>>> cross_connects(std::string_view name) const;

 private:
  [[nodiscard]] std::vector<std::optional<PortRef>> snapshot_locked() const;
  /// Re-indexes the light paths after a reconfiguration; the card ports whose far end changed.
  [[nodiscard]] std::vector<Change> reindex_locked(const std::vector<std::optional<PortRef>>& before);
  Result<std::size_t> find_locked(std::string_view name) const;
  /// Partner of `port` of switch `sw` in a cross-connect, or nullopt when idle.
  [[nodiscard]] std::optional<unsigned> partner_locked(std::size_t sw, unsigned port) const;
  /// Whether `port` of switch `sw` has a cable.
  [[nodiscard]] bool cabled_locked(std::size_t sw, unsigned port) const;

  mutable std::shared_mutex mu_;
  FabricSpec plan_;   ///< the plan with the current cross-connects
  LightPaths paths_;  ///< index of plan_'s light paths
};

}  // namespace npo::emu
