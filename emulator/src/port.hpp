// SPDX-License-Identifier: Apache-2.0
// Emulator internals: the optical ports of one card (registers.md §7, docs/emulator.md).
// A Port owns one port's state: its CMIS 5.2 module (module and data path state machines,
// CMIS memory), the link state machine (§7.2: ModuleWait, DataPathInit, Training, FecLock,
// Up, Fault), its eight lanes (channel model, FEC and PRBS counters) and its fault state.
// A PortSet holds the ports of one card and the one mutex they share.
//
// Sources: port.cpp (registers, state machine, faults), port_channel.cpp (what the
// receivers see: lane BER, counters, PRBS, lane registers, telemetry, stats records),
// port_cmis.cpp (the CMIS module), port_set.cpp (the card's ports together).
//
// Locking: the ports of a card share one mutex (owned by PortSet). Public Port methods take
// it where they touch port state (the published view below needs none); private methods,
// the *_locked ones PortSet calls included, expect it held. The far end of a link is
// reached only through EmulatorImpl::resolve_peer / channel_of and the far port's published
// words (published(), published_prbs_lanes(), power_on_ns(), module_seed()), which are read
// without its lock, so no two port mutexes are ever held together. Everything is event
// driven on the emulated clock: a port schedules its next step; nothing polls in a loop.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "npo/emu/emulator.hpp"
#include "npo/fw/mailbox.hpp"
#include "npo/fw/prbs.hpp"
#include "npo/fw/regs.hpp"
#include "npo/fw/stats.hpp"
#include "optics.hpp"
#include "port_cdb.hpp"

namespace npo::emu {

class Card;
class EmulatorImpl;

/// PRBS generator/checker state of one lane (registers.md §7.4), allocated while PRBS runs.
struct PrbsLaneState {
  fw::prbs::PrbsGenerator gen{fw::prbs::Pattern::kPrbs31};  ///< the far transmitter's stream (sampled)
  fw::prbs::PrbsChecker chk{fw::prbs::Pattern::kPrbs31};    ///< the local checker
  std::uint8_t gen_pattern = 0xff;                          ///< pattern `gen` was built for
  std::uint8_t chk_pattern = 0xff;                          ///< pattern `chk` was built for
};

/// One physical lane of a port: receive-side channel state, counters and training result
/// (docs/emulator.md "Channel model"). Owned by its Port, guarded by the port mutex.
struct LaneModel {
  optics::FecCounters fec;              ///< RS(544,514) counters (registers.md §7.3)
  std::uint64_t prbs_bits = 0;          ///< LANE.PRBS_BITS
  std::uint64_t prbs_errors = 0;        ///< LANE.PRBS_ERRORS
  bool prbs_lock = false;               ///< LANE_STATUS.PRBS_LOCK
  std::unique_ptr<PrbsLaneState> prbs;  ///< present while the checker has run
  optics::Rng rng;                      ///< seeded per (system seed, card, port, lane)
  std::uint64_t synced_ns = 0;          ///< counters integrated up to this emulated time
  double spread_db = 0;                 ///< seeded receiver SNR spread, ±optics::kLaneSpreadDb
  optics::TxEq optimum;                 ///< seeded optimum of this lane's transmitter
  bool trained = false;                 ///< last training tuned the lane (TX_EQ = optimum)
  std::uint64_t dark_until_ns = 0;      ///< lane_loss: no light received before this time (~0: forever)
  bool ramp = false;                    ///< ber_ramp active on the receive side
  std::uint64_t ramp_start_ns = 0;
  std::uint64_t ramp_dur_ns = 0;
  double ramp_from = 0;    ///< BER at ramp start
  double ramp_to = 0;      ///< final BER
  double ber_cache = 0;    ///< channel BER at ber_cache_ns (recomputed every 50 ms of emulated time)
  double snr_cache = 0;    ///< channel SNR (dB) at ber_cache_ns
  double rx_mw_cache = 0;  ///< received optical power (mW) at ber_cache_ns
  /// Counter snapshot for TELEMETRY max_ber (mailbox.md §3.7).
  struct Snap {
    std::uint64_t t = 0, cw = 0, se = 0, unc = 0;
  };
  Snap tel_old, tel_new;      ///< two snapshots about a second apart
  double tx_offset_db = 0;    ///< seeded offset of this lane's laser power, dB
  double bias_offset_ma = 0;  ///< seeded offset of this lane's laser bias, mA
  std::uint64_t ber_cache_ns = 0;
  bool ber_valid = false;
};

/// CMIS memory of one module: lower memory and the upper pages this model implements.
enum class CmisPage : std::uint8_t { kLower = 0, k00 = 1, k01 = 2, k02 = 3, k10 = 4, k11 = 5 };
inline constexpr unsigned kCmisPages = 6;

/// One optical port of a card: module, link state machine, lanes.
class Port {
 public:
  /// Port `index` of `card`; `mu` is the card's port mutex (PortSet). Seeds the module and
  /// lane physics from (system seed, card, port): they never change afterwards.
  Port(Card& card, std::mutex& mu, unsigned index);
  Port(const Port&) = delete;
  Port& operator=(const Port&) = delete;

  [[nodiscard]] unsigned index() const noexcept { return index_; }

  // ---- Registers (BAR0 port block, registers.md §7); take the lock --------------------
  /// Reads register `reg` (offset in the port block, lanes included).
  std::uint64_t read(std::uint32_t reg);
  /// Writes register `reg`; CTRL goes to set_ctrl().
  void write(std::uint32_t reg, std::uint64_t value);
  /// Link-control entry point (CTRL register writes and mailbox LINK_CONTROL).
  void set_ctrl(std::uint32_t ctrl);
  /// PORT.CTRL as last written (masked to its defined bits).
  [[nodiscard]] std::uint32_t ctrl();
  /// PORT.STATUS (registers.md §7.1).
  [[nodiscard]] std::uint32_t status();
  /// PORT.STATUS and PORT.FLAP_COUNT read under one lock (TELEMETRY, mailbox.md §3.7).
  struct StatusAndFlaps {
    std::uint32_t status = 0;
    std::uint32_t flaps = 0;
  };
  [[nodiscard]] StatusAndFlaps status_and_flaps();

  // ---- Firmware services -------------------------------------------------------------
  /// XCVR_READ / XCVR_WRITE (mailbox.md §3.5): reads refresh the monitors and clear latched
  /// flags; writes drive the module and data path state machines (CMIS 5.2). `in` holds
  /// `len` bytes for a write; a read appends `len` bytes to `out`. `clear_latched` false: an
  /// observer's peek (emud-protocol.md §5.10): the latched flag bytes read as the conditions
  /// the refresh finds now, and the owner's latches are kept.
  fw::mbox::Status xcvr_access(unsigned bank, unsigned page, unsigned off, unsigned len, bool write,
                               const std::byte* in, std::vector<std::byte>& out, bool clear_latched = true);
  /// Per-port TELEMETRY values (mailbox.md §3.7).
  struct Telemetry {
    std::int16_t mod_temp_q8 = 0;  ///< module temperature, 1/256 °C; 0 without module
    std::uint16_t mod_vcc = 0;     ///< module Vcc, 100 µV; 0 without module
    std::uint32_t max_ber = 0;     ///< worst lane pre-FEC BER as round(-log10 × 1000); 0 none
  };
  [[nodiscard]] Telemetry telemetry();
  /// What the card's power model (power.hpp) needs of this port: the module's CMIS power
  /// advertising (page 00h bytes 200, 201), its power mode, and the lanes the SerDes drive.
  struct PowerView {
    bool present = false;          ///< a module is plugged
    bool low_power = true;         ///< the module is in ModuleLowPwr (CMIS 5.2 §6.3.2)
    std::uint8_t byte200 = 0;      ///< page 00h byte 200: power class in bits 7:5
    std::uint8_t max_power_q = 0;  ///< page 00h byte 201: max power, 0.25 W units
    unsigned dp_lanes = 0;         ///< lanes whose data path is initialised or activated
    unsigned trained_lanes = 0;    ///< lanes in use while the link is FecLock or Up
    std::int16_t temp_q8 = 0;      ///< module temperature, 1/256 °C, the value DDM reports now
  };
  /// Takes the port lock; no side effect (latched flags stay as they are).
  [[nodiscard]] PowerView power_view();

  // ---- Module firmware and CDB (docs/spec/cdb.md); white-box hooks for tests ---------
  /// Power cut of the module: power is lost and comes back at once. The module boots its
  /// committed image (the other valid one if that is invalid), loses the download in
  /// progress and any pending CDB command; the link drops and the port trains again.
  void module_power_cut();
  /// A power cut right after the `n`-th CDB event from now (an event: a command captured,
  /// or a command finished; 0 disarms). The cut runs at the emulated time of that event.
  void arm_power_cut_after_events(std::uint64_t n);
  /// CDB events so far (see arm_power_cut_after_events).
  [[nodiscard]] std::uint64_t cdb_events();
  /// A hung module firmware: CDB commands captured from now on stay "busy executing" until
  /// the next power-up (`stuck` false clears it at once for later commands).
  void set_cdb_stuck(bool stuck);
  /// Snapshot of the module's firmware state.
  [[nodiscard]] ModuleFirmware module_firmware();

  // ---- Fabric ------------------------------------------------------------------------
  /// A light path now leads from this port to a far port: the port carries a module. The
  /// far end itself is looked up per use (EmulatorImpl::resolve_peer), as a switch can move it.
  void attach_cable();
  /// Re-checks an Up link after `delay_ns` (link-loss debounce, light path changes): it
  /// leaves Up for Training when the far end is gone, changed or its lanes lost lock.
  void schedule_link_check(std::uint64_t delay_ns);
  /// Applies a link fault (FaultKind kBerRamp .. kTrainingTimeout) to this port; physical
  /// faults (ber_ramp, lane_loss) also reach `far`, the receive side at the other end.
  void inject_fault(const Fault& f, Port* far);

  // ---- Lock-free view for the far end -------------------------------------------------
  /// Published state word: STATE (bits 3:0), RX_READY (4), transmitting lanes (15:8),
  /// LANE_ENABLE (23:16), PRBS generator on (24), pattern (28:25).
  [[nodiscard]] std::uint32_t published() const noexcept { return pub_.load(std::memory_order_acquire); }
  /// Lanes transmitting the PRBS pattern.
  [[nodiscard]] std::uint32_t published_prbs_lanes() const noexcept {
    return pub_prbs_lanes_.load(std::memory_order_acquire);
  }
  /// Module power-on time, ns of emulated time (DDM warm-up).
  [[nodiscard]] std::uint64_t power_on_ns() const noexcept { return pub_power_on_ns_.load(); }
  /// Seed of the module's DDM and lane offsets; fixed at construction.
  [[nodiscard]] std::uint64_t module_seed() const noexcept { return module_seed_; }

 private:
  friend class PortSet;  // calls the *_locked members below with the port mutex held
  // ---- Under the card's port mutex (held by PortSet) -----------------------------------
  /// Link state and PORT.NEIGHBOR, for remote-op routing (registers.md §8).
  [[nodiscard]] fw::regs::port::LinkState state_locked() const noexcept { return state_; }
  [[nodiscard]] std::uint64_t neighbor_locked() const noexcept { return neighbor_; }
  /// Fills this port's record of the statistics block (registers.md §7.5).
  void fill_record_locked(fw::stats::PortRecord& r);
  /// Card reset: registers, module and counters to reset state; physical faults persist.
  void reset_locked();
  /// Surprise removal: the port goes Disabled and its transmitters dark.
  void remove_locked();

  struct LinkView;  // port_internal.hpp
  // Channel model (port_channel.cpp).
  LinkView link_view(std::uint64_t now);
  [[nodiscard]] bool lane_signal(unsigned l, std::uint64_t now, const LinkView& v) const;
  double lane_ber(unsigned l, std::uint64_t now, const LinkView& v);
  void sync_lanes(std::uint64_t now, const LinkView* known = nullptr);
  void sync_prbs(unsigned l, std::uint64_t from, std::uint64_t to, const LinkView& v);
  std::uint32_t lane_status(unsigned l, std::uint64_t now, const LinkView& v);
  std::uint32_t status_locked();
  std::uint32_t status_view(std::uint64_t now, const LinkView& v);
  std::uint64_t lane_read(unsigned l, std::uint32_t reg);
  std::uint32_t lane_reg_value(unsigned l, std::uint32_t reg, std::uint64_t now, const LinkView& v, double own_temp_c);
  // CMIS module (port_cmis.cpp).
  void build_cmis();
  void refresh_cmis(std::uint64_t now);
  void module_power(bool low_power, std::uint64_t now);
  // CDB and module firmware (port_cdb.cpp).
  void cdb_power_on(std::optional<unsigned> image);
  void cdb_publish_versions();
  void cdb_trigger(std::uint64_t now);
  void cdb_check(std::uint64_t now, std::uint16_t id);
  void cdb_finish(std::uint64_t now, std::uint16_t id);
  void cdb_done(std::uint8_t status, std::span<const std::uint8_t> rpl);
  void cdb_event();
  void module_restart(std::uint64_t now, std::optional<unsigned> image, const char* why);
  [[nodiscard]] std::uint8_t module_state() const;
  void set_module_state(std::uint8_t s);
  // Link state machine (port.cpp).
  std::uint64_t read_locked(std::uint32_t reg);
  void publish();
  void latch_events(std::uint32_t bits);
  void enter(fw::regs::port::LinkState s, std::uint64_t delay_ns);
  void step(std::uint64_t epoch);
  void link_check();
  void leave_up_for_training(std::uint64_t now, const char* why);
  void start_training(std::uint64_t now, bool fresh);
  void train_fail(std::uint8_t code, std::uint8_t lanes, std::uint64_t now);
  void enter_module_wait(std::uint64_t now, bool release_low_power);
  void enter_datapath_init(std::uint64_t now);
  void module_presence(bool present);
  void lane_dark(unsigned lane, std::uint64_t until);
  void lane_ramp(std::optional<unsigned> lane, double to, std::uint64_t dur);
  /// flap_storm: drops the link if Up `delay` from now, then `left - 1` more times `every`
  /// apart (each drop schedules the next).
  void flap_storm(std::uint32_t left, std::uint64_t every, std::uint64_t delay);

  Card& card_;
  EmulatorImpl& sys_;
  std::mutex& mu_;  ///< the card's port mutex, shared by its ports
  std::uint32_t card_index_;
  unsigned index_;

  std::uint32_t ctrl_ = 0;
  fw::regs::port::LinkState state_ = fw::regs::port::LinkState::kDisabled;
  bool cabled_ = false;  ///< a module is plugged (emulated ports with a cable carry one)
  std::uint32_t train_count_ = 0;
  std::uint32_t flap_count_ = 0;
  std::uint32_t train_timeout_ms_ = 500;
  std::uint32_t events_ = 0;
  std::uint64_t neighbor_ = 0;
  std::uint64_t train_start_ns_ = 0;         ///< start of the current Training attempt / FecLock wait / ModuleWait
  unsigned attempts_ = 0;                    ///< training attempts in the current bring-up (budget kTrainAttempts)
  std::uint64_t epoch_ = 0;                  ///< bumps on every state-machine restart; stale timers check it
  std::uint32_t lane_enable_ = 0xff;         ///< PORT.LANE_ENABLE
  std::uint8_t lanes_in_use_ = 0;            ///< physical lanes of the data path / negotiated link
  std::uint32_t train_result_ = 0;           ///< PORT.TRAIN_RESULT
  std::uint32_t up_count_ = 0;               ///< PORT.UP_COUNT
  std::uint32_t coeff_updates_ = 0;          ///< PORT.COEFF_UPDATES
  std::uint32_t prbs_lanes_ = 0xff;          ///< PORT.PRBS_LANES
  std::uint32_t inject_train_timeouts_ = 0;  ///< training_timeout fault: attempts left to fail
  std::uint64_t module_seed_ = 0;            ///< seeds DDM and lane spreads of this port's module
  std::uint64_t module_ready_ns_ = 0;        ///< module reaches ModuleReady at this time (while PwrUp)
  std::uint64_t dp_ready_ns_ = 0;            ///< data path reaches DPActivated at this time (while DPInit)
  std::uint8_t dp_lanes_ = 0;                ///< lanes whose CMIS data path is initialised / activated
  bool dp_activated_ = false;                ///< the firmware saw DPActivated on every lane in use
  bool rx_ready_ = false;                    ///< every lane in use locked in this training attempt
  /// CMIS memory: lower memory and pages 00h, 01h, 02h, 10h, 11h (CmisPage order).
  std::array<std::array<std::uint8_t, 128>, kCmisPages> cmis_{};
  ModuleFirmware fw_;  ///< module firmware, CDB page 9Fh (port_cdb.cpp)
  std::array<LaneModel, fw::regs::kLanesPerPort> lanes_;
  std::atomic<std::uint32_t> pub_{0};              ///< see published()
  std::atomic<std::uint32_t> pub_prbs_lanes_{0};   ///< see published_prbs_lanes()
  std::atomic<std::uint64_t> pub_power_on_ns_{0};  ///< see power_on_ns()
};

/// The optical ports of one card and the mutex they share.
class PortSet {
 public:
  /// `count` ports of `card`, each with its module built and seeded.
  PortSet(Card& card, unsigned count);

  [[nodiscard]] unsigned size() const noexcept { return static_cast<unsigned>(ports_.size()); }
  [[nodiscard]] Port& operator[](unsigned p) noexcept { return *ports_[p]; }
  [[nodiscard]] const Port& operator[](unsigned p) const noexcept { return *ports_[p]; }

  /// An Up port with a valid neighbour: among the ports of `mask` (any port when 0) whose
  /// neighbour is fabric ID `next_fid` (any neighbour when 0); several: chosen by `flow`.
  /// -1: none. Remote-op routing (registers.md §8).
  [[nodiscard]] int up_port_towards(std::uint32_t next_fid, std::uint16_t mask, std::uint32_t flow);
  /// Fabric ID of the neighbour behind port p (0 if none is known).
  [[nodiscard]] std::uint32_t neighbor_of(unsigned p);
  /// Fills the port records of the statistics block (fw/stats.hpp) at `records`, one
  /// kPortRecordBytes apart, under one lock; returns the emulated time the snapshot was taken.
  std::uint64_t fill_stats(std::byte* records);
  /// Applies a link fault to port f.port (ignored when out of range) and, for physical
  /// faults, to the far end of its light path.
  void inject_fault(const Fault& f);
  /// Card reset / surprise removal of every port (Port::reset_locked / remove_locked).
  void reset();
  void remove();

 private:
  Card& card_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Port>> ports_;
};

}  // namespace npo::emu
