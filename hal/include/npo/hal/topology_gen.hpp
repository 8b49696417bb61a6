// SPDX-License-Identifier: Apache-2.0
// npo-hal public API: topology generators -- the field's fabrics as plans (npo/hal/topology_plan.hpp):
// full mesh, 2D/3D torus, hypercube, fat-tree through optical circuit switches, dragonfly.
// docs/topology.md "Generators". No yaml-cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "npo/hal/error.hpp"
#include "npo/hal/topology_plan.hpp"

namespace npo {

/// Generator kinds (docs/topology.md "Generators").
enum class FabricKind : std::uint8_t {
  kMesh,       ///< full mesh: every pair of cards joined directly; N-1 ports, N <= 17
  kTorus2d,    ///< 2D torus AxB; 4 ports
  kTorus3d,    ///< 3D torus AxBxC; 6 ports
  kHypercube,  ///< 2^d cards, port i joins the card whose index differs in bit i; d <= 16
  kFatTree,    ///< two-level Clos through optical circuit switches (leaf, spine)
  kDragonfly,  ///< G groups of a cards, full mesh inside a group, one global link per group pair
  /// Disaggregated pool (TPU-v4-like): P ports per card, one optical circuit switch per port
  /// index p ("ocs<p>", radix = cards), card c port p cabled to ocs<p> port c, no
  /// cross-connects: a cross-connect a-b on ocs<p> joins port p of cards a and b. The
  /// partition manager (npo/hal/partition.hpp) composes fabrics on it.
  kPool,
};

/// "mesh", "torus2d", "torus3d", "hypercube", "fat-tree", "dragonfly", "pool".
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
  /// card-to-card cables, 0.5 dB (patch cords) in the fat-tree and the pool, whose light paths also pass 3
  /// switches (4 x 0.5 + 3 x 1.0 = 5 dB, inside the card's optical budget).
  std::optional<FabricChannel> channel = std::nullopt;
  double switch_insertion_loss_db = 1.0;  ///< fat-tree, pool: insertion loss of each switch pass, dB
  unsigned pool_ports = 0;                ///< pool: ports per card = number of switches, 1..16; 0: 8
};

/// Parses "8x8x16" into {8, 8, 16}. Errors: kInvalidArgument.
Result<std::vector<unsigned>> parse_fabric_dims(std::string_view text);

/// Builds a fabric of `kind` with `cards` cards. Mesh wiring: port p of card a leads to the
/// p-th other card (card b > a on port b - 1, card b < a on port b), the cabling of `emu:mesh8`.
/// Errors: kInvalidArgument when the size does not fit the kind (too many ports for a card,
/// not a power of two, dims not multiplying to cards, switch radix too small ...), the
/// message saying what would fit.
Result<FabricSpec> generate_fabric(FabricKind kind, unsigned cards, const FabricGenOptions& options = {});

}  // namespace npo
