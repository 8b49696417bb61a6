// SPDX-License-Identifier: Apache-2.0
// npo-hal public API: FabricSpec -- the *expected* optical fabric of a supernode, as a
// platform-neutral description the HAL, the emulator and the tools share: cards, optical
// circuit switches with their cross-connects, cables with channel parameters, and scripted
// faults. Loaded from a topology file (YAML or JSON, docs/topology.md), produced by the
// generators below, compared with the discovered fabric by npo/hal/topology_check.hpp.
// The discovered graph (npo/hal/topology.hpp) is what training found; this is the plan.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
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

/// One end of a cable: a card port or an optical-switch port. In files: "CARD:PORT"
/// (e.g. "12:3") or "SWITCH:PORT" (e.g. "leaf0:7"); switch names are never all digits.
struct FabricEnd {
  bool on_switch = false;  ///< false: `node` is a card index; true: an index into FabricSpec::switches
  std::uint32_t node = 0;  ///< card index (0-based) or switch index
  unsigned port = 0;       ///< port of that card or switch, 0-based
  friend bool operator==(const FabricEnd&, const FabricEnd&) = default;
  friend auto operator<=>(const FabricEnd&, const FabricEnd&) = default;
};

/// Physical channel of one cable (both directions alike); mirrors the emulator's ChannelParams.
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

/// A scripted fault, the fields of an emulator scenario entry (README "The emulator").
/// `kind` is the scenario name ("lane_loss", "iommu_fault", ...).
struct FabricFault {
  std::uint64_t at_ns = 0;
  std::string kind;
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

/// The whole expected fabric. Value type; thread-safety: const methods safe concurrently.
struct FabricSpec {
  std::string name;                           ///< free text ("torus 8x8", "lab rack 3")
  unsigned cards = 0;                         ///< 1..1024; cards are numbered 0..cards-1 (fabric ID = index + 1)
  std::uint64_t hbm_bytes = 64ULL << 20;      ///< default HBM per card, bytes
  unsigned ports = 8;                         ///< default optical ports per card, 1..16
  std::vector<FabricCardOverride> overrides;  ///< per-card exceptions
  std::vector<FabricSwitch> switches;
  std::vector<FabricCable> cables;
  std::vector<FabricFault> faults;
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

/// Checks every rule of docs/topology.md "Validation": sizes, ports within their card or
/// switch, each port used by one cable at most, known switch names, cross-connects only on
/// cabled switch ports and each switch port in one cross-connect at most, channel values,
/// faults' targets. Errors: kInvalidArgument whose message names the entry and field, e.g.
/// "cables[3].b: port 9 beyond card 2 (8 ports: 0..7)".
Result<void> validate_fabric_spec(const FabricSpec& spec);

/// Parses a topology file's text (YAML, or JSON which YAML reads too) and validates it.
/// One YAML document; a key given twice, a non-finite number or a name that is not UTF-8 is
/// an error. Errors: kInvalidArgument naming the entry and field (syntax errors carry line:column).
Result<FabricSpec> parse_fabric_spec(std::string_view text);
/// Reads and parses a topology file (a regular file or a pipe, at most 16 MiB).
/// Errors: kNotFound/kPermissionDenied (open), kInvalidArgument for a directory or a larger
/// file, the errno of a failed read, else as parse_fabric_spec with the path as prefix.
Result<FabricSpec> load_fabric_spec(const std::filesystem::path& path);

/// Writes the spec as YAML (one line per cable) that parse_fabric_spec reads back equal.
[[nodiscard]] std::string to_yaml(const FabricSpec& spec);
/// Writes the spec as JSON (indent 2) that parse_fabric_spec reads back equal.
[[nodiscard]] std::string to_json(const FabricSpec& spec);

// ---- Light paths ---------------------------------------------------------------------------

/// Where the light leaving one card port ends: card port -> cable -> (switch cross-connect ->
/// cable)* -> card port. Losses add: every cable's loss plus each switch's insertion loss;
/// SNR penalties add; dead lanes are OR-ed.
struct FabricLightPath {
  std::uint32_t card = 0;  ///< the far card
  unsigned port = 0;       ///< the far card's port
  FabricChannel channel{};
  unsigned switch_hops = 0;  ///< cross-connects passed through
  friend bool operator==(const FabricLightPath&, const FabricLightPath&) = default;
};

/// The far end of card `card` port `port` through cables and cross-connects, or nullopt when
/// the port has no cable or the light ends at an idle switch port. Precondition: the spec
/// validates. O(path length).
[[nodiscard]] std::optional<FabricLightPath> trace_light_path(const FabricSpec& spec, std::uint32_t card,
                                                              unsigned port);

// ---- Generators ----------------------------------------------------------------------------

/// Generator kinds (docs/topology.md "Generators").
enum class FabricKind : std::uint8_t {
  kMesh,       ///< full mesh: every pair of cards joined directly; N-1 ports, N <= 17
  kTorus2d,    ///< 2D torus AxB; 4 ports
  kTorus3d,    ///< 3D torus AxBxC; 6 ports
  kHypercube,  ///< 2^d cards, port i joins the card whose index differs in bit i; d <= 16
  kFatTree,    ///< two-level Clos through optical circuit switches (leaf, spine)
  kDragonfly,  ///< G groups of a cards, full mesh inside a group, one global link per group pair
};

/// "mesh", "torus2d", "torus3d", "hypercube", "fat-tree", "dragonfly".
[[nodiscard]] std::string_view fabric_kind_name(FabricKind k) noexcept;
/// Inverse of fabric_kind_name (also accepts "torus", "fattree", "clos"). Errors: kInvalidArgument.
Result<FabricKind> parse_fabric_kind(std::string_view name);

/// Options of generate_fabric; unset fields are chosen by the generator.
struct FabricGenOptions {
  std::vector<unsigned> dims{};           ///< torus: AxB or AxBxC (product = cards); empty: near-square/cubic
  unsigned leaf_radix = 0;                ///< fat-tree: leaf switch ports (half down, half up); 0: 32
  unsigned spine_radix = 0;               ///< fat-tree: spine switch ports; 0: one spine per leaf up-port
  unsigned card_uplinks = 0;              ///< fat-tree: ports per card cabled to its leaf; 0: 4
  unsigned groups = 0;                    ///< dragonfly: groups; 0: chosen so a*h ~ groups-1
  std::uint64_t hbm_bytes = 64ULL << 20;  ///< HBM per card in the spec
  /// Channel of every generated cable; nullopt: the kind's default -- 3 dB for direct
  /// card-to-card cables, 0.5 dB (patch cords) in the fat-tree, whose light paths also pass 3
  /// switches (4 x 0.5 + 3 x 1.0 = 5 dB, inside the card's optical budget).
  std::optional<FabricChannel> channel = std::nullopt;
  double switch_insertion_loss_db = 1.0;  ///< fat-tree: insertion loss of each switch pass, dB
};

/// Parses "8x8x16" into {8, 8, 16}. Errors: kInvalidArgument.
Result<std::vector<unsigned>> parse_fabric_dims(std::string_view text);

/// Builds a fabric of `kind` with `cards` cards. Errors: kInvalidArgument when the size does
/// not fit the kind (too many ports for a card, not a power of two, dims not multiplying to
/// cards, switch radix too small ...), the message saying what would fit.
Result<FabricSpec> generate_fabric(FabricKind kind, unsigned cards, const FabricGenOptions& options = {});

// ---- Graph properties ---------------------------------------------------------------------

/// Which graph to analyse.
enum class FabricView : std::uint8_t {
  kPhysical,  ///< vertices: cards and switches; edges: cables (a packet-switched reading)
  kCircuit,   ///< vertices: cards; edges: light paths through cross-connects (what trains)
};

/// Graph properties of a fabric (docs/topology.md "Graph properties").
struct FabricProperties {
  std::map<unsigned, unsigned> card_degrees;    ///< degree -> number of cards with it
  std::map<unsigned, unsigned> switch_radixes;  ///< switch port count -> number of switches
  std::map<unsigned, unsigned> switch_degrees;  ///< cabled ports of a switch -> number of switches
  unsigned edges = 0;                           ///< edges of the analysed graph
  int diameter = 0;              ///< most edges on a shortest path between two cards; -1 when disconnected
  unsigned bisection_width = 0;  ///< fewest edges cut splitting the cards in halves (sizes differ <= 1)
  bool bisection_exact = false;  ///< true: exhaustive search; false: best cut the heuristic found
};

/// Computes the properties. Diameter: breadth-first search from every card, O(N (V + E)).
/// Bisection: exhaustive over card partitions when the graph has <= 20 cards and no switches;
/// otherwise the smallest cut among all contiguous windows of card indices (each switch on the
/// side most of its neighbours are), an upper bound that equals the known bisection for the
/// generators' numbering. Precondition: the spec validates.
[[nodiscard]] FabricProperties analyze_fabric(const FabricSpec& spec, FabricView view = FabricView::kPhysical);

}  // namespace npo
