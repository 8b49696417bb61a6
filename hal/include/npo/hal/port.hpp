// SPDX-License-Identifier: Apache-2.0
// npo-hal public API: Port -- one optical port of a card and its lanes
// (docs/spec/registers.md §7): register snapshots (PORT and LANE blocks, DDM mirrors),
// enable/disable, PRBS tests (§7.4) and the whole-system link bring-up, which runs the
// host-side training supervisor of link_training.hpp.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "npo/hal/error.hpp"
#include "npo/hal/link_training.hpp"

namespace npo {

class Device;
class System;

/// Port training state (docs/spec/registers.md §7.2).
enum class LinkState : std::uint8_t { kDisabled = 0, kModuleWait, kDataPathInit, kTraining, kFecLock, kUp, kFault };
/// Stable name: "disabled", "module_wait", "datapath_init", "training", "fec_lock", "up", "fault".
[[nodiscard]] std::string_view link_state_name(LinkState s) noexcept;

/// PRBS patterns (PORT.CTRL.PRBS_PATTERN).
enum class PrbsPattern : std::uint8_t { kPrbs7 = 0, kPrbs9, kPrbs11, kPrbs15, kPrbs23, kPrbs31, kPrbs13 };

/// Transmit FIR taps of a lane (LANE.TX_EQ, registers.md §7.3), in 1/64 of full swing.
struct TxEq {
  int pre = 0;        ///< pre-cursor, signed
  unsigned main = 0;  ///< main cursor
  int post = 0;       ///< post-cursor, signed
};

/// Per-lane counters, receiver state and DDM mirrors of one physical lane
/// (docs/spec/registers.md §7.3). Counters count since reset or LANE.CLEAR.
struct LaneCounters {
  std::uint64_t codewords = 0;               ///< RS(544,514) codewords received
  std::uint64_t corrected = 0;               ///< codewords corrected (1..15 symbol errors)
  std::uint64_t uncorrectable = 0;           ///< codewords with > 15 symbol errors
  std::uint64_t symbol_errors = 0;           ///< symbols corrected
  std::array<std::uint64_t, 16> fec_bins{};  ///< codewords by symbol errors 0..15
  std::uint64_t prbs_bits = 0;               ///< bits compared by the PRBS checker (§7.4)
  std::uint64_t prbs_errors = 0;             ///< bit errors found by the PRBS checker
  double snr_db = 0;                         ///< receiver SNR, dB (0: no signal)
  /// Pre-FEC BER since reset/clear, registers.md §7.3:
  /// (SYMBOL_ERRORS + 16 x UNCORRECTABLE) / (5440 x CODEWORDS); nullopt with no codewords.
  /// For an interval use npo::pre_fec_ber(prev, cur) (link_health.hpp).
  std::optional<double> pre_fec_ber;
  bool signal = false;                 ///< LANE_STATUS.SIGNAL
  bool cdr_lock = false;               ///< LANE_STATUS.CDR_LOCK
  bool prbs_lock = false;              ///< LANE_STATUS.PRBS_LOCK
  TxEq tx_eq;                          ///< taps chosen by the last successful training
  double rx_power_mw = 0;              ///< DDM mirror LANE.RX_POWER (0.1 uW units), mW
  double tx_power_mw = 0;              ///< DDM mirror LANE.TX_POWER (0.1 uW units), mW
  std::optional<double> rx_power_dbm;  ///< 10 log10(rx_power_mw); nullopt at 0 mW (no light)
  std::optional<double> tx_power_dbm;  ///< 10 log10(tx_power_mw); nullopt at 0 mW
  double tx_bias_ma = 0;               ///< DDM mirror LANE.TX_BIAS (1 uA units), mA
};

/// TRAIN_RESULT decoded (regs.hpp port::kTrainResult*): the card's verdict on its last
/// training attempt. code values: fw::regs::port::TrainResult (0 none, 1 OK, 2 no module,
/// 3 module not ready, 4 data path timeout, 5 CDR lock timeout, 6 neighbour timeout,
/// 7 FEC lock timeout, 8 aborted).
struct TrainResultReg {
  std::uint8_t code = 0;
  LinkState state = LinkState::kDisabled;  ///< state the attempt ended in
  std::uint8_t failed_lanes = 0;           ///< physical lanes without CDR lock at the failure
  unsigned attempt = 0;                    ///< attempt number within the bring-up, from 1
  bool operator==(const TrainResultReg&) const = default;
};

/// Value of PortStatus::lane_map for a logical lane no physical lane carries.
inline constexpr std::uint8_t kUnusedLane = 0xff;

/// Latched link events (PORT.EVENT_STATUS, registers.md §7.1): set by the card, cleared only
/// by the host (write 1 to clear); reading a PortStatus does not clear them.
struct PortEvents {
  bool link_up = false;        ///< the link entered Up
  bool link_down = false;      ///< the link left Up
  bool train_fail = false;     ///< a training attempt failed
  bool module_change = false;  ///< a module was inserted or removed
  bool operator==(const PortEvents&) const = default;
};

/// A snapshot of one port (PORT block, registers.md §7.1, and its LANE blocks).
struct PortStatus {
  unsigned port = 0;
  LinkState state = LinkState::kDisabled;
  bool link_up = false;
  bool fec_lock = false;
  bool module_present = false;
  unsigned lane_count = 0;          ///< lanes in use (STATUS.LANE_COUNT)
  std::uint8_t lanes_up = 0;        ///< bitmap over physical lanes with signal and CDR lock
  std::uint32_t lane_rate_mbd = 0;  ///< per-lane signalling rate, Mbaud
  bool pam4 = false;
  std::optional<std::uint32_t> neighbor_fabric_id;  ///< learned in training
  std::optional<unsigned> neighbor_port;
  std::uint32_t train_count = 0;
  std::uint32_t flap_count = 0;
  // PORT.CTRL, decoded (registers.md §7.1, §7.4):
  bool enabled = false;          ///< CTRL.ENABLE: the host allows the link up (enable_port)
  bool loopback = false;         ///< CTRL.LOOPBACK: near-end loopback
  bool prbs_generating = false;  ///< CTRL.PRBS_GEN: transmitting the PRBS pattern
  bool prbs_checking = false;    ///< CTRL.PRBS_CHECK: checking received PRBS
  bool prbs_host_side = false;   ///< CTRL.PRBS_SIDE: false media side (fibre), true host side
  /// CTRL.PRBS_PATTERN; nullopt when the register holds a code no pattern has.
  std::optional<PrbsPattern> prbs_pattern;
  /// PORT.LANE_MAP decoded: lane_map[n] is the physical lane carrying logical lane n, or
  /// kUnusedLane (the link uses fewer lanes, or the port has not trained).
  std::array<std::uint8_t, 8> lane_map{kUnusedLane, kUnusedLane, kUnusedLane, kUnusedLane,
                                       kUnusedLane, kUnusedLane, kUnusedLane, kUnusedLane};
  std::uint8_t lane_enable = 0xff;      ///< PORT.LANE_ENABLE: bit n = physical lane n may be used
  TrainResultReg train_result;          ///< PORT.TRAIN_RESULT
  std::uint32_t up_count = 0;           ///< PORT.UP_COUNT: entries into Up since reset
  std::uint32_t coeff_updates = 0;      ///< PORT.COEFF_UPDATES: Tx EQ requests in the last training
  PortEvents events;                    ///< PORT.EVENT_STATUS (latched, not cleared by reading)
  std::uint8_t prbs_lanes = 0;          ///< PORT.PRBS_LANES: bit n = PRBS runs on physical lane n
  std::optional<double> module_temp_c;  ///< DDM mirror MODULE_TEMP (1/256 degC); nullopt without module
  std::optional<double> module_vcc_v;   ///< DDM mirror MODULE_VCC (100 uV); nullopt without module
  std::vector<LaneCounters> lanes;      ///< physical lane order

  /// Payload rate in Gb/s: lanes in use x per-lane line rate x 2 (PAM4) or 1 (NRZ), less the
  /// RS(544,514) and 256b/257b overhead (registers.md §7.1: 8 x 53.125 GBd PAM4 = 800 Gb/s).
  /// 0 when no application is selected.
  [[nodiscard]] double speed_gbps() const noexcept;
};

/// Enables (or disables) port `port`: with a module present the card then runs link
/// training (registers.md §7.2: ModuleWait -> DataPathInit -> Training -> FecLock -> Up, each
/// step with its published timeout and a budget of 3 training attempts before Fault).
/// Errors: kOutOfRange (port), kUnavailable (card removed). Thread-safety: safe from any thread.
Result<void> enable_port(Device& device, unsigned port, bool enable = true);

/// Writes 1 to PORT.CTRL.TRAIN: restarts training with a fresh budget (registers.md §7.2).
/// Errors as enable_port. Thread-safety: safe from any thread.
Result<void> retrain_port(Device& device, unsigned port);

/// Writes PORT.LANE_ENABLE (bit n: physical lane n may be used). Takes effect at the next
/// training. Errors as enable_port, kInvalidArgument for an empty mask.
Result<void> set_lane_enable(Device& device, unsigned port, std::uint8_t mask);

/// Outcome of bring_up_links.
struct LinkBringUp {
  unsigned ports_with_module = 0;   ///< cabled ports found
  unsigned up = 0;                  ///< of those, trained and Up
  unsigned failed = 0;              ///< ended with any code but OK (or still training at the timeout)
  unsigned degraded = 0;            ///< of `up`, running on fewer lanes than the port has
  std::uint64_t elapsed_ns = 0;     ///< on the platform clock (emulated time on a virtual clock)
  std::uint64_t wall_ns = 0;        ///< wall-clock time the bring-up took
  std::vector<PortTraining> ports;  ///< per port with a module (and ports found without one)
};

/// Step 1 of bring_up_fabric (bring_up.hpp), which most callers want instead: it also
/// discovers the topology and programs the routes remote DMA needs.
/// Enables every port of every card of `system` and runs the training supervisor
/// (link_training.hpp) over all of them concurrently in one poll loop on the platform clock
/// (on the emulator's virtual clock, waiting advances emulated time). Ports without a module
/// end with NO_MODULE and are not counted in ports_with_module. `timeout_ns` caps the whole
/// bring-up (platform clock); ports still training then end with their stage's timeout code.
/// On every port it brought Up (not those Up before) it then reads page 11h bytes 134..152 once
/// (CMIS 5.2 §8.9.3, latched lane flags clear on read): the Rx LOS / CDR LOL a module latched
/// while its far end was dark belong to the bring-up; a persisting condition latches again.
/// Errors: kUnavailable naming the card when a card was removed before or during the
/// bring-up (it stops at the first poll that finds the card gone, instead of letting the
/// partners run into their stage timeouts). Per-port failures are results, not errors. Thread-safety: one bring-up per
/// System at a time.
Result<LinkBringUp> bring_up_links(System& system, std::uint64_t timeout_ns = 2'000'000'000);
/// As above with an explicit policy (timeouts, retry budget, lane degrade).
Result<LinkBringUp> bring_up_links(System& system, const TrainingPolicy& policy, std::uint64_t timeout_ns);

/// Reads every register of port `port` of `device` (PORT block, 8 LANE blocks, DDM mirrors).
/// Errors: kOutOfRange (port >= num_ports), kUnavailable (card removed).
/// Thread-safety: reads only; safe concurrently.
Result<PortStatus> read_port(Device& device, unsigned port);

/// Reads the module of `port` over the mailbox into ethtool's linear layout (CMIS: lower
/// memory, page 00h, then pages 01h, 02h, 10h, 11h as long as the module answers), ready for
/// xcvr::decode_module. Errors: kNotFound (no module), mailbox errors. Thread-safety:
/// serialised on the card's mailbox.
Result<std::vector<std::byte>> read_module_image(Device& device, unsigned port);

// ---- PRBS (registers.md §7.4) --------------------------------------------------------------

/// "PRBS7" ... "PRBS31", "PRBS13".
[[nodiscard]] std::string_view prbs_pattern_name(PrbsPattern p) noexcept;
/// Inverse of prbs_pattern_name (case-insensitive). Errors: kInvalidArgument listing the names.
Result<PrbsPattern> parse_prbs_pattern(std::string_view name);

/// What a PRBS test does.
struct PrbsOptions {
  PrbsPattern pattern = PrbsPattern::kPrbs31;
  bool host_side = false;                     ///< false: media side (over the fibre); true: host side (card <-> module)
  std::uint8_t lanes = 0xff;                  ///< PORT.PRBS_LANES
  std::uint64_t duration_ns = 1'000'000'000;  ///< checking time, platform clock
};

/// One lane of a PRBS result.
struct PrbsLane {
  unsigned lane = 0;
  bool locked = false;  ///< LANE_STATUS.PRBS_LOCK at the end
  std::uint64_t bits = 0;
  std::uint64_t errors = 0;
  std::optional<double> ber;  ///< errors / bits; nullopt when no bit was compared
};

/// PRBS result of one port.
struct PrbsPortResult {
  std::uint32_t card = 0;
  unsigned port = 0;
  std::vector<PrbsLane> lanes{};
};

/// Runs a PRBS test on `port` of card `card` and on the far end of its link (the neighbour
/// learned in training, if any): both ends generate and check `options.pattern` on the
/// selected lanes for `options.duration_ns` (sleeping on the platform clock), then both stop;
/// the ports then retrain (§7.4). Returns the result of each end (this end first).
/// Errors: kOutOfRange (card, port), kUnavailable (card removed). Thread-safety: one test
/// per port at a time.
Result<std::vector<PrbsPortResult>> run_prbs(System& system, std::uint32_t card, unsigned port,
                                             const PrbsOptions& options);

}  // namespace npo
