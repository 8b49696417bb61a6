// SPDX-License-Identifier: Apache-2.0
// npo-hal public API: the host-side link training supervisor (docs/spec/registers.md §7.2).
//
// The card runs the training state machine of every port; the host supervises it: one
// non-blocking FSM per port, all ports of all cards stepped from one poll loop that sleeps on
// the platform clock (System::clock()) until the next deadline or poll tick. Stages:
//
//   detect (STATUS.MODULE_PRESENT)
//   -> module ready (CMIS Module State, lower page byte 3; timeout: the module's advertised
//      MaxDurationModulePwrUp, page 01h byte 167, else t_module)
//   -> data path init (CMIS page 11h DataPathState = DPActivated on the lanes in use; timeout:
//      advertised MaxDurationDPInit, page 01h byte 144, else t_datapath)
//   -> CDR lock / Tx equalisation (card state Training, LANE_STATUS; TRAIN_TIMEOUT per attempt)
//   -> FEC lock and alignment (t_fec)
//   -> neighbour (NEIGHBOR.VALID: the partner's fabric ID and port exchanged in training)
//   -> up.
//
// Results combine the card's TRAIN_RESULT with the host's own deadlines. When CDR lock fails
// on some lanes only, the supervisor can retrain narrower (PORT.LANE_ENABLE), down to
// `min_lanes`. A flap damper (FlapDamper) holds a port DISABLED after too many downs.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "npo/hal/error.hpp"

namespace npo {

class System;

/// Result codes of one port's training, with stable names (train_code_name).
enum class TrainCode : std::uint8_t {
  kOk,                   ///< "OK": Up with the neighbour known
  kNoModule,             ///< "NO_MODULE": no module in the cage (or removed during training)
  kTimeoutModuleReady,   ///< "TIMEOUT_MODULE_READY": CMIS ModuleReady not reached in time
  kTimeoutDatapathInit,  ///< "TIMEOUT_DATAPATH_INIT": data path not DPActivated in time
  kTimeoutCdrLock,       ///< "TIMEOUT_CDR_LOCK": lanes (PortTraining::failed_lanes) without CDR lock
  kTimeoutNeighbor,      ///< "TIMEOUT_NEIGHBOR": lanes locked, no partner identity exchanged
  kTimeoutFecLock,       ///< "TIMEOUT_FEC_LOCK": no RS(544,514) alignment-marker lock
  kDisabledFlapping,     ///< "DISABLED_FLAPPING": held down by the flap policy
  kCardRemoved,          ///< "CARD_REMOVED": the card vanished (registers read all ones)
};
/// Stable upper-case name, e.g. TrainCode::kTimeoutFecLock -> "TIMEOUT_FEC_LOCK".
[[nodiscard]] std::string_view train_code_name(TrainCode c) noexcept;

/// Supervisor stages, in order.
enum class TrainStage : std::uint8_t { kDetect, kModuleReady, kDataPathInit, kCdrLock, kFecLock, kNeighbor, kDone };
inline constexpr std::size_t kTrainStageCount = 7;
/// Stable name: "detect", "module_ready", "datapath_init", "cdr_lock", "fec_lock", "neighbor", "done".
[[nodiscard]] std::string_view train_stage_name(TrainStage s) noexcept;

/// Flap dampening policy (registers.md §7.2: "dampening is host policy").
struct FlapPolicy {
  unsigned max_downs = 5;                    ///< this many downs within `window_ns` -> held DISABLED
  std::uint64_t window_ns = 60'000'000'000;  ///< sliding window, ns (60 s)
};

/// Timeouts and retry budget of the supervisor. Defaults: registers.md §7.2 published
/// values (interface 1.0); module-advertised durations (CMIS 5.2 page 01h) replace
/// module_ready_ns / datapath_init_ns when `use_module_durations` and the module advertises
/// them. Every timeout is on the platform clock, in ns.
struct TrainingPolicy {
  /// Wait for MODULE_PRESENT before reporting NO_MODULE. 0: report at once (no cage polling).
  std::uint64_t detect_ns = 0;
  std::uint64_t module_ready_ns = 5'000'000'000;   ///< t_module (§7.2)
  std::uint64_t datapath_init_ns = 2'000'000'000;  ///< t_datapath (§7.2)
  std::uint32_t train_timeout_ms = 500;            ///< TRAIN_TIMEOUT per attempt, written to the card (§7.2)
  std::uint64_t fec_lock_ns = 100'000'000;         ///< t_fec (§7.2)
  std::uint64_t neighbor_ns = 100'000'000;         ///< Up -> NEIGHBOR.VALID (host policy)
  unsigned card_attempts = 3;                      ///< N_attempts the card makes before Fault (§7.2, not settable)
  unsigned host_retries = 2;                       ///< CTRL.TRAIN retries after the card gives up (fresh budget each)
  /// Host margin on top of each card deadline before the host declares the stage timed out
  /// itself (the card's TRAIN_RESULT normally arrives first).
  std::uint64_t slack_ns = 50'000'000;
  bool use_module_durations = true;  ///< take module-ready / DP-init timeouts from page 01h
  bool allow_degrade = true;         ///< drop lanes without CDR lock and retrain narrower
  unsigned min_lanes = 4;            ///< never degrade below this many lanes
  /// Degrade only after the same lanes failed CDR lock in this many consecutive attempts.
  unsigned degrade_after_attempts = 2;
  std::uint64_t poll_ns = 1'000'000;  ///< poll tick while a stage waits, ns (1 ms)
  FlapPolicy flap;                    ///< flaps during the supervision count here too
};

/// One training attempt as the card reported it (TRAIN_RESULT) or the host timed it out.
struct TrainAttempt {
  unsigned attempt = 0;  ///< card attempt number (TRAIN_RESULT.ATTEMPT), from 1
  TrainCode code = TrainCode::kOk;
  std::uint8_t failed_lanes = 0;  ///< lanes without CDR lock (TIMEOUT_CDR_LOCK)
  bool from_card = true;          ///< false: the host's deadline expired first
  std::uint64_t at_ns = 0;        ///< platform clock, from the start of the supervision
};

/// Per-port supervision result.
struct PortTraining {
  std::uint32_t card = 0;  ///< card index in the System
  unsigned port = 0;
  TrainCode code = TrainCode::kNoModule;   ///< final result
  TrainStage stage = TrainStage::kDetect;  ///< stage the port ended in (kDone on OK)
  std::uint8_t failed_lanes = 0;           ///< with TIMEOUT_CDR_LOCK: lanes that did not lock
  std::uint8_t dropped_lanes = 0;          ///< lanes removed from LANE_ENABLE by lane degrade
  std::uint8_t lane_enable = 0xff;         ///< LANE_ENABLE at the end
  unsigned lanes_up = 0;                   ///< lanes in use at the end (STATUS.LANE_COUNT)
  unsigned lanes_total = 8;                ///< lanes of the port (CAP0.LANES_PER_PORT)
  std::optional<std::uint32_t> neighbor_fabric_id;
  std::optional<unsigned> neighbor_port;
  unsigned host_retries = 0;           ///< CTRL.TRAIN retries the host issued
  std::vector<TrainAttempt> attempts;  ///< every failed or successful attempt seen, in order
  /// Time spent in each stage (index = TrainStage), platform clock ns.
  std::array<std::uint64_t, kTrainStageCount> stage_ns{};
  std::uint64_t total_ns = 0;                  ///< start of supervision to the final result
  std::uint64_t module_ready_timeout_ns = 0;   ///< the timeout used (advertised or policy)
  std::uint64_t datapath_init_timeout_ns = 0;  ///< the timeout used (advertised or policy)
  /// CMIS Module State (lower page byte 3 bits 3:1: 1 LowPwr, 2 PwrUp, 3 Ready, 4 PwrDn,
  /// 5 Fault) read once when the port was seen waiting for its module, and at a timeout.
  std::optional<std::uint8_t> cmis_module_state;
  /// Whether every lane in use was DPActivated (page 11h DataPathState) when read once in
  /// the data-path stage, and at a timeout; nullopt when not read or page 11h not readable.
  std::optional<bool> cmis_datapath_activated;
  /// One-line explanation, e.g. "OK: up 7/8 lanes, lane 3 dropped (no CDR lock)".
  std::string detail;
  /// PORT.STATUS said Up when supervision of the port began (before any write of this
  /// supervision); false for a port it found down, removed or held down.
  bool up_at_start = false;
};

/// One port of one card.
struct PortRef {
  std::uint32_t card = 0;  ///< card index in the System
  unsigned port = 0;
  friend bool operator==(const PortRef&, const PortRef&) = default;
};

/// Supervises training of `ports` (all ports of all cards when empty) concurrently: enables
/// each port (PORT.CTRL.ENABLE, TRAIN_TIMEOUT from the policy), or retrains it
/// (CTRL.TRAIN) when `retrain` is set, then steps every port's FSM from one poll loop that
/// sleeps on the platform clock until the next deadline or poll tick. CMIS pages are read
/// through the mailbox once per stage change, never per tick. `held_down` ports are not
/// touched and end with DISABLED_FLAPPING. `timeout_ns` caps the whole run (ports still
/// waiting end with their stage's timeout code).
/// Errors: kOutOfRange (a card or port outside the system). Per-port failures (including
/// CARD_REMOVED) are results. Thread-safety: one supervision per port at a time.
Result<std::vector<PortTraining>> train_ports(System& system, std::span<const PortRef> ports,
                                              const TrainingPolicy& policy = {},
                                              std::uint64_t timeout_ns = 10'000'000'000, bool retrain = false,
                                              std::span<const PortRef> held_down = {});

/// CMIS 5.2 state-duration encoding (Table 8-43, page 01h bytes 144/167 nibbles): the upper
/// bound of the advertised range in ns (0 -> 1 ms, 1 -> 5 ms, ... 12 -> 50 min); nullopt for
/// 13 (">= 50 min", unbounded) and the reserved codes 14, 15. Thread-safety: pure.
[[nodiscard]] std::optional<std::uint64_t> cmis_duration_ns(std::uint8_t code) noexcept;

/// Sliding-window flap damper: `max_downs` downs within `window_ns` hold the port down until
/// release(). Pure logic (the caller supplies times). Thread-safety: none (one owner).
class FlapDamper {
 public:
  explicit FlapDamper(FlapPolicy policy = {}) : policy_(policy) {}
  /// Records `count` downs at time `t_ns` (ns, any monotonic epoch). Returns true when this
  /// record made the port held down (the caller then disables it).
  bool on_down(std::uint64_t t_ns, unsigned count = 1);
  /// Whether the port is held down.
  [[nodiscard]] bool held_down() const noexcept { return held_; }
  /// Downs within the window ending at `t_ns`.
  [[nodiscard]] unsigned downs_in_window(std::uint64_t t_ns) const noexcept;
  /// Downs that caused the hold-down (0 if not held).
  [[nodiscard]] unsigned held_downs() const noexcept { return held_downs_; }
  /// "held down: 5 flaps in 60 s" (empty when not held).
  [[nodiscard]] std::string reason() const;
  /// Ends the hold-down (host re-enable) and forgets past downs.
  void release() noexcept;
  [[nodiscard]] const FlapPolicy& policy() const noexcept { return policy_; }

 private:
  FlapPolicy policy_;
  std::deque<std::uint64_t> downs_;
  bool held_ = false;
  unsigned held_downs_ = 0;
};

}  // namespace npo
