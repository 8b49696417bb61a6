// SPDX-License-Identifier: Apache-2.0
// Emulator internals: the card's power and thermal model and its power-limit controller
// (docs/spec/mailbox.md §3.9, §3.10; docs/emulator.md "Power model").
//
// Card power = idle + per DMA engine that moved data (a fixed share plus bytes/s x energy per
// byte) + per trained lane (SerDes) + each module cage's draw (from the module's CMIS power
// advertising, page 00h bytes 200/201, and its power mode). Energy is the integral of that
// power over the card's clock (the emulator's, virtual or real): between two samples the
// static part is taken as constant and the bytes moved as spread evenly. Instantaneous power
// is the average over the last 10 ms, the "1 s average" over the last second, both read off
// the energy curve. The die temperature follows the 1 s average (kAmbientC + kDegCPerW x W).
//
// Enforcement: every 10 ms while the engines move data (or the card is throttled) the
// controller compares the 1 s average with the limit. Above it, the card throttles: its
// engines spend a byte budget per 10 ms quantum sized so that the DMA power fits under the
// limit (90% of the headroom while the average is still above the limit, 98% once it holds),
// and stop when it is spent (CardState::dma_budget, engine.cpp). It stops throttling when for
// 500 ms the engines never used up a quantum's budget and the average is at or below the
// limit. A reading may exceed the limit by up to one quantum's DMA energy spread over the
// second (the engines spend a fresh budget at once): about 1% of the DMA share.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

namespace npo::emu {

class Card;

/// Constants of the model (documented in docs/emulator.md "Power model"). The emulated
/// engines move data at host memcpy speed, a small fraction of the hardware's, so the energy
/// per byte is scaled up: a busy engine draws a realistic share of the card's power.
namespace power {
inline constexpr std::uint32_t kIdleMw = 60'000;               ///< always-on: clocks, HBM refresh, management
inline constexpr std::uint32_t kEngineActiveMw = 2'500;        ///< a DMA engine that moved data in the interval
inline constexpr std::uint64_t kDmaPjPerByte = 10'000;         ///< 10 nJ per byte moved: 1 GB/s = 10 W
inline constexpr std::uint32_t kSerdesMwPerLane = 150;         ///< a trained lane (link FecLock or Up)
inline constexpr std::uint32_t kModuleLowPowerMw = 1'500;      ///< CMIS ModuleLowPwr: at most 1.5 W
inline constexpr std::uint32_t kDefaultLimitMw = 700'000;      ///< default enforced limit
inline constexpr std::uint32_t kMinLimitMw = 75'000;           ///< lowest settable limit
inline constexpr std::uint32_t kMaxLimitMw = 750'000;          ///< highest settable limit
inline constexpr std::uint64_t kTickNs = 10'000'000;           ///< controller period and "instantaneous" window
inline constexpr std::uint64_t kAvgWindowNs = 1'000'000'000;   ///< the moving average's window
inline constexpr std::uint64_t kReleaseQuietNs = 500'000'000;  ///< no budget stall this long: release
inline constexpr std::int64_t kMinBudgetBytes = 64 << 10;      ///< per 10 ms: the engines' lowest clock
inline constexpr double kAmbientC = 30.0;                      ///< die temperature at 0 W
inline constexpr double kDegCPerW = 0.06;                      ///< die temperature rise per W (1 s average)
/// A module's draw, mW: in ModuleLowPwr min(1.5 W, max power); powered up, half its max power
/// plus the other half in proportion to the lanes whose data path is up (of 8).
[[nodiscard]] std::uint32_t module_draw_mw(bool low_power, unsigned max_power_q, unsigned dp_lanes) noexcept;
}  // namespace power

/// One card's power model and controller. Thread-safety: every member may be called from
/// any thread (one mutex; dma_activity() is lock-free).
class PowerModel {
 public:
  explicit PowerModel(Card& card);
  PowerModel(const PowerModel&) = delete;
  PowerModel& operator=(const PowerModel&) = delete;

  /// The card's power state now (POWER_READ, mailbox.md §3.9).
  struct Reading {
    std::uint64_t now_ns = 0;
    std::uint32_t power_mw = 0;      ///< average over the last 10 ms
    std::uint32_t power_avg_mw = 0;  ///< average over the last 1 s
    std::uint64_t energy_mj = 0;     ///< since the card was created; never wraps, never goes back
    std::uint32_t limit_mw = 0, default_limit_mw = 0, min_limit_mw = 0, max_limit_mw = 0;
    std::uint32_t throttle = 0;  ///< fw::mbox::power::kThrottle* bits
    std::uint64_t throttled_ns = 0;
    std::int16_t temp_q8 = 0;  ///< die temperature, 1/256 °C
    unsigned engines_active = 0;
    std::uint32_t idle_mw = 0, dma_mw = 0, serdes_mw = 0, modules_mw = 0;  ///< shares of the last sample
  };
  /// Brings the model up to now and reads it.
  [[nodiscard]] Reading read();
  /// Per-port cage rail draw (mW) and the module facts behind it, as of the last sample.
  struct PortPower {
    bool present = false, low_power = false;
    std::uint8_t power_class = 0;  ///< 1..8; 0 without module
    std::uint8_t max_power_q = 0;  ///< 0.25 W units
    std::uint32_t draw_mw = 0;
    std::int16_t temp_q8 = 0;
    std::uint8_t trained_lanes = 0;
  };
  [[nodiscard]] std::vector<PortPower> ports();
  /// Sets the enforced limit; false (nothing changed) when outside [kMinLimitMw, kMaxLimitMw].
  bool set_limit(std::uint32_t mw);
  /// Back to kDefaultLimitMw.
  void reset_limit();
  [[nodiscard]] std::uint32_t limit_mw();
  /// The engines moved data: starts the 10 ms sampling if it is not running.
  void dma_activity() noexcept;

 private:
  struct Sample {
    std::uint64_t t;
    long double e_pj;  ///< energy at t, pJ (exactly representable far beyond a card's life)
  };
  /// Reads every port's PowerView into ports_ and the static shares (idle, SerDes, modules).
  void sample_ports_locked();
  /// Integrates from the last sample to `now` (nothing when `now` is not later).
  void update_locked(std::uint64_t now);
  [[nodiscard]] long double energy_at_locked(std::uint64_t t) const;
  [[nodiscard]] std::uint32_t window_mw_locked(std::uint64_t now, std::uint64_t window) const;
  void tick(std::uint64_t now);
  void arm();

  Card& card_;
  std::mutex mu_;
  std::atomic<bool> armed_{false};  ///< a tick is scheduled
  std::uint64_t last_t_ = 0;
  std::uint64_t last_bytes_ = 0;
  std::vector<std::uint64_t> engine_bytes_;  ///< per engine, the sum of its queues' BYTES at last_t_
  // Integrated energy: whole microjoules plus the picojoule remainder (exact, monotonic).
  std::uint64_t energy_uj_ = 0;
  std::uint64_t energy_rem_pj_ = 0;
  std::deque<Sample> samples_;  ///< energy curve over the last second (and one sample before it)
  std::vector<PortPower> ports_;
  std::uint32_t static_mw_ = power::kIdleMw;  ///< idle + SerDes + modules at the last sample
  std::uint32_t serdes_mw_ = 0, modules_mw_ = 0, dma_mw_ = 0;
  unsigned engines_active_ = 0;
  std::uint32_t limit_mw_ = power::kDefaultLimitMw;
  bool throttled_ = false;
  std::uint64_t throttled_ns_ = 0;
  std::uint64_t last_tick_ = 0;
  std::uint64_t last_hit_ = 0;  ///< last tick that saw an engine stop on its budget
};

}  // namespace npo::emu
