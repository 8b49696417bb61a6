// SPDX-License-Identifier: Apache-2.0
// npo-hal public API: the topology plan -- the *expected* optical fabric of a supernode: cards
// (with per-card overrides), optical circuit switches with their cross-connects, and cables
// with their per-link optical parameters. One value type serves the topology files
// (npo/hal/topology_file.hpp), the generators (npo/hal/topology_gen.hpp), the graph module
// (npo/hal/topology_graph.hpp), the emulator's wiring, discovery's comparison with the plan
// (npo/hal/topology_check.hpp) and routing. The discovered graph (npo/hal/topology.hpp) is
// what training found; this is the plan. docs/topology.md is the reference.
// Scripted faults of a topology file are kept here as entries (FabricFault) whose meaning
// -- kinds, engines, queues -- belongs to the emulator's scenario layer, which validates them.
// This header and its sources do not use yaml-cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "npo/hal/error.hpp"

namespace npo {

/// Most ports a card may have (registers.md: 16 port blocks).
inline constexpr unsigned kFabricMaxCardPorts = 16;
/// Lanes per optical port (the bits of FabricChannel::dead_lanes).
inline constexpr unsigned kFabricLanesPerPort = 8;
/// Most cards in one supernode.
inline constexpr unsigned kFabricMaxCards = 1024;
/// Most ports of one optical switch.
inline constexpr unsigned kFabricMaxSwitchPorts = 4096;

// ---- Naming a card ---------------------------------------------------------------------------

/// Fabric ID of the plan's card `index`. A plan numbers its cards 0..cards-1 and card i is the
/// card whose fabric ID (registers.md GLOBAL.FABRIC_ID, the identity links exchange) is i + 1;
/// fabric ID 0 is never a card. This function and card_index_of are the one place of that
/// arithmetic. Thread-safe, constexpr.
[[nodiscard]] constexpr std::uint32_t fabric_id_of(std::uint32_t card_index) noexcept { return card_index + 1; }
/// Plan card index of fabric ID `fabric_id` (inverse of fabric_id_of). Fabric ID 0 maps to
/// 0xffffffff, beyond every plan. Thread-safe, constexpr.
[[nodiscard]] constexpr std::uint32_t card_index_of(std::uint32_t fabric_id) noexcept { return fabric_id - 1; }

/// One port of one card, the card named by its plan index (fabric ID - 1, see fabric_id_of).
/// The one (card, port) pair type of the topology code: discovery's comparison, the light
/// paths and the emulator's fabric use it.
struct CardPort {
  std::uint32_t card = 0;  ///< card index, 0-based
  unsigned port = 0;       ///< port of that card, 0-based
  friend bool operator==(const CardPort&, const CardPort&) = default;
  friend auto operator<=>(const CardPort&, const CardPort&) = default;
};

// ---- The plan --------------------------------------------------------------------------------

/// One end of a cable: a card port or an optical-switch port. In files: "CARD:PORT"
/// (e.g. "12:3") or "SWITCH:PORT" (e.g. "leaf0:7"); switch names are never all digits.
struct FabricEnd {
  bool on_switch = false;  ///< false: `node` is a card index; true: an index into FabricSpec::switches
  std::uint32_t node = 0;  ///< card index (0-based) or switch index
  unsigned port = 0;       ///< port of that card or switch, 0-based
  friend bool operator==(const FabricEnd&, const FabricEnd&) = default;
  friend auto operator<=>(const FabricEnd&, const FabricEnd&) = default;
};

/// Optical parameters of one cable (both directions alike): the per-link data a topology file
/// may carry. The emulator's channel model reads them (docs/emulator.md "Channel model");
/// discovery's comparison names planned dead lanes.
struct FabricChannel {
  double loss_db = 3.0;         ///< insertion loss of fibre and connectors, dB, >= 0
  double snr_penalty_db = 0.0;  ///< extra SNR loss (dirty connector, crosstalk), dB, >= 0
  std::uint8_t dead_lanes = 0;  ///< bitmap of the 8 lanes that carry no light
  friend bool operator==(const FabricChannel&, const FabricChannel&) = default;
};

/// One optical cable (a fibre bundle carrying all lanes of one port).
struct FabricCable {
  FabricEnd a;
  FabricEnd b;
  FabricChannel channel{};
  friend bool operator==(const FabricCable&, const FabricCable&) = default;
};

/// One optical circuit switch: `ports` ports, each either idle or cross-connected to exactly
/// one other port (a bidirectional light path through the switch, no packet switching).
struct FabricSwitch {
  std::string name;                                           ///< unique, not all digits
  unsigned ports = 0;                                         ///< radix, 1..kFabricMaxSwitchPorts
  double insertion_loss_db = 1.5;                             ///< loss each pass through the switch adds, dB
  std::vector<std::pair<unsigned, unsigned>> cross_connects;  ///< port pairs joined inside the switch
  friend bool operator==(const FabricSwitch&, const FabricSwitch&) = default;
};

/// Per-card differences from the defaults of FabricSpec.
struct FabricCardOverride {
  std::uint32_t card = 0;
  std::optional<std::uint64_t> hbm_bytes = std::nullopt;
  std::optional<unsigned> ports = std::nullopt;
  friend bool operator==(const FabricCardOverride&, const FabricCardOverride&) = default;
};

/// One scripted fault entry of a topology or scenario file, as written (times in ns). Its
/// meaning -- which kinds exist, which engines and queues a card has, which fields a kind
/// needs -- is the emulator's (npo/emu/emulator.hpp check_scenario); the plan only carries it.
struct FabricFault {
  std::uint64_t at_ns = 0;
  std::string kind;  ///< fault name ("lane_loss", "iommu_fault", ...)
  std::uint32_t card = 0;
  std::optional<unsigned> engine = std::nullopt;
  std::optional<unsigned> queue = std::nullopt;
  std::optional<unsigned> port = std::nullopt;
  std::optional<unsigned> lane = std::nullopt;
  std::uint32_t count = 1;
  double value = 0;
  std::uint64_t duration_ns = 0;
  friend bool operator==(const FabricFault&, const FabricFault&) = default;
};

/// The plan: the whole expected fabric, plus the scripted faults its file carried.
/// Value type; thread-safety: const methods safe concurrently.
struct FabricSpec {
  std::string name;                           ///< free text ("torus 8x8", "lab rack 3")
  unsigned cards = 0;                         ///< 1..1024; cards are numbered 0..cards-1 (fabric_id_of)
  std::uint64_t hbm_bytes = 64ULL << 20;      ///< default HBM per card, bytes
  unsigned ports = 8;                         ///< default optical ports per card, 1..16
  std::vector<FabricCardOverride> overrides;  ///< per-card exceptions
  std::vector<FabricSwitch> switches;
  std::vector<FabricCable> cables;
  std::vector<FabricFault> faults;  ///< the file's scenario part; validated by the emulator, not here
  friend bool operator==(const FabricSpec&, const FabricSpec&) = default;

  /// Ports of card `card` (its override, else `ports`).
  [[nodiscard]] unsigned ports_of(std::uint32_t card) const noexcept;
  /// HBM bytes of card `card` (its override, else `hbm_bytes`).
  [[nodiscard]] std::uint64_t hbm_of(std::uint32_t card) const noexcept;
  /// Index of the switch called `name`, or nullopt.
  [[nodiscard]] std::optional<std::uint32_t> switch_index(std::string_view name) const noexcept;
  /// "12:3" or "leaf0:7" (the file spelling of an end).
  [[nodiscard]] std::string end_name(const FabricEnd& e) const;
};

/// The plan under its role name.
using TopologyPlan = FabricSpec;

/// Checks every rule of docs/topology.md "Validation" on the plan: sizes, ports within their
/// card or switch, each port used by one cable at most, known switch names, cross-connects
/// only on cabled switch ports and each switch port in one cross-connect at most, channel
/// values, names in UTF-8. The `faults` entries are not checked here (the emulator's
/// scenario layer does). Errors: kInvalidArgument whose message names the entry and field,
/// e.g. "cables[3].b: port 9 beyond card 2 (8 ports: 0..7)". Pure function; thread-safe.
Result<void> validate_fabric_spec(const FabricSpec& spec);

}  // namespace npo
