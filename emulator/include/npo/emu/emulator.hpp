// SPDX-License-Identifier: Apache-2.0
// npo-hal emulator: a register-level model of NPO reference cards (docs/spec/), their
// IOMMU, firmware, DMA engines and optical ports, with a virtual clock and scripted,
// replayable fault injection. Drivers reach it only through the backend interface
// (npo/hal/backend/backend.hpp); this header is the control surface for tests and the
// emulator's own tools (clock, faults, event log).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "npo/hal/backend/backend.hpp"
#include "npo/hal/error.hpp"
#include "npo/hal/topology_plan.hpp"

namespace npo::emu {

class Card;
class EmulatorImpl;

/// How emulated time moves.
enum class ClockMode : std::uint8_t {
  kVirtual,   ///< only Emulator::advance() moves time: deterministic, replayable
  kRealtime,  ///< time follows CLOCK_MONOTONIC from creation; a timer thread fires events
};

/// Physical channel of one optical link (both directions alike): the plan's per-link
/// parameters (npo/hal/topology_plan.hpp FabricChannel). The lane model turns it into SNR and
/// pre-FEC BER (docs/emulator.md "Channel model").
using ChannelParams = FabricChannel;

/// One optical cable between two card ports.
struct Cable {
  std::uint32_t card_a = 0;
  unsigned port_a = 0;
  std::uint32_t card_b = 0;
  unsigned port_b = 0;
  ChannelParams channel{};
};

/// One optical circuit switch (docs/topology.md "Optical switches"): the plan's FabricSwitch.
/// `name` is what Emulator::connect takes; `cross_connects` are the initial port pairs.
using SwitchConfig = FabricSwitch;
/// One end of a SwitchCable: a card port or a switch port (the plan's FabricEnd; a switch is
/// an index into SystemConfig::switches).
using FabricPort = FabricEnd;
/// A cable with at least one end on an optical switch (card-to-card cables are `Cable`): the
/// plan's FabricCable.
using SwitchCable = FabricCable;

/// Per-card parameters.
struct CardConfig {
  std::uint64_t hbm_bytes = 64u << 20;  ///< bytes of HBM, multiple of 4 KiB, >= 1 MiB (memfd-backed, sparse)
  unsigned num_ports = 8;               ///< optical ports, 1..16
  std::string firmware_version = "1.2.0";
};

/// Kinds of injectable faults. DESIGN.md "Emulator principles"; later issues add link faults.
enum class FaultKind : std::uint8_t {
  kIommuFault,       ///< the next `count` host DMA accesses of the card fault as if unmapped
  kEngineHang,       ///< engine (all its queues, or `queue` only) stops making progress until queue reset
  kCompletionError,  ///< the next `count` ops of engine/queue complete with kEngineError
  kMailboxTimeout,   ///< firmware ignores the next `count` mailbox requests
  kMailboxCorrupt,   ///< the next `count` mailbox replies have one byte flipped after the CRC
  kSurpriseRemoval,  ///< the card vanishes: reads return all-ones, writes are dropped, DMA stops
  // Link faults (port required; lane where noted). Both ends of the link see them.
  kBerRamp,          ///< lane (or every lane) of the port: pre-FEC BER rises log-linearly to `value` over `duration_ns`
  kLaneLoss,         ///< lane (required) goes dark: signal and CDR lock lost until `duration_ns` passes (0: stays)
  kFlapStorm,        ///< the link drops `count` times, one every `duration_ns` (default 50 ms)
  kModuleRemoval,    ///< the port's module is pulled; re-inserted after `duration_ns` (0: stays out)
  kTrainingTimeout,  ///< the next `count` training attempts of the port time out (CDR never locks)
};

/// Name used in scenario files and the event log: "iommu_fault", "engine_hang",
/// "completion_error", "mailbox_timeout", "mailbox_corrupt", "surprise_removal", "ber_ramp",
/// "lane_loss", "flap_storm", "module_removal", "training_timeout".
[[nodiscard]] std::string_view fault_name(FaultKind k) noexcept;
/// Inverse of fault_name. Errors: kInvalidArgument listing the names.
Result<FaultKind> parse_fault_kind(std::string_view name);

/// One scheduled fault: at emulated time `at_ns`, to card/engine/queue/port/lane, do `kind`.
struct Fault {
  std::uint64_t at_ns = 0;
  FaultKind kind = FaultKind::kIommuFault;
  std::uint32_t card = 0;
  std::optional<unsigned> engine = std::nullopt;
  std::optional<unsigned> queue = std::nullopt;  ///< queue within the engine
  std::optional<unsigned> port = std::nullopt;
  std::optional<unsigned> lane = std::nullopt;
  std::uint32_t count = 1;        ///< how many accesses/ops/requests it affects
  double value = 0;               ///< kind-specific magnitude (kBerRamp: the final pre-FEC BER)
  std::uint64_t duration_ns = 0;  ///< kind-specific duration (see each kind)
};

/// A whole emulated system. The emulator turns it into a topology plan (npo/hal/topology_plan.hpp,
/// validated by validate_fabric_spec) and wires its cards by the graph module's light paths.
struct SystemConfig {
  std::string name = "mesh8";  ///< for logs: "mesh8", "8", "file=..."
  unsigned num_cards = 8;      ///< 1..1024
  CardConfig card;
  std::vector<Cable> cables;  ///< optical fabric
  ClockMode clock = ClockMode::kRealtime;
  std::uint64_t seed = 1;                  ///< seeds every random choice (serials, noise)
  unsigned workers = 1;                    ///< threads executing DMA and firmware work (1..4)
  std::uint64_t watchdog_ns = 50'000'000;  ///< engine hang detection: no progress for this long
  std::string scenario;                    ///< fault scenario file to load at creation ("" none)
  std::vector<SwitchConfig> switches;      ///< optical circuit switches
  std::vector<SwitchCable> switch_cables;  ///< cables with a switch end
  std::vector<CardConfig> per_card;        ///< empty: every card is `card`; else one entry per card
  std::vector<Fault> faults;               ///< scheduled at creation (topology files' `faults`)
  /// Each card's HBM in its own memfd (one fd per card), so the fd handed out for one card's
  /// aperture reaches no other card. npo-emud sets it; in-process, one memfd holds them all.
  bool hbm_fd_per_card = false;
  /// The thread that writes a DMA queue's SQ_TAIL doorbell runs that queue's engine (up to 16
  /// batches of 64 descriptors; the rest goes to the workers), so a doorbell costs no
  /// cross-thread wake-up. npo-emud sets it (`--engine inline`): each client's session thread
  /// is then its card's engine. Off (in-process): a doorbell returns at once and a worker
  /// copies, as the card's engine runs beside the CPU.
  bool inline_doorbells = false;
};

/// The emulator configuration a plan describes (emu:file=PATH): cards (with per-card
/// overrides), card-to-card cables, switches and switch cables with their channels, and the
/// plan's scripted faults, each checked as check_scenario does. URI options are applied
/// afterwards by parse_uri. Errors: kInvalidArgument naming the entry and field ("faults[2].port: ...").
Result<SystemConfig> system_config_from_spec(const FabricSpec& spec);

/// Checks the scripted faults of a plan (a topology file's `faults`) as the emulator would
/// schedule them on the system the plan describes: known kind, card, port and lane within the
/// plan, engine and queue within the card, the fields each kind needs, count >= 1, a ber_ramp
/// value in (0, 0.5). Errors: kInvalidArgument "faults[i].FIELD: ...". Pure function.
Result<void> check_scenario(const FabricSpec& plan);

/// Parses the part of an emulator URI after "emu:": "mesh8" (the generated 8-card full mesh,
/// generate_fabric(FabricKind::kMesh, 8), on the default 8-port cards), "N" (1..1024), "file=PATH" (a
/// topology file, docs/topology.md: cards, switches, cables with channel parameters, faults),
/// each optionally followed by "?key=value&...": clock=virtual|realtime, seed=N,
/// hbm=BYTES[K|M|G], ports=N, workers=N, scenario=PATH (with file=, hbm= replaces every card's
/// HBM size and ports= is refused: the file's cabling sets it). Errors: kInvalidArgument
/// naming the accepted forms or the file's entry and field; kNotFound when the file is missing.
Result<SystemConfig> parse_uri(std::string_view rest);

/// The emulated system. Thread-safety: every method may be called from any thread.
class Emulator : public std::enable_shared_from_this<Emulator> {
 public:
  /// Builds the cards (config space, registers, HBM in one memfd, firmware) and the fabric.
  /// Errors: kInvalidArgument (bad config), kResourceExhausted (memfd/mmap failed).
  static Result<std::shared_ptr<Emulator>> create(const SystemConfig& config);
  ~Emulator();
  Emulator(const Emulator&) = delete;
  Emulator& operator=(const Emulator&) = delete;

  [[nodiscard]] const SystemConfig& config() const noexcept;
  [[nodiscard]] std::size_t card_count() const noexcept;
  /// Model of card `index`; white-box access for tests. Precondition: index < card_count().
  [[nodiscard]] Card& card(std::size_t index) noexcept;

  /// A backend::Backend over this emulator (shares ownership).
  [[nodiscard]] std::unique_ptr<backend::Backend> make_backend(std::string uri);

  // ---- Time --------------------------------------------------------------------------
  /// Emulated time in ns since creation.
  [[nodiscard]] std::uint64_t now_ns() const noexcept;
  /// Virtual clock: moves time forward by `ns`, firing every event due, in time order
  /// (ties in scheduling order). Errors: kFailedPrecondition in realtime mode.
  Result<void> advance(std::uint64_t ns);

  // ---- Faults ------------------------------------------------------------------------
  /// Schedules a fault. Errors: kOutOfRange (card/engine/queue/port beyond the system),
  /// kInvalidArgument (missing target field the kind needs).
  Result<void> inject(const Fault& fault);
  /// Loads a scenario (YAML or JSON): {seed?: N, faults: [{at_ns|at_us|at_ms: T, kind: NAME,
  /// card: N, engine?: N, queue?: N, port?: N, lane?: N, count?: N, value?: X,
  /// duration_ns|duration_us|duration_ms?: T}]}, read by the topology files' parser
  /// (npo/hal/topology_file.hpp parse_fabric_scenario: one document, no duplicate or unknown
  /// key, finite numbers, no overflowing time, at most 16 MiB from a file). All faults are
  /// validated before any is scheduled. Errors: kInvalidArgument "scenario: faults[i].FIELD: ...".
  Result<void> load_scenario_text(std::string_view text);
  Result<void> load_scenario_file(const std::filesystem::path& path);

  // ---- Event log ---------------------------------------------------------------------
  /// Every event so far, one line each: "t=<ns> card=<i> <event> key=value ...". Only
  /// events driven by emulated time and register/mailbox actions are logged, so the same
  /// scenario, seed and driver actions give a byte-identical log.
  [[nodiscard]] std::vector<std::string> event_log() const;

  // ---- Optical switches (docs/topology.md "Optical switches") -------------------------
  /// Cross-connects ports `a` and `b` of switch `name` (a circuit: light entering one leaves
  /// through the other), as a real optical circuit switch reconfigures. Light paths through
  /// those ports change at once (resolve_peer/channel_of), each changed card port is logged
  /// and its next training meets the new peer; a link still Up does not drop by itself yet
  /// (docs/topology.md "Open points"). Errors: kNotFound (no such switch), kOutOfRange (port
  /// beyond the radix), kInvalidArgument (a == b), kFailedPrecondition (a port is already
  /// cross-connected: disconnect it first, or a port has no cable).
  Result<void> connect(std::string_view name, unsigned a, unsigned b);
  /// Removes the cross-connect holding port `port` of switch `name` (both its ports go idle).
  /// Errors: kNotFound (no such switch), kOutOfRange, kFailedPrecondition (port is idle).
  Result<void> disconnect(std::string_view name, unsigned port);
  /// The current cross-connects of switch `name`, each pair once (lower port first), sorted.
  /// Errors: kNotFound.
  [[nodiscard]] Result<std::vector<std::pair<unsigned, unsigned>>> cross_connects(std::string_view name) const;

  /// Fabric management: puts card `card` in partition `id` (GLOBAL.PARTITION, registers.md
  /// §3.8; 0 = unassigned). From the next remote op on, the card reaches and is reached only by
  /// cards with the same ID; others get PARTITION_DENIED. Logged (`partition card=K id=P`).
  /// Errors: kOutOfRange (no such card). Thread-safe.
  Result<void> set_partition(std::uint32_t card, std::uint32_t id);
  /// The partition of card `card`. Errors: kOutOfRange. Thread-safe.
  [[nodiscard]] Result<std::uint32_t> partition(std::uint32_t card) const;
  /// Whether card `card` was removed (surprise removal, card_removed fault). Errors:
  /// kOutOfRange. Thread-safe.
  [[nodiscard]] Result<bool> removed(std::uint32_t card) const;
  /// Fabric management view of card `card`'s route table (registers.md §8): every entry with
  /// VALID set, as (destination fabric ID, raw entry). Errors: kOutOfRange. Thread-safe.
  [[nodiscard]] Result<std::vector<std::pair<std::uint32_t, std::uint32_t>>> routes(std::uint32_t card);

  /// Internal.
  [[nodiscard]] EmulatorImpl& impl() noexcept { return *impl_; }

 private:
  explicit Emulator(std::unique_ptr<EmulatorImpl> impl);
  std::unique_ptr<EmulatorImpl> impl_;
};

}  // namespace npo::emu
