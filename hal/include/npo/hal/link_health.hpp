// SPDX-License-Identifier: Apache-2.0
// npo-hal public API: per-lane health verdicts and port states (pure logic, no device).
//
// A lane's verdict for one interval (between two counter snapshots) combines:
//  - pre-FEC BER over the interval (registers.md §7.3):
//        (dSYMBOL_ERRORS + 16 x dUNCORRECTABLE) / (5440 x dCODEWORDS)
//    against the KP4 RS(544,514) limit (2.4e-4: FAILING above) and a warning level
//    (1e-5: DEGRADED above);
//  - change against the lane's own baseline (the BER of its first healthy intervals):
//    >= 100x worse -> DEGRADED ("came back 100x worse" after the lane was down);
//  - the FEC-bin tail: codewords with >= 12 symbol errors, or any uncorrectable -> FAILING;
//  - DDM: module thresholds (CMIS page 02h) on Rx/Tx power and bias (alarm -> FAILING,
//    warning -> DEGRADED), Rx LOS and Tx fault -> FAILING;
// then hysteresis: a worse verdict must persist K intervals to take effect, a better one M.
// Every verdict carries its reasons with the numbers.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "npo/hal/link_training.hpp"
#include "npo/hal/port.hpp"
#include "npo/hal/xcvr_decode.hpp"

namespace npo {

/// Health verdict of a lane, best first (ordered: a larger value is worse).
enum class LaneHealth : std::uint8_t { kGood, kDegraded, kFailing, kDown };
/// "GOOD", "DEGRADED", "FAILING", "DOWN".
[[nodiscard]] std::string_view lane_health_name(LaneHealth h) noexcept;

/// State of a port, best first.
enum class PortState : std::uint8_t { kHealthy, kDegraded, kFailed, kDisabled };
/// "HEALTHY", "DEGRADED", "FAILED", "DISABLED".
[[nodiscard]] std::string_view port_state_name(PortState s) noexcept;

/// Limits and hysteresis of the lane verdict. Defaults and their sources are given per field.
struct HealthLimits {
  /// KP4 RS(544,514) pre-FEC BER limit (IEEE 802.3 clause 91 / 802.3ck, 2.4e-4): above -> FAILING.
  double ber_failing = 2.4e-4;
  /// Warning level (host policy, ~1/24 of the KP4 limit): above -> DEGRADED.
  double ber_warning = 1e-5;
  /// BER at least this many times the lane's baseline -> DEGRADED.
  double baseline_factor = 100.0;
  /// Healthy intervals averaged into the baseline after the lane first comes up.
  unsigned baseline_intervals = 1;
  /// Baselines below this are taken as this (a clean lane's 0 errors must not make one error
  /// "infinitely worse"), so the change rule needs BER >= factor x floor = 1e-7 by default.
  double baseline_floor = 1e-9;
  /// Bit errors an interval needs before the baseline rule applies (counting noise).
  std::uint64_t min_errors_for_change = 10;
  /// FEC tail: codewords with at least this many symbol errors are "near the limit" (15).
  unsigned tail_bin = 12;
  /// Tail codewords tolerated per interval; more -> FAILING.
  std::uint64_t tail_max = 0;
  /// Uncorrectable codewords tolerated per interval; more -> FAILING.
  std::uint64_t uncorrectable_max = 0;
  /// Hysteresis: intervals a worse verdict must persist before it is reported (K).
  unsigned worsen_intervals = 2;
  /// Hysteresis: intervals a better verdict must persist before it is reported (M).
  unsigned recover_intervals = 3;
};

/// Pre-FEC BER over the interval prev -> cur (registers.md §7.3). A counter that went
/// backwards (LANE.CLEAR, reset) counts from 0. nullopt when no codeword was received.
/// Thread-safety: pure.
[[nodiscard]] std::optional<double> pre_fec_ber(const LaneCounters& prev, const LaneCounters& cur) noexcept;

/// Module-side observations of a lane that the counters do not carry.
struct LaneDdmFlags {
  bool rx_los = false;    ///< module reports loss of signal on the lane
  bool tx_fault = false;  ///< module reports a transmitter fault on the lane
};

/// One interval's findings for a lane (before hysteresis).
struct LaneAssessment {
  LaneHealth level = LaneHealth::kGood;
  std::optional<double> ber;         ///< pre-FEC BER over the interval
  std::uint64_t codewords = 0;       ///< in the interval
  std::uint64_t uncorrectable = 0;   ///< in the interval
  std::uint64_t tail_codewords = 0;  ///< in the interval, bins >= tail_bin
  std::vector<std::string> reasons;  ///< why, with numbers; empty when GOOD
};

/// Assesses one interval of one lane. `locked`: the lane is in use and has CDR lock (else
/// DOWN). `baseline`: the lane's baseline BER, if known; `came_back`: the lane was down since
/// the baseline was taken. `thresholds`: the module's DDM thresholds (nullptr: not checked).
/// Thread-safety: pure.
[[nodiscard]] LaneAssessment assess_lane(const LaneCounters& prev, const LaneCounters& cur, bool locked,
                                         const LaneDdmFlags& flags, const xcvr::Thresholds* thresholds,
                                         std::optional<double> baseline, bool came_back, const HealthLimits& limits);

/// A lane's verdict after hysteresis, with its reasons.
struct LaneHealthReport {
  unsigned lane = 0;                       ///< physical lane
  LaneHealth verdict = LaneHealth::kGood;  ///< reported (after hysteresis)
  LaneHealth raw = LaneHealth::kGood;      ///< this interval alone
  std::optional<double> ber;               ///< pre-FEC BER over the interval
  std::optional<double> baseline_ber;      ///< the lane's baseline
  std::uint64_t tail_codewords = 0;        ///< interval
  std::uint64_t uncorrectable = 0;         ///< interval
  unsigned pending = 0;                    ///< intervals a different raw level has persisted
  /// Why the verdict is what it is, with numbers; never empty (a GOOD lane says its BER).
  /// The first reasons are this interval's findings (level `raw`); when hysteresis holds the
  /// verdict at another level, the last one says so.
  std::vector<std::string> reasons;
  /// One line that matches `verdict` (never a finding of a worse level than the verdict):
  /// this interval's first finding when raw == verdict, else the finding of the last interval
  /// at the verdict's level with "(RAW for n of K intervals)" appended. Ports build their
  /// reason from this, so a port's state and reason come from the same verdict.
  std::string verdict_reason;
};

/// Keeps one lane's baseline and hysteresis state across intervals. Thread-safety: none.
class LaneHealthTracker {
 public:
  explicit LaneHealthTracker(HealthLimits limits = {}) : limits_(limits) {}
  /// Feeds the interval prev -> cur and returns the verdict. DOWN takes effect at once (the
  /// lane lost lock: a fact, not a trend); the first interval after DOWN reports its level at
  /// once; otherwise a worse level needs `worsen_intervals`, a better `recover_intervals`
  /// consecutive intervals at that level or beyond (a mixed run moves the verdict by the
  /// least change it held, and its last interval counts toward the next step). Intervals
  /// without codewords (BER undefined) and without other findings keep the verdict and
  /// break a run.
  LaneHealthReport update(const LaneCounters& prev, const LaneCounters& cur, bool locked,
                          const LaneDdmFlags& flags = {}, const xcvr::Thresholds* thresholds = nullptr);
  /// Takes a lane's counters since the last clear as history instead of as an interval to
  /// judge (LinkMonitor::sample's first snapshot): their BER becomes the baseline when it is
  /// GOOD by these limits, the verdict starts GOOD, and the next update() is judged with the
  /// usual hysteresis (a worse level must persist `worsen_intervals`). A lane without lock
  /// (`locked` false) is not seeded: its next update() reports what it shows at once.
  void seed(const LaneCounters& since_clear, bool locked);
  [[nodiscard]] LaneHealth verdict() const noexcept { return verdict_; }
  [[nodiscard]] std::optional<double> baseline() const noexcept { return baseline_; }
  /// Sets the baseline (e.g. a BER recorded at an earlier bring-up).
  void set_baseline(double ber) noexcept { baseline_ = ber; }
  [[nodiscard]] const HealthLimits& limits() const noexcept { return limits_; }

 private:
  HealthLimits limits_;
  LaneHealth verdict_ = LaneHealth::kGood;
  bool started_ = false;
  bool came_back_ = false;
  std::optional<double> baseline_;
  double base_err_ = 0, base_bits_ = 0;
  unsigned base_n_ = 0;
  std::string verdict_reason_;                // the last finding at the verdict's level
  unsigned run_ = 0;                          // consecutive intervals on the same side of verdict_
  LaneHealth run_level_ = LaneHealth::kGood;  // least change seen in the run
  int run_dir_ = 0;                           // +1 worse, -1 better
};

/// A port's state with its reason and lane verdicts.
struct PortHealth {
  PortState state = PortState::kFailed;
  /// e.g. "up 8/8 lanes", "up 7/8 lanes: lane 3 dropped (no CDR lock)",
  /// "training failed: TIMEOUT_FEC_LOCK", "held down: 5 flaps in 60 s".
  std::string reason;
  std::vector<LaneHealthReport> lanes;  ///< lanes in use (physical lane order)
  /// Whether the link carries traffic: the card says Up, every lane in use has CDR lock and
  /// (when LinkMonitor knows it) the far end is Up with lock too. Speed and lanes of a port
  /// whose link is not up are 0.
  bool link_up = false;
  /// The port had a module and lost it (module removed): state FAILED, always listed.
  bool module_lost = false;
  /// Lanes carrying the link (in use and locked) when link_up, else 0.
  unsigned lane_count = 0;
};

/// Facts about a port beyond its registers that assess_port takes into account.
struct PortContext {
  /// The host saw a module in this port earlier (LinkMonitor tracks it). The registers also
  /// tell: EVENT_STATUS.MODULE_CHANGE latched or UP_COUNT > 0 with no module now.
  bool had_module = false;
};

/// Physical lanes carrying the link (bit n = physical lane n): the lanes PORT.LANE_MAP maps
/// a logical lane to (registers.md §7.1), i.e. the set both ends negotiated in training; when
/// LANE_MAP maps no lane (PortStatus::lane_map all kUnusedLane), LANE_ENABLE & LANES_UP.
/// Thread-safety: pure function.
[[nodiscard]] std::uint8_t lanes_in_use(const PortStatus& st) noexcept;

/// Combines a port snapshot, its lane verdicts, the flap damper's hold-down reason (empty:
/// not held) and the last training result of the port (nullptr: unknown) into a state.
/// Rules: held down -> DISABLED; CTRL.ENABLE = 0 -> DISABLED "disabled by host"; a module
/// that was there and is gone -> FAILED "module removed"; no module -> DISABLED "no module (or
/// its cable ends at a switch port with no cross-connect yet)" (MODULE_PRESENT = 0 either way;
/// CTRL.ENABLE = 0 too: "disabled by host; no module (or ...)");
/// not Up -> FAILED "training failed: CODE" (from `last_training`, else the card's
/// TRAIN_RESULT: "port in Fault after N attempts: CODE ...", naming lanes without CDR lock and
/// whether a retrain can run narrower) or "down: STATE"; Up with no lane in use locked ->
/// FAILED "down: no CDR lock ..." (link_up false); Up with a FAILING or DOWN lane -> FAILED;
/// Up on fewer lanes than `lanes_total` or with a DEGRADED lane -> DEGRADED; otherwise
/// HEALTHY. Lane details use each lane's verdict_reason (or its first reason when that is
/// empty). Thread-safety: pure.
[[nodiscard]] PortHealth assess_port(const PortStatus& status, std::span<const LaneHealthReport> lanes,
                                     unsigned lanes_total, std::string_view held_reason,
                                     const PortTraining* last_training, const PortContext& context = {});

}  // namespace npo
