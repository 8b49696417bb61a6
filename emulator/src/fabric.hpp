// SPDX-License-Identifier: Apache-2.0
// Emulator internals: the optical fabric -- cables (card or switch ends) and optical circuit
// switches whose cross-connects can be reconfigured at runtime. It answers one question for
// the card model: where does the light leaving (card, port) end, and through what channel.
// docs/topology.md "Optical switches".
#pragma once

#include <cstdint>
#include <optional>
#include <shared_mutex>
#include <string_view>
#include <utility>
#include <vector>

#include "npo/emu/emulator.hpp"
#include "npo/hal/fabric_spec.hpp"

namespace npo::emu {

/// The emulator configuration a topology file describes (emu:file=PATH): cards (with
/// per-card overrides), card-to-card cables, switches and switch cables with their channels,
/// and the scripted faults. URI options are applied afterwards by parse_uri.
/// Errors: kInvalidArgument (an unknown fault kind, naming faults[i]).
Result<SystemConfig> system_config_from_spec(const FabricSpec& spec);

/// One card port.
struct PortRef {
  std::uint32_t card = 0;
  unsigned port = 0;
  friend bool operator==(const PortRef&, const PortRef&) = default;
};

/// Cables and switches. Thread-safety: every method may be called from any thread; lookups
/// take a shared lock, reconfiguration an exclusive one.
class OpticalFabric {
 public:
  /// Builds from the config's `cables`, `switch_cables` and `switches`, validating every end
  /// (card/switch in range, port within its card or switch, each port used once) and the
  /// cross-connects (in range, on cabled ports, each port once). `ports_of(card)` gives a
  /// card's port count. Errors: kInvalidArgument naming the cable or switch entry.
  Result<void> build(const SystemConfig& cfg, const std::vector<unsigned>& ports_of);

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
  struct Hop {
    std::int64_t far = -1;  ///< dense index of the cable's other end, -1: no cable
    ChannelParams channel{};
  };
  struct Switch {
    std::string name;
    unsigned ports = 0;
    double insertion_loss_db = 1.5;
    std::size_t base = 0;  ///< dense index of port 0
  };
  struct Traced {
    PortRef peer;
    ChannelParams channel;
  };
  [[nodiscard]] std::optional<Traced> trace_locked(std::uint32_t card, unsigned port) const;
  [[nodiscard]] std::vector<std::optional<PortRef>> snapshot_locked() const;
  [[nodiscard]] std::vector<Change> diff_locked(const std::vector<std::optional<PortRef>>& before) const;
  Result<std::size_t> find_locked(std::string_view name) const;

  mutable std::shared_mutex mu_;
  std::size_t card_ports_ = 0;    ///< dense indices below this are card * kMaxPorts + port
  std::vector<Hop> hop_;          ///< per dense port index
  std::vector<std::int64_t> xc_;  ///< per dense port index: cross-connect partner, -1 idle/not a switch
  std::vector<Switch> switches_;
  std::vector<std::pair<std::uint32_t, unsigned>> cabled_card_ports_;  ///< card ports with a cable
};

}  // namespace npo::emu
