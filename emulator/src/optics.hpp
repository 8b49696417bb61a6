// SPDX-License-Identifier: Apache-2.0
// Emulator internals: the physical model of one optical lane (docs/emulator.md "Channel
// model"): receiver SNR from optical power, channel penalty, Tx FIR mismatch and a seeded
// per-lane spread; pre-FEC BER of Gray-coded PAM4 from SNR; RS(544,514) codeword statistics
// drawn lazily for an elapsed interval (docs/spec/registers.md §7.3); module DDM (CMIS
// monitors) as deterministic functions of emulated time.
//
// Pure functions and small value types: no locks, no knowledge of cards or ports. The port
// model (port.hpp) owns one LaneModel per physical lane and calls these under its port lock.
#pragma once

#include <array>
#include <cstdint>

#include "npo/fw/regs.hpp"

namespace npo::emu::optics {

// ---- Constants (docs/emulator.md "Channel model") --------------------------------------
inline constexpr double kBaseSnrDb = 24.0;           ///< receiver SNR at or above the reference power, dB
inline constexpr double kRefRxPowerDbm = -0.85;      ///< Rx power below which SNR starts to fall, dBm
inline constexpr double kSnrDbPerDbLost = 2.0;       ///< SNR lost per dB of Rx power below the reference
inline constexpr double kLaneSpreadDb = 0.5;         ///< seeded per-lane SNR spread, uniform in ±this, dB
inline constexpr double kEqPenaltyDbPerStep = 0.1;   ///< SNR lost per tap step away from the optimum, dB
inline constexpr double kNominalTxPowerDbm = 1.0;    ///< laser output at 25 °C, dBm
inline constexpr double kTxPowerDbPerDegC = -0.015;  ///< Tx power slope with module temperature, dB/°C
inline constexpr double kNominalBiasMa = 6.5;        ///< laser bias at 25 °C, mA
inline constexpr double kBiasMaPerDegC = 0.06;       ///< bias slope with module temperature, mA/°C
inline constexpr double kSymbolRateBaud = 53.125e9;  ///< per-lane PAM4 symbol rate (PORT.SPEED 53125 Mbd)
inline constexpr double kBitsPerCodeword = 5440.0;   ///< RS(544,514) over 10-bit symbols
inline constexpr double kCodewordsPerSecond = kSymbolRateBaud * 2.0 / kBitsPerCodeword;  ///< per lane
inline constexpr double kLineBitsPerSecond = kSymbolRateBaud * 2.0;                      ///< per lane
inline constexpr unsigned kRsSymbols = 544;                                              ///< symbols per codeword
inline constexpr unsigned kRsCorrectable = 15;  ///< symbol errors the decoder corrects
inline constexpr double kFecLockMaxBer = 1e-2;  ///< above this BER alignment markers do not lock
inline constexpr double kCdrLockMaxBer = 0.1;   ///< above this BER (or without light) the CDR does not lock
inline constexpr double kHostSideBer = 1e-12;   ///< electrical card <-> module path (PRBS_SIDE = 1)

/// Gaussian tail probability Q(x) = 0.5·erfc(x/√2).
[[nodiscard]] double q_function(double x) noexcept;

/// Pre-FEC bit error ratio of Gray-coded PAM4 at `snr_db` (electrical SNR, dB):
/// SER = 1.5·Q(√(SNR_lin/5)), BER = SER/2 (one bit per symbol error, Gray coding).
/// 17.6 dB gives ≈2.4e-4 (the KP4 FEC limit); 24 dB ≈5e-13.
[[nodiscard]] double ber_from_snr_db(double snr_db) noexcept;

/// Receiver SNR, dB: kBaseSnrDb + spread − kSnrDbPerDbLost·max(0, kRefRxPowerDbm − rx_dbm)
/// − channel penalty − Tx FIR mismatch penalty.
[[nodiscard]] double snr_db(double rx_power_dbm, double spread_db, double channel_penalty_db,
                            double eq_penalty_db) noexcept;

/// Small, fast, seedable RNG (xoshiro256**, seeded by splitmix64). Deterministic across
/// platforms for the same seed.
class Rng {
 public:
  Rng() noexcept : Rng(1) {}
  explicit Rng(std::uint64_t seed) noexcept;
  std::uint64_t next() noexcept;
  /// Uniform in [0, 1).
  double uniform() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  /// Standard normal (Box–Muller, one value per call).
  double normal() noexcept;
  /// Poisson(mean): exact (multiplication method) for mean < 30, normal approximation with
  /// continuity correction above. mean <= 0 gives 0.
  std::uint64_t poisson(double mean) noexcept;
  /// Binomial(n, q): Poisson for rare events, normal approximation for large variance,
  /// Bernoulli trials otherwise.
  std::uint64_t binomial(std::uint64_t n, double q) noexcept;

 private:
  std::array<std::uint64_t, 4> s_{};
  double spare_ = 0;  ///< second Box–Muller value
  bool has_spare_ = false;
};

/// Mixes several integers into one seed (splitmix64 chain).
[[nodiscard]] std::uint64_t mix_seed(std::uint64_t a, std::uint64_t b, std::uint64_t c = 0,
                                     std::uint64_t d = 0) noexcept;

/// RS(544,514) decoder counters of one lane (registers.md §7.3).
struct FecCounters {
  std::uint64_t codewords = 0;
  std::uint64_t corrected = 0;
  std::uint64_t uncorrectable = 0;
  std::uint64_t symbol_errors = 0;
  std::array<std::uint64_t, fw::regs::kFecBins> bins{};
};

/// Expected fraction of codewords with exactly n symbol errors, n = 0..15, and with 16 or
/// more (index 16), for symbol error probability `p` (Binomial(544, p)).
[[nodiscard]] std::array<double, fw::regs::kFecBins + 1> codeword_error_pmf(double p) noexcept;

/// Symbol error probability of a 10-bit symbol at bit error ratio `ber`: 1 − (1 − BER)^10.
[[nodiscard]] double symbol_error_probability(double ber) noexcept;

/// Adds `n` received codewords at `ber` to `c`: the codewords are split over bins 1..15 and
/// "uncorrectable" (≥ 16 errors) as Multinomial(n, Binom(544, p)) — a chain of conditional
/// binomial draws (mean N·Binom(544,p,k) each; Poisson for rare bins, normal approximation
/// for large ones) — and bin 0 takes the rest, so the three identities of registers.md §7.3
/// hold exactly. Bins whose mean is below 1e-12 are skipped (a healthy lane costs a handful
/// of terms). Counters saturate at 2^64 − 1.
void add_codewords(FecCounters& c, std::uint64_t n, double ber, Rng& rng) noexcept;

/// FIR taps of one transmitter lane (LANE.TX_EQ), in 1/64 of full swing.
struct TxEq {
  int pre = 0;
  int main = 0;
  int post = 0;
  friend bool operator==(const TxEq&, const TxEq&) = default;
  /// LANE.TX_EQ register encoding.
  [[nodiscard]] std::uint32_t encode() const noexcept;
};
/// Training preset (before any coefficient request).
inline constexpr TxEq kTxEqPreset{0, 48, 0};
/// Seeded per-lane optimum: pre −6..−1, main 44..48, post −10..−2 (so |pre| + main + |post| ≤ 64).
[[nodiscard]] TxEq tx_eq_optimum(std::uint64_t seed) noexcept;
/// Coefficient requests to walk `from` to `to`, one step of one tap per request.
[[nodiscard]] unsigned tx_eq_steps(const TxEq& from, const TxEq& to) noexcept;
/// SNR penalty of `taps` against `optimum`, dB.
[[nodiscard]] double tx_eq_penalty_db(const TxEq& taps, const TxEq& optimum) noexcept;

// ---- Module DDM (CMIS monitors) ----------------------------------------------------------
/// Module temperature, °C, at emulated time `t_ns` for a module with seed `seed` powered up at
/// `power_on_ns`: ambient (28..36 °C, seeded) + 14 °C warm-up with a 90 s time constant +
/// a slow seeded wander (two sinusoids, ±1.2 °C, periods of minutes).
[[nodiscard]] double module_temperature_c(std::uint64_t seed, std::uint64_t power_on_ns, std::uint64_t t_ns) noexcept;
/// Module supply voltage, V: 3.300 V ± a few mV of seeded wander.
[[nodiscard]] double module_vcc_v(std::uint64_t seed, std::uint64_t t_ns) noexcept;
/// Laser bias, mA, at module temperature `temp_c` (rises with temperature).
[[nodiscard]] double tx_bias_ma(double temp_c, double lane_offset_ma) noexcept;
/// Laser output power, dBm, at `temp_c` (falls slightly with temperature).
[[nodiscard]] double tx_power_dbm(double temp_c, double lane_offset_db) noexcept;
/// dBm → mW.
[[nodiscard]] double dbm_to_mw(double dbm) noexcept;

}  // namespace npo::emu::optics
