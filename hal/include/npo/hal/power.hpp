// SPDX-License-Identifier: Apache-2.0
// npo-hal public API: card power, energy, power limit and temperatures, and the module cages'
// power (Device::power, Device::module_power, Device::set_power_limit; docs/spec/mailbox.md
// §3.9 POWER_READ, §3.10 POWER_LIMIT). The shapes follow NVML's: instantaneous power and a
// 1 s average in mW, total energy in mJ, an enforced limit with default/min/max.
#pragma once

#include <cstdint>
#include <optional>

namespace npo {

/// Why the card holds its DMA engines back (PowerReading::throttle_reasons bits).
namespace throttle {
/// The 1 s average power exceeded the enforced limit: the engines run on a byte budget.
inline constexpr std::uint32_t kPowerLimit = 1u << 0;
}  // namespace throttle

/// One reading of a card's power state (mailbox POWER_READ, mailbox.md §3.9).
struct PowerReading {
  std::uint64_t timestamp_ns = 0;      ///< when the card took it (GLOBAL.TIMESTAMP clock)
  std::uint32_t power_mw = 0;          ///< card power now: the average over the last 10 ms, mW
  std::uint32_t power_avg_mw = 0;      ///< card power averaged over the last 1 s, mW (what the limit bounds)
  std::uint64_t energy_mj = 0;         ///< energy since the card powered on, mJ: monotonic, never wraps
  std::uint32_t limit_mw = 0;          ///< power limit the card enforces now, mW
  std::uint32_t default_limit_mw = 0;  ///< limit after reset_power_limit(), mW
  std::uint32_t min_limit_mw = 0;      ///< lowest limit set_power_limit() accepts, mW
  std::uint32_t max_limit_mw = 0;      ///< highest limit set_power_limit() accepts, mW
  std::uint32_t throttle_reasons = 0;  ///< throttle::* bits; 0: not throttled
  std::uint64_t throttled_ns = 0;      ///< time spent throttled since the card powered on, ns
  double temp_c = 0;                   ///< die temperature, °C (1/256 °C resolution)
  unsigned engines_active = 0;         ///< DMA engines that moved data in the last sample
  std::uint32_t idle_mw = 0;           ///< share of the last sample: always-on power, mW
  std::uint32_t dma_mw = 0;            ///< share: DMA engines, mW
  std::uint32_t serdes_mw = 0;         ///< share: SerDes of trained lanes, mW
  std::uint32_t modules_mw = 0;        ///< share: module cages (the sum of ModulePower::draw_mw), mW
  /// True when the card throttles (throttle_reasons != 0).
  [[nodiscard]] bool throttled() const noexcept { return throttle_reasons != 0; }
};

/// Power of the module cage of one port, as the card measures its rail, with the module's
/// CMIS power advertising (CMIS 5.2 page 00h byte 200 bits 7:5, byte 201).
struct ModulePower {
  unsigned port = 0;
  bool present = false;          ///< a module is plugged; the fields below are 0 otherwise
  bool low_power = false;        ///< the module is in ModuleLowPwr (draws at most 1.5 W)
  unsigned power_class = 0;      ///< CMIS power class 1..8
  double max_power_w = 0;        ///< the module's advertised maximum, W (0.25 W steps)
  std::uint32_t draw_mw = 0;     ///< cage rail draw now, mW
  std::optional<double> temp_c;  ///< module temperature (the DDM value), °C; empty without module
  unsigned trained_lanes = 0;    ///< lanes of the port's link in FecLock or Up (SerDes powered)
};

}  // namespace npo
