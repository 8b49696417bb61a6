// SPDX-License-Identifier: Apache-2.0
// npo-hal public API: the partition manager of a disaggregated supernode ("npo-fabric"). A pool
// of cards (generate_fabric(FabricKind::kPool, ...): P ports per card, one optical circuit
// switch per port index) is carved into partitions; a partition is a set of cards and the
// links between them, each link a cross-connect on one OCS joining the SAME port index p of
// two cards (card a port p -- ocs<p> -- card b port p). Shapes are placed on free healthy
// cards with a proper edge colouring (colour = port index = switch). Every change is
// journalled (intent, then applied; fsync'd JSON lines) and rebuilt at start from the journal
// and the switches' actual cross-connects. docs/partitions.md.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "npo/hal/error.hpp"
#include "npo/hal/ocs.hpp"
#include "npo/hal/topology_plan.hpp"

namespace npo {

class System;

// ---- Shapes --------------------------------------------------------------------------------

/// One link of a partition: port `port` of card `a` and port `port` of card `b` (the same port
/// index on both cards), joined by one cross-connect on the switch cabled to that port index.
/// Card values are pool card indices (a < b), or shape positions in shape_links().
struct PartitionLink {
  std::uint32_t a = 0;
  std::uint32_t b = 0;
  unsigned port = 0;
  friend bool operator==(const PartitionLink&, const PartitionLink&) = default;
  friend auto operator<=>(const PartitionLink&, const PartitionLink&) = default;
};

/// A partition's wiring pattern.
struct PartitionShape {
  enum class Kind : std::uint8_t {
    kMesh,     ///< "mesh:N": every pair of the N cards joined (K_N)
    kRing,     ///< "ring:N": card i joined to card i+1 mod N
    kTorus2d,  ///< "torus2d:AxB": even A, B; x links on ports 0/1, y links on ports 2/3
    kTorus3d,  ///< "torus3d:AxBxC": even dims; ports 0/1, 2/3, 4/5
    kCustom,   ///< "custom:N": links as found (a partition rebuilt from the switches alone)
  };
  Kind kind = Kind::kRing;
  std::vector<unsigned> dims;  ///< {N} for mesh, ring, custom; the torus dims
  /// Cards the shape holds (product of dims).
  [[nodiscard]] unsigned cards() const noexcept;
  /// "mesh:8", "ring:16", "torus2d:8x8", "torus3d:4x4x4", "custom:5".
  [[nodiscard]] std::string text() const;
};

/// Parses "mesh:N", "ring:N", "torus2d:AxB", "torus3d:AxBxC" (N, dims >= 1; at most
/// kFabricMaxCards cards). Errors: kInvalidArgument naming the accepted forms (unknown shape,
/// odd torus dims: a torus ring of odd length needs a third port index per dimension).
/// Pure function; thread-safe.
Result<PartitionShape> parse_partition_shape(std::string_view text);

/// The links of `shape` over shape positions 0..cards()-1, properly edge-coloured with port
/// indices < `ports` (no card uses a port index twice):
/// - mesh:N: the round-robin 1-factorisation of K_N, N-1 colours for even N, N for odd N;
/// - ring:N: colours alternate 0/1 (odd N: the closing link on port 2); ring:2 is one link;
/// - torus2d:AxB (position x + A*y): the x link from x to x+1 on port x%2, the y link from y to
///   y+1 on port 2 + y%2; a dimension of 2 gives two links (ports 0 and 1) between the pair;
/// - torus3d: likewise with ports 4/5 for z.
/// Sorted. Errors: kInvalidArgument when the colouring needs more port indices than `ports`
/// ("mesh:10 needs 9 port indices (one OCS each); the pool's cards have 8"), kUnimplemented
/// for kCustom. Pure function; thread-safe.
Result<std::vector<PartitionLink>> shape_links(const PartitionShape& shape, unsigned ports);

// ---- The partition table -------------------------------------------------------------------

/// Health of a pool card as the manager sees it (set by the caller's health checks).
enum class CardHealth : std::uint8_t {
  kHealthy,  ///< usable by any partition
  kSpare,    ///< healthy, kept free for swap(); never placed by create() from the free pool
  kFailed,   ///< never placed; swap() replaces it in its partition
};
/// "healthy", "spare", "failed".
[[nodiscard]] std::string_view card_health_name(CardHealth h) noexcept;

/// One partition: its cards (cards[i] is shape position i) and its links (pool card indices).
struct Partition {
  std::string name;
  std::string shape;                 ///< PartitionShape::text() of its shape
  std::vector<std::uint32_t> cards;  ///< pool card indices, in shape order
  std::vector<PartitionLink> links;  ///< sorted; each one cross-connect
  /// The partition ID its cards carry in GLOBAL.PARTITION (registers.md §3.8): nonzero, unique,
  /// never reused (the manager hands them out in increasing order, kept in the journal).
  std::uint32_t id = 0;
  friend bool operator==(const Partition&, const Partition&) = default;
};

/// One cross-connect change of a reconfiguration, on switch `switch_name`.
struct SwitchChange {
  std::string switch_name;
  OcsChange change;
  friend bool operator==(const SwitchChange&, const SwitchChange&) = default;
};

/// One card whose partition ID (GLOBAL.PARTITION) a change set.
struct CardPartitionId {
  std::uint32_t card = 0;
  std::uint32_t id = 0;  ///< 0: unassigned (the card left its partition)
  friend bool operator==(const CardPartitionId&, const CardPartitionId&) = default;
};

/// What one manager call did (or, for a refused call, nothing: the call returns an error).
struct PartitionChange {
  std::uint64_t seq = 0;               ///< journal sequence number (0 without a journal)
  std::string what;                    ///< "create job0 torus2d:8x8", "swap 5 -> 30 in job0", ...
  std::vector<SwitchChange> changes;   ///< minimal: disconnects first, then connects
  std::vector<PartitionLink> added;    ///< links created (waited for when a System is given)
  std::vector<PartitionLink> removed;  ///< links removed
  std::uint64_t switch_ns = 0;         ///< wall time of the switch operations
  std::uint64_t links_up_ns = 0;       ///< platform time until every added link was Up (0: not waited)
  /// Partition IDs written (PartitionOptions::enforcer): joining cards before the switches
  /// moved, leaving cards (id 0) after.
  std::vector<CardPartitionId> ids;
};

/// Where a card's partition ID is enforced: the fabric-management write of GLOBAL.PARTITION
/// (registers.md §3.8; never reachable through the card's BAR0). A remote op between cards of
/// different IDs completes PARTITION_DENIED (dma.md §3.2). A real platform implements it over
/// its board-management path; npo::emu::EmulatedEnforcer (npo/emu/ocs.hpp) over an emulator,
/// npo::emu::RemoteFabric (npo/emu/remote_fabric.hpp) over npo-emud's fabric socket.
/// Thread-safety: implementations make every method safe from any thread.
class PartitionEnforcer {
 public:
  virtual ~PartitionEnforcer() = default;
  /// Sets card `card`'s (pool card index) partition ID to `id` (0 = unassigned). Takes effect
  /// from the card's next remote op. Errors: kOutOfRange (no such card), kUnavailable (the
  /// management path does not answer; the ID is then unknown).
  virtual Result<void> set_partition(std::uint32_t card, std::uint32_t id) = 0;
};

/// How an interrupted change (intent journalled, no outcome) is settled at start.
enum class RecoveryPolicy : std::uint8_t {
  kRollBack,  ///< restore the cross-connects before the change (the caller never saw success)
  kFinish,    ///< complete the change
};

/// Options of PartitionManager::open.
struct PartitionOptions {
  std::filesystem::path journal{};  ///< JSON-lines journal, created when missing; empty: none (no durability)
  /// When set, every change waits for its added links to train Up with the right neighbour
  /// (read_port), kicking ports left in Fault or Disabled (retrain_port / enable_port); the
  /// System's cards are the pool's (card i has fabric ID fabric_id_of(i)). Not owned.
  System* system = nullptr;
  std::uint64_t link_timeout_ns = 10'000'000'000;  ///< platform-clock cap of that wait
  std::uint64_t link_poll_ns = 2'000'000;          ///< poll interval of that wait (platform clock)
  RecoveryPolicy recovery = RecoveryPolicy::kRollBack;
  /// When set, the manager writes each card's partition ID: a card joining a partition gets
  /// its ID before its links are connected, a card leaving one (destroy, move out, a
  /// swapped-out failed card) gets 0 after its links are disconnected, and open() writes every
  /// card's ID from the rebuilt table (free cards 0). Not owned.
  PartitionEnforcer* enforcer = nullptr;
};

/// What open() found and did.
struct RebuildReport {
  std::uint64_t records = 0;               ///< journal lines read
  bool torn_tail = false;                  ///< the last line was cut short (a crash while writing it): ignored
  std::optional<std::string> interrupted;  ///< "create job0 ...: rolled back (3 switch operations)"
  std::vector<std::string> recovered;      ///< partitions rebuilt from switches alone (no journal entry)
  std::vector<std::string> foreign;        ///< cross-connects on the switches no partition owns ("ocs2:3-9")
  /// Journalled cross-connects missing on the switches and re-made (both ports were idle, as
  /// on a switch that lost its state, or a freshly started emulator): "ocs2:3-9".
  std::vector<std::string> restored;
  std::uint64_t ids_set = 0;  ///< partition IDs written from the rebuilt table (with an enforcer)
  std::uint64_t wall_ns = 0;  ///< time open() took (journal + switch reads + recovery)
};

/// The partition manager. Thread-safety: every method is safe from any thread (one mutex;
/// calls run one at a time). It must be the only controller of its switches.
class PartitionManager {
 public:
  /// Opens the manager of `pool` (a FabricSpec whose card ports are each cabled to one switch
  /// port, as generate_fabric(kPool) makes) over `switches` (one per pool switch, matched by
  /// name; not owned, must outlive the manager). Rebuilds the table from the journal and the
  /// switches' cross-connects; an interrupted change is rolled back or finished
  /// (options.recovery); with no journal entries, cross-connects found on the switches become
  /// partitions "recovered<k>" (one per connected group of cards, shape custom:N) and are
  /// journalled. Errors: kInvalidArgument (pool not of that form, a switch missing or of the
  /// wrong radix), kDataLoss (a journal line other than the last unreadable, or a journalled
  /// link missing on the switches whose ports now hold other cross-connects), the switches' errors, kUnavailable /
  /// kPermissionDenied for the journal file.
  static Result<std::unique_ptr<PartitionManager>> open(const FabricSpec& pool,
                                                        std::vector<OpticalCircuitSwitch*> switches,
                                                        const PartitionOptions& options = {});
  ~PartitionManager();
  PartitionManager(const PartitionManager&) = delete;
  PartitionManager& operator=(const PartitionManager&) = delete;

  /// Creates partition `name` of `shape` (parse_partition_shape). With `cards` empty, the
  /// shape is placed on the lowest-numbered free healthy (not spare) cards; otherwise on
  /// exactly `cards` (shape position i = cards[i]; spares allowed when named). Errors, each
  /// changing nothing: kAlreadyExists (name taken), kInvalidArgument (bad shape or name, too
  /// many port indices, cards.size() != shape size, a card twice or beyond the pool),
  /// kFailedPrecondition (a named card in another partition or failed), kResourceExhausted
  /// (not enough free healthy cards), the switches' errors (the change is undone).
  Result<PartitionChange> create(std::string_view name, std::string_view shape,
                                 const std::vector<std::uint32_t>& cards = {});
  /// Destroys partition `name`: disconnects its cross-connects; its cards become free.
  /// Errors: kNotFound, the switches' errors.
  Result<PartitionChange> destroy(std::string_view name);
  /// Moves card `card` into partition `to` ("" = the free pool), out of its partition if any.
  /// Only ring and mesh partitions change size (ring:N -> ring:N+1); links that still belong to
  /// the new shapes keep their port, the others are re-coloured (first free port index on both
  /// cards, else the whole partition re-coloured from its shape). Errors: kNotFound (no such
  /// partition), kFailedPrecondition (card failed, already in `to`, or a partition whose shape
  /// cannot change size: torus), kInvalidArgument (card beyond the pool, too many colours).
  Result<PartitionChange> move(std::uint32_t card, std::string_view to);
  /// Replaces failed card `failed` in its partition by `spare` (nullopt: the lowest free
  /// spare, else the lowest free healthy card): only the failed card's cross-connects change
  /// (each of its links is re-made on the same port index to the spare); the other links are
  /// untouched. Errors: kFailedPrecondition (card not failed or in no partition, spare not free
  /// or failed), kResourceExhausted (no free healthy card), kInvalidArgument.
  Result<PartitionChange> swap(std::uint32_t failed, std::optional<std::uint32_t> spare = std::nullopt);
  /// Sets the health of `card` (journalled). A failed card stays in its partition until
  /// swap(). Errors: kInvalidArgument (beyond the pool), journal errors.
  Result<void> set_health(std::uint32_t card, CardHealth health);

  /// Every partition, by name.
  [[nodiscard]] std::vector<Partition> list() const;
  /// Partition `name`, or nullopt.
  [[nodiscard]] std::optional<Partition> find(std::string_view name) const;
  /// The partition card `card` belongs to, or nullopt (free or beyond the pool).
  [[nodiscard]] std::optional<std::string> owner(std::uint32_t card) const;
  /// Health of `card` (kHealthy beyond the pool).
  [[nodiscard]] CardHealth health(std::uint32_t card) const;
  /// What open() found and did.
  [[nodiscard]] const RebuildReport& rebuild_report() const noexcept;
  /// Cards of the pool.
  [[nodiscard]] unsigned pool_cards() const noexcept;
  /// Ports per card (= switches).
  [[nodiscard]] unsigned pool_ports() const noexcept;

  struct Impl;

 private:
  explicit PartitionManager(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// Waits until every link of `links` (pool card indices, card i = fabric ID fabric_id_of(i))
/// is Up at both ends with the other end as its trained neighbour, polling read_port every
/// `poll_ns` of platform time; a port in Fault or Disabled is retrained (retrain_port) or
/// enabled (enable_port), a port Up with a stale neighbour retrained after 50 ms. Touches no
/// other port. Returns the platform time waited, ns. Errors: kDeadlineExceeded naming the
/// ports not Up after `timeout_ns`; kNotFound (a card not in the System); port errors.
/// Thread-safety: as read_port; one wait per port at a time.
Result<std::uint64_t> wait_links_up(System& system, const std::vector<PartitionLink>& links, std::uint64_t timeout_ns,
                                    std::uint64_t poll_ns = 2'000'000);

}  // namespace npo
