// SPDX-License-Identifier: Apache-2.0
// Emulator internals: one NPO reference card -- PCI config space, BAR0 register file with
// the side effects docs/spec/registers.md defines, BAR2 HBM aperture, BAR4 MSI-X table,
// DMA queues, window translation table, optical ports and the firmware mailbox.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "iommu.hpp"
#include "npo/emu/emulator.hpp"
#include "npo/fw/dma.hpp"
#include "npo/fw/mailbox.hpp"
#include "npo/fw/pci.hpp"
#include "npo/fw/prbs.hpp"
#include "npo/fw/regs.hpp"
#include "optics.hpp"
#include "sched.hpp"

namespace npo::emu {

class EmulatorImpl;
class Card;

/// One DMA queue (submission + completion ring) of one engine.
class QueueModel final : public Runnable {
 public:
  QueueModel(Card& card, unsigned index) : card_(card), index_(index) {}
  bool run_once() override;
  [[nodiscard]] bool has_work() const noexcept override;

  // Register access (BAR0 queue block).
  std::uint64_t read(std::uint32_t reg, unsigned width);
  void write(std::uint32_t reg, unsigned width, std::uint64_t value);
  /// Returns the queue to its reset state (card reset). Waits for a running batch.
  void reset_state();
  /// Fault injection.
  void inject_hang(std::uint64_t now);
  void inject_completion_errors(std::uint32_t count) { inject_errors_.fetch_add(count); }
  [[nodiscard]] bool hung() const noexcept { return hung_.load(); }
  [[nodiscard]] bool pending() const noexcept;
  [[nodiscard]] std::uint64_t hung_since() const noexcept { return hung_since_.load(); }
  [[nodiscard]] std::uint32_t sq_head() const noexcept { return sq_head_.load(); }

 private:
  void queue_reset_locked();
  /// Executes one descriptor; returns status and info.
  fw::dma::Status execute(const fw::dma::Descriptor& d, std::uint64_t* info);
  /// Checks that [iova, iova+len) is mapped for the access; records the first fault.
  fw::dma::Status check_range(std::uint64_t iova, std::uint64_t len, bool write, std::uint64_t* info);
  /// Copies between host memory at `iova` and `local` through the IOMMU. `ring`: a
  /// descriptor fetch (injected IOMMU faults apply to data accesses only).
  fw::dma::Status host_access(std::uint64_t iova, std::uint64_t len, bool write, bool ring, std::byte* local,
                              std::uint64_t* info);

  Card& card_;
  unsigned index_;
  std::mutex mu_;  // config and processing
  std::uint64_t sq_base_ = 0;
  std::uint64_t cq_base_ = 0;
  std::atomic<std::uint32_t> config_snapshot_{0};
  std::atomic<std::uint32_t> status_{fw::regs::queue::kStatusIdle.mask()};
  std::atomic<std::uint32_t> sq_tail_{0};
  std::atomic<std::uint32_t> sq_head_{0};
  std::atomic<std::uint32_t> cq_head_{0};
  std::atomic<std::uint32_t> cq_tail_{0};
  std::atomic<std::uint32_t> err_{0};
  std::atomic<std::uint64_t> completed_{0};
  std::atomic<bool> enabled_{false};
  std::atomic<bool> hung_{false};
  std::atomic<std::uint64_t> hung_since_{0};
  std::atomic<std::uint32_t> inject_errors_{0};
  bool failed_since_fence_ = false;  ///< the failure latch of registers.md §5.7 (guarded by mu_)
};

/// One window translation table entry.
struct WindowEntry {
  std::atomic<std::uint64_t> hbm_offset{0};
  std::atomic<std::uint64_t> size{0};
  std::atomic<std::uint64_t> key{0};
  std::atomic<std::uint32_t> ctrl{0};
  std::atomic<std::uint32_t> status{0};
  std::atomic<std::uint32_t> inflight{0};
};

/// PRBS generator/checker state of one lane (registers.md §7.4), allocated while PRBS runs.
struct PrbsLaneState {
  fw::prbs::PrbsGenerator gen{fw::prbs::Pattern::kPrbs31};  ///< the far transmitter's stream (sampled)
  fw::prbs::PrbsChecker chk{fw::prbs::Pattern::kPrbs31};    ///< the local checker
  std::uint8_t gen_pattern = 0xff;                          ///< pattern `gen` was built for
  std::uint8_t chk_pattern = 0xff;                          ///< pattern `chk` was built for
};

/// One physical lane of a port: receive-side channel state, counters and training result
/// (docs/emulator.md "Channel model"). Guarded by the card's port mutex.
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

/// One optical port: module (CMIS state machines), link state machine, lanes.
struct PortModel {
  std::uint32_t ctrl = 0;
  fw::regs::port::LinkState state = fw::regs::port::LinkState::kDisabled;
  bool cabled = false;  ///< a module is plugged (emulated ports with a cable carry one)
  std::uint32_t peer_card = 0;
  unsigned peer_port = 0;
  std::uint32_t train_count = 0;
  std::uint32_t flap_count = 0;
  std::uint32_t train_timeout_ms = 500;
  std::uint32_t events = 0;
  std::uint64_t neighbor = 0;
  std::uint64_t train_start_ns = 0;         ///< start of the current Training attempt / FecLock wait / ModuleWait
  unsigned attempts = 0;                    ///< training attempts in the current bring-up (budget kTrainAttempts)
  std::uint64_t epoch = 0;                  ///< bumps on every state-machine restart; stale timers check it
  std::uint32_t lane_enable = 0xff;         ///< PORT.LANE_ENABLE
  std::uint8_t lanes_in_use = 0;            ///< physical lanes of the data path / negotiated link
  std::uint32_t train_result = 0;           ///< PORT.TRAIN_RESULT
  std::uint32_t up_count = 0;               ///< PORT.UP_COUNT
  std::uint32_t coeff_updates = 0;          ///< PORT.COEFF_UPDATES
  std::uint32_t prbs_lanes = 0xff;          ///< PORT.PRBS_LANES
  std::uint32_t inject_train_timeouts = 0;  ///< training_timeout fault: attempts left to fail
  std::uint64_t module_seed = 0;            ///< seeds DDM and lane spreads of this port's module
  std::uint64_t module_ready_ns = 0;        ///< module reaches ModuleReady at this time (while PwrUp)
  std::uint64_t dp_ready_ns = 0;            ///< data path reaches DPActivated at this time (while DPInit)
  std::uint8_t dp_lanes = 0;                ///< lanes whose CMIS data path is initialised / activated
  bool dp_activated = false;                ///< the firmware saw DPActivated on every lane in use
  bool rx_ready = false;                    ///< every lane in use locked in this training attempt
  /// CMIS memory: lower memory and pages 00h, 01h, 02h, 10h, 11h (CmisPage order).
  std::array<std::array<std::uint8_t, 128>, kCmisPages> cmis{};
  std::array<LaneModel, fw::regs::kLanesPerPort> lanes;
  /// Published for lock-free reads by the far end: STATE (bits 3:0), RX_READY (bit 4),
  /// transmitting lanes (15:8), LANE_ENABLE (23:16), PRBS generator on (24), pattern (28:25).
  std::atomic<std::uint32_t> pub{0};
  std::atomic<std::uint32_t> pub_prbs_lanes{0};   ///< lanes transmitting the PRBS pattern
  std::atomic<std::uint64_t> pub_power_on_ns{0};  ///< module power-on time (DDM warm-up)
};

/// Firmware model: the mailbox command processor.
class Firmware final : public Runnable {
 public:
  explicit Firmware(Card& card) : card_(card) {}
  bool run_once() override;
  [[nodiscard]] bool has_work() const noexcept override { return pending_.load(); }
  void reset_state();
  void inject_timeout(std::uint32_t n) { drop_.fetch_add(n); }
  void inject_corrupt(std::uint32_t n) { corrupt_.fetch_add(n); }
  std::atomic<bool> pending_{false};
  struct LogEntry {
    std::uint64_t ts;
    std::uint16_t code;
    std::uint8_t severity;
    std::uint8_t source;
    std::uint32_t arg0;
    std::uint64_t arg1;
    std::uint64_t arg2;
  };
  void log_error(LogEntry e);

 private:
  /// Handles one request; fills `rsp` payload and returns the status.
  fw::mbox::Status handle(fw::mbox::Command cmd, std::span<const std::byte> req, std::vector<std::byte>& rsp);
  Card& card_;
  std::atomic<std::uint32_t> drop_{0};
  std::atomic<std::uint32_t> corrupt_{0};
  std::atomic<std::uint32_t> heartbeats_{0};
  std::mutex log_mu_;
  std::deque<LogEntry> log_;
};

/// Remote-op routing (registers.md §8): walks from `src` towards fabric ID `dst_fid` over Up
/// links, following each card's route table (ECMP member chosen by a flow hash of source,
/// destination and `queue`), or a direct link where a card has no entry. False when no Up
/// path exists within kMaxHops (a missing entry, a down link, or a routing loop).
bool route_reachable(Card& src, std::uint32_t dst_fid, unsigned queue);

/// The card.
class Card {
 public:
  Card(EmulatorImpl& sys, std::uint32_t index, const CardConfig& cfg, std::uint64_t serial, std::byte* hbm,
       std::uint64_t hbm_memfd_offset);
  ~Card();

  [[nodiscard]] std::uint32_t index() const noexcept { return index_; }
  [[nodiscard]] std::uint32_t fabric_id() const noexcept { return index_ + 1; }
  [[nodiscard]] const CardConfig& config() const noexcept { return cfg_; }
  [[nodiscard]] backend::FunctionInfo function_info() const;
  [[nodiscard]] EmulatorImpl& system() noexcept { return sys_; }

  // ---- PCI configuration space -----------------------------------------------------------
  /// Reads 1, 2 or 4 bytes (naturally aligned) of config space. Removed: all-ones.
  std::uint32_t cfg_read(std::uint32_t off, unsigned size);
  void cfg_write(std::uint32_t off, unsigned size, std::uint32_t value);

  // ---- BARs -----------------------------------------------------------------------------
  [[nodiscard]] std::uint64_t bar_size(unsigned bar) const noexcept;
  std::uint64_t bar0_read(std::uint64_t off, unsigned width);
  void bar0_write(std::uint64_t off, unsigned width, std::uint64_t value);
  std::uint64_t bar4_read(std::uint64_t off, unsigned width);
  void bar4_write(std::uint64_t off, unsigned width, std::uint64_t value);
  [[nodiscard]] std::span<std::byte> hbm() noexcept { return {hbm_, cfg_.hbm_bytes}; }
  [[nodiscard]] std::uint64_t hbm_memfd_offset() const noexcept { return hbm_memfd_offset_; }

  // ---- Platform hooks ------------------------------------------------------------------
  [[nodiscard]] Iommu& iommu() noexcept { return iommu_; }
  void set_msix_eventfd(unsigned vector, int fd);
  /// Raises an MSI-X vector: signals its eventfd unless masked (then sets the PBA bit).
  void raise_msix(unsigned vector);
  /// Device reset: every BAR0 register, queue, engine, window and port to reset state.
  /// `rebuild_config` also returns config space to power-on values (a raw FLR); VFIO-style
  /// resets keep it (the kernel saves and restores config space around the FLR).
  void reset(const char* why, bool rebuild_config);
  void remove();
  [[nodiscard]] bool removed() const noexcept { return removed_.load(std::memory_order_acquire); }
  [[nodiscard]] bool bus_master() const noexcept;

  // ---- Used by queues, firmware, fabric -----------------------------------------------
  /// Records an IOMMU fault (FAULT_IOVA/FAULT_INFO/ERR_STATUS) and raises vector 0.
  void record_iommu_fault(std::uint64_t iova, unsigned queue, bool write, bool perm);
  void set_error(std::uint32_t bits);
  /// Consumes one injected IOMMU fault if any is pending.
  bool take_injected_iommu_fault();
  void inject_iommu_faults(std::uint32_t n) { inject_iommu_.fetch_add(n); }
  [[nodiscard]] QueueModel& queue(unsigned q) { return *queues_[q]; }
  [[nodiscard]] Firmware& firmware() { return firmware_; }
  [[nodiscard]] WindowEntry& window(unsigned w) { return windows_[w]; }
  /// Route table entry for destination fabric ID `fid` (registers.md §8); 0 when out of range.
  [[nodiscard]] std::uint32_t route(std::uint32_t fid) const noexcept {
    return fid < fw::regs::kRouteEntries ? routes_[fid].load(std::memory_order_acquire) : 0;
  }
  [[nodiscard]] std::mutex& port_mutex() { return port_mu_; }
  [[nodiscard]] PortModel& port(unsigned p) { return ports_[p]; }
  /// Port p's STATUS register value (registers.md §7.1). Caller holds port_mutex().
  [[nodiscard]] std::uint32_t port_status_locked(unsigned p);
  /// Link-control entry point (register CTRL writes and mailbox LINK_CONTROL). Holds port_mutex.
  void port_set_ctrl(unsigned p, std::uint32_t ctrl);
  /// Fires the next step of port p's training state machine if `epoch` is still current.
  void port_step(unsigned p, std::uint64_t epoch);
  void attach_cable(unsigned port, std::uint32_t peer_card, unsigned peer_port);
  /// The light path of `port` changed (an optical switch was reconfigured): a port that is Up
  /// re-checks its link at once and, if the far end is no longer the neighbour it trained
  /// with (or there is no light), leaves Up for Training like any link loss (registers.md §7.2).
  void light_path_changed(unsigned port);
  /// Applies a link fault (FaultKind kBerRamp .. kTrainingTimeout) to f.port (and f.lane);
  /// physical faults (ber_ramp, lane_loss) reach the receive side of both ends of the link.
  void inject_link_fault(const Fault& f);
  /// XCVR_READ / XCVR_WRITE of port `port` (mailbox.md §3.5): reads refresh the monitors and
  /// clear latched flags; writes drive the module and data path state machines (CMIS 5.2).
  /// `in` holds `len` bytes for a write; a read appends `len` bytes to `out`.
  fw::mbox::Status xcvr_access(unsigned port, unsigned bank, unsigned page, unsigned off, unsigned len, bool write,
                               const std::byte* in, std::vector<std::byte>& out);
  /// Per-port TELEMETRY values (mailbox.md §3.7).
  struct PortTelemetry {
    std::int16_t mod_temp_q8 = 0;  ///< module temperature, 1/256 °C; 0 without module
    std::uint16_t mod_vcc = 0;     ///< module Vcc, 100 µV; 0 without module
    std::uint32_t max_ber = 0;     ///< worst lane pre-FEC BER as round(-log10 × 1000); 0 none
  };
  [[nodiscard]] PortTelemetry port_telemetry(unsigned p);
  /// Far end view of this port used by the peer's model: published state word (PortModel::pub).
  [[nodiscard]] std::uint32_t port_pub(unsigned p) const noexcept { return ports_[p].pub.load(); }
  void log_event(const std::string& text);

  // Mailbox transport state (guarded by mbox_mu_).
  std::mutex mbox_mu_;
  std::array<std::byte, fw::regs::mbox::kBufSize> mbox_req_{};
  std::array<std::byte, fw::regs::mbox::kBufSize> mbox_rsp_{};
  std::uint32_t mbox_req_len_ = 0;
  std::uint32_t mbox_rsp_len_ = 0;
  std::atomic<std::uint32_t> mbox_status_{0};

 private:
  void build_config_space();
  void build_cmis(unsigned port);
  struct LinkView;
  /// What port p's receivers see now: peer, channel, far transmitter (lock-free peer reads).
  LinkView link_view(unsigned p, std::uint64_t now);
  /// Channel BER of lane l of port p at `now` (cached; ramps and dark lanes applied).
  double lane_ber(unsigned p, unsigned l, std::uint64_t now, const LinkView& v);
  /// Whether lane l of port p receives light from the far transmitter at `now`.
  bool lane_signal(unsigned p, unsigned l, std::uint64_t now, const LinkView& v) const;
  /// Integrates lane counters (FEC, PRBS) of port p up to `now`. Caller holds port_mu_.
  void sync_lanes(unsigned p, std::uint64_t now, const LinkView* known = nullptr);
  void sync_prbs(unsigned p, unsigned l, std::uint64_t from, std::uint64_t to, const LinkView& v);
  std::uint64_t lane_read(unsigned p, unsigned l, std::uint32_t reg);
  std::uint32_t lane_reg_value(unsigned p, unsigned l, std::uint32_t reg, std::uint64_t now, const LinkView& v,
                               double own_temp_c);
  std::uint32_t port_status_view(unsigned p, std::uint64_t now, const LinkView& v);
  std::uint64_t port_read_locked(unsigned p, std::uint32_t reg);
  void latch_port_events(unsigned p, std::uint32_t bits);
  void start_training(unsigned p, std::uint64_t now, bool fresh);
  void enter_module_wait(unsigned p, std::uint64_t now, bool release_low_power);
  void enter_datapath_init(unsigned p, std::uint64_t now);
  std::uint32_t lane_status_locked(unsigned p, unsigned l, std::uint64_t now, const LinkView& v);
  void fill_port_record(unsigned p, void* record);
  void stats_dma(std::uint32_t seq);
  /// Refreshes the CMIS monitor bytes and state nibbles of port p. Caller holds port_mu_.
  void refresh_cmis(unsigned p, std::uint64_t now);
  void publish(unsigned p);
  void module_power(unsigned p, bool low_power, std::uint64_t now);
  void set_dp_states(unsigned p, std::uint64_t now);
  void schedule_link_check(unsigned p, std::uint64_t delay_ns);
  void link_check(unsigned p);
  void train_fail(unsigned p, std::uint8_t code, std::uint8_t lanes, std::uint64_t now);
  void leave_up_for_training(unsigned p, std::uint64_t now, const char* why);
  void module_presence(unsigned p, bool present);
  void lane_dark(unsigned p, unsigned lane, std::uint64_t until);
  void lane_ramp(unsigned p, std::optional<unsigned> lane, double to, std::uint64_t dur);
  std::uint64_t global_read(std::uint32_t off, unsigned width);
  void global_write(std::uint32_t off, unsigned width, std::uint64_t value);
  std::uint64_t mbox_read(std::uint32_t off, unsigned width);
  void mbox_write(std::uint32_t off, unsigned width, std::uint64_t value);
  std::uint64_t window_read(unsigned w, std::uint32_t reg, unsigned width);
  void window_write(unsigned w, std::uint32_t reg, unsigned width, std::uint64_t value);
  std::uint64_t port_read(unsigned p, std::uint32_t reg, unsigned width);
  void port_write(unsigned p, std::uint32_t reg, unsigned width, std::uint64_t value);
  void port_enter(unsigned p, fw::regs::port::LinkState s, std::uint64_t delay_ns);

  EmulatorImpl& sys_;
  std::uint32_t index_;
  CardConfig cfg_;
  std::uint64_t serial_;
  std::byte* hbm_;
  std::uint64_t hbm_memfd_offset_;
  std::atomic<bool> removed_{false};

  std::mutex cfg_mu_;
  std::array<std::uint8_t, fw::pci::cfg::kConfigSize> space_{};
  std::array<std::uint8_t, fw::pci::cfg::kConfigSize> space_wmask_{};  // writable bits
  std::array<std::uint64_t, 6> bar_addr_{};  // programmed BAR addresses (sizing writes masked)
  std::atomic<std::uint64_t> bar2_size_{0};
  std::atomic<bool> bus_master_{false};  ///< mirror of COMMAND.BME for the engines (lock-free read)

  // Global registers.
  std::atomic<std::uint32_t> err_status_{0};
  std::atomic<std::uint32_t> err_mask_{0};
  std::atomic<std::uint32_t> scratch_{0};
  std::atomic<std::uint64_t> scratch64_{0};
  std::atomic<std::uint64_t> stats_addr_{0};  ///< GLOBAL.STATS_ADDR
  std::atomic<std::uint32_t> stats_seq_{0};   ///< GLOBAL.STATS_SEQ
  std::atomic<std::uint32_t> stats_ctrl_{0};  ///< GLOBAL.STATS_CTRL (last value written)
  std::mutex stats_mu_;                       ///< one stats DMA at a time
  std::atomic<std::uint32_t> fault_count_{0};
  std::atomic<std::uint32_t> inject_iommu_{0};
  std::mutex fault_mu_;
  std::deque<std::pair<std::uint64_t, std::uint32_t>> faults_;  // (iova, info), oldest first; max 16

  Iommu iommu_;
  std::vector<std::unique_ptr<QueueModel>> queues_;
  std::unique_ptr<WindowEntry[]> windows_;
  std::unique_ptr<std::atomic<std::uint32_t>[]> routes_;  ///< route table (registers.md §8)
  std::mutex port_mu_;
  std::vector<PortModel> ports_;
  Firmware firmware_;

  // MSI-X (BAR4) and eventfds.
  std::mutex msix_mu_;
  std::array<std::array<std::uint32_t, 4>, fw::pci::kMsixVectors> msix_table_{};
  std::array<std::atomic<int>, fw::pci::kMsixVectors> msix_fd_{};
  std::array<std::atomic<bool>, fw::pci::kMsixVectors> msix_pending_{};
};

}  // namespace npo::emu
