// SPDX-License-Identifier: Apache-2.0
// The lane channel model: SNR, PAM4 BER, RS(544,514) codeword statistics, Tx FIR training
// and module DDM (docs/emulator.md "Channel model").
#include "optics.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numbers>

namespace npo::emu::optics {

double q_function(double x) noexcept { return 0.5 * std::erfc(x / std::numbers::sqrt2); }

double ber_from_snr_db(double snr_db) noexcept {
  const double snr_lin = std::pow(10.0, snr_db / 10.0);
  const double ser = 1.5 * q_function(std::sqrt(snr_lin / 5.0));
  return std::min(0.5, ser / 2.0);
}

double snr_db(double rx_power_dbm, double spread_db, double channel_penalty_db, double eq_penalty_db) noexcept {
  const double lost = std::max(0.0, kRefRxPowerDbm - rx_power_dbm);
  return kBaseSnrDb + spread_db - kSnrDbPerDbLost * lost - std::max(0.0, channel_penalty_db) - eq_penalty_db;
}

// ---- RNG -----------------------------------------------------------------------------------

namespace {
constexpr std::uint64_t splitmix(std::uint64_t& x) noexcept {
  std::uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
constexpr std::uint64_t rotl(std::uint64_t x, int k) noexcept { return (x << k) | (x >> (64 - k)); }
}  // namespace

Rng::Rng(std::uint64_t seed) noexcept {
  std::uint64_t x = seed;
  for (auto& w : s_) w = splitmix(x);
}

std::uint64_t Rng::next() noexcept {
  const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const std::uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::normal() noexcept {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  double u1 = uniform();
  if (u1 <= 0.0) u1 = 0x1.0p-53;
  const double u2 = uniform();
  const double r = std::sqrt(-2.0 * std::log(u1));
  spare_ = r * std::sin(2.0 * std::numbers::pi * u2);
  has_spare_ = true;
  return r * std::cos(2.0 * std::numbers::pi * u2);
}

std::uint64_t Rng::poisson(double mean) noexcept {
  if (!(mean > 0.0)) return 0;
  if (mean < 1e-4) return uniform() < mean ? 1 : 0;  // P(X >= 2) ~ mean^2/2 < 5e-9: negligible
  if (mean < 30.0) {
    const double limit = std::exp(-mean);
    std::uint64_t k = 0;
    double prod = uniform();
    while (prod > limit) {
      ++k;
      prod *= uniform();
    }
    return k;
  }
  const double x = std::floor(mean + std::sqrt(mean) * normal() + 0.5);
  return x <= 0.0 ? 0 : static_cast<std::uint64_t>(std::min(x, 1.8e19));
}

std::uint64_t mix_seed(std::uint64_t a, std::uint64_t b, std::uint64_t c, std::uint64_t d) noexcept {
  std::uint64_t x = a;
  std::uint64_t h = splitmix(x);
  for (std::uint64_t v : {b, c, d}) {
    x = h ^ v;
    h = splitmix(x);
  }
  return h;
}

// ---- RS(544,514) statistics ---------------------------------------------------------------

std::uint64_t Rng::binomial(std::uint64_t n, double q) noexcept {
  if (n == 0 || !(q > 0.0)) return 0;
  if (q >= 1.0) return n;
  const double nn = static_cast<double>(n);
  const double mean = nn * q;
  if (q < 0.05 && mean < 30.0) return std::min(poisson(mean), n);
  const double var = mean * (1.0 - q);
  if (var > 9.0) {
    const double x = std::floor(mean + std::sqrt(var) * normal() + 0.5);
    return x <= 0.0 ? 0 : std::min(n, static_cast<std::uint64_t>(x));
  }
  // Small n (mean < 30 with q >= 0.05, or tiny variance): count Bernoulli trials.
  std::uint64_t k = 0;
  for (std::uint64_t i = 0; i < n && i < 100000; ++i) k += uniform() < q ? 1 : 0;
  return k;
}

double symbol_error_probability(double ber) noexcept {
  if (!(ber > 0.0)) return 0.0;
  if (ber >= 1.0) return 1.0;
  if (ber < 1e-6) return 10.0 * ber - 45.0 * ber * ber;  // 1-(1-b)^10 to O(b^3)
  return -std::expm1(10.0 * std::log1p(-ber));
}

std::array<double, fw::regs::kFecBins + 1> codeword_error_pmf(double p) noexcept {
  std::array<double, fw::regs::kFecBins + 1> out{};
  if (!(p > 0.0)) {
    out[0] = 1.0;
    return out;
  }
  if (p >= 1.0) {
    out[fw::regs::kFecBins] = 1.0;
    return out;
  }
  const double r = p / (1.0 - p);
  const double lq = p < 1e-5 ? -p - 0.5 * p * p - p * p * p / 3.0 : std::log1p(-p);
  double term = std::exp(static_cast<double>(kRsSymbols) * lq);
  double sum = 0.0;
  for (unsigned k = 0; k < fw::regs::kFecBins; ++k) {
    out[k] = term;
    sum += term;
    term *= static_cast<double>(kRsSymbols - k) / static_cast<double>(k + 1) * r;
  }
  // Tail P(n >= 16): 1 - sum loses everything when the tail is tiny, so sum the series
  // from n = 16 while it matters; fall back to the complement when the series is long.
  if (sum < 1.0 - 1e-6) {
    out[fw::regs::kFecBins] = std::max(0.0, 1.0 - sum);
  } else {
    double tail = 0.0;
    for (unsigned k = fw::regs::kFecBins; k <= kRsSymbols && term > 0.0; ++k) {
      tail += term;
      if (term < tail * 1e-17) break;
      term *= static_cast<double>(kRsSymbols - k) / static_cast<double>(k + 1) * r;
    }
    out[fw::regs::kFecBins] = tail;
  }
  return out;
}

namespace {
constexpr std::uint64_t sat_add(std::uint64_t a, std::uint64_t b) noexcept {
  return a > ~std::uint64_t{0} - b ? ~std::uint64_t{0} : a + b;
}
}  // namespace

namespace {
/// (544 - k) / (k + 1): the ratio of consecutive binomial coefficients C(544, k+1) / C(544, k).
constexpr std::array<double, fw::regs::kFecBins + 1> kBinomRatio = [] {
  std::array<double, fw::regs::kFecBins + 1> a{};
  for (unsigned k = 0; k <= fw::regs::kFecBins; ++k)
    a[k] = static_cast<double>(kRsSymbols - k) / static_cast<double>(k + 1);
  return a;
}();
}  // namespace

void add_codewords(FecCounters& c, std::uint64_t n, double ber, Rng& rng) noexcept {
  if (n == 0) return;
  const double p = symbol_error_probability(ber);
  std::uint64_t left = n;
  std::uint64_t corrected = 0;
  std::uint64_t symbols = 0;
  if (p > 0.0 && p < 1e-3) {
    // Healthy and moderately degraded lanes: the pmf terms fall geometrically from k = 1 on,
    // so they are generated on the fly and the walk stops at the first negligible one (the
    // tail P(n >= 16) is then negligible too). Multinomial(n, pmf) as a chain of conditional
    // binomials: bin k gets Binomial(left, pmf[k] / rest).
    const double nn = static_cast<double>(n);
    const double r = p / (1.0 - p);
    const double lq = p < 1e-5 ? -p - 0.5 * p * p - p * p * p / 3.0 : std::log1p(-p);
    double term = std::exp(static_cast<double>(kRsSymbols) * lq);  // pmf[0]
    double rest = 1.0;  // probability mass not drawn yet (bin 0 included: it comes last)
    unsigned k = 1;
    for (; k < fw::regs::kFecBins; ++k) {
      term *= kBinomRatio[k - 1] * r;
      if (nn * term < 1e-12 || left == 0) break;
      const std::uint64_t x = rest > 0.0 ? rng.binomial(left, std::min(1.0, term / rest)) : 0;
      rest -= term;
      left -= x;
      c.bins[k] = sat_add(c.bins[k], x);
      corrected += x;
      symbols += x * k;
    }
    if (k == fw::regs::kFecBins && left > 0) {
      // Reached n >= 16 without the terms becoming negligible: draw the tail too.
      const auto pmf = codeword_error_pmf(p);
      const std::uint64_t u =
          rng.binomial(left, std::min(1.0, pmf[fw::regs::kFecBins] / std::max(pmf[fw::regs::kFecBins], rest)));
      left -= u;
      c.uncorrectable = sat_add(c.uncorrectable, u);
    }
  } else if (p > 0.0) {
    // Heavily degraded lanes: full pmf (the mode may be past bin 15).
    const auto pmf = codeword_error_pmf(p);
    const double nn = static_cast<double>(n);
    double rest = 1.0;
    auto draw = [&](double pk) -> std::uint64_t {
      if (left == 0 || rest <= 0.0) return 0;
      const double q = std::min(1.0, pk / rest);
      rest -= pk;
      return rng.binomial(left, q);
    };
    for (unsigned k = 1; k < fw::regs::kFecBins; ++k) {
      if (nn * pmf[k] < 1e-12) {
        rest -= pmf[k];
        continue;
      }
      const std::uint64_t x = draw(pmf[k]);
      left -= x;
      c.bins[k] = sat_add(c.bins[k], x);
      corrected += x;
      symbols += x * k;
    }
    if (nn * pmf[fw::regs::kFecBins] >= 1e-12) {
      const std::uint64_t u = draw(pmf[fw::regs::kFecBins]);
      left -= u;
      c.uncorrectable = sat_add(c.uncorrectable, u);
    }
  }
  c.bins[0] = sat_add(c.bins[0], left);
  c.codewords = sat_add(c.codewords, n);
  c.corrected = sat_add(c.corrected, corrected);
  c.symbol_errors = sat_add(c.symbol_errors, symbols);
}

// ---- Tx FIR -----------------------------------------------------------------------------

std::uint32_t TxEq::encode() const noexcept {
  using namespace fw::regs::port::lane;
  return kTxEqPre.make(static_cast<std::uint32_t>(pre) & 0xff) | kTxEqMain.make(static_cast<std::uint32_t>(main)) |
         kTxEqPost.make(static_cast<std::uint32_t>(post) & 0xff);
}

TxEq tx_eq_optimum(std::uint64_t seed) noexcept {
  Rng r(seed);
  TxEq t;
  t.pre = -1 - static_cast<int>(r.next() % 6);   // -6..-1
  t.main = 44 + static_cast<int>(r.next() % 5);  // 44..48
  t.post = -2 - static_cast<int>(r.next() % 9);  // -10..-2
  return t;                                      // |pre| + main + |post| <= 6 + 48 + 10 = 64
}

unsigned tx_eq_steps(const TxEq& from, const TxEq& to) noexcept {
  return static_cast<unsigned>(std::abs(from.pre - to.pre) + std::abs(from.main - to.main) +
                               std::abs(from.post - to.post));
}

double tx_eq_penalty_db(const TxEq& taps, const TxEq& optimum) noexcept {
  return kEqPenaltyDbPerStep * static_cast<double>(tx_eq_steps(taps, optimum));
}

// ---- DDM --------------------------------------------------------------------------------

double module_temperature_c(std::uint64_t seed, std::uint64_t power_on_ns, std::uint64_t t_ns) noexcept {
  Rng r(seed);
  const double ambient = 28.0 + 8.0 * r.uniform();
  const double ph1 = 2.0 * std::numbers::pi * r.uniform();
  const double ph2 = 2.0 * std::numbers::pi * r.uniform();
  const double t = static_cast<double>(t_ns) * 1e-9;
  const double on = t_ns > power_on_ns ? static_cast<double>(t_ns - power_on_ns) * 1e-9 : 0.0;
  const double warm = 14.0 * (1.0 - std::exp(-on / 90.0));
  const double wander = 0.8 * std::sin(2.0 * std::numbers::pi * t / 600.0 + ph1) +
                        0.4 * std::sin(2.0 * std::numbers::pi * t / 137.0 + ph2);
  return ambient + warm + wander;
}

double module_vcc_v(std::uint64_t seed, std::uint64_t t_ns) noexcept {
  Rng r(seed ^ 0x5cc5cc5cc5ULL);
  const double ph = 2.0 * std::numbers::pi * r.uniform();
  const double t = static_cast<double>(t_ns) * 1e-9;
  return 3.300 + 0.004 * (r.uniform() - 0.5) + 0.002 * std::sin(2.0 * std::numbers::pi * t / 300.0 + ph);
}

double tx_bias_ma(double temp_c, double lane_offset_ma) noexcept {
  return kNominalBiasMa + lane_offset_ma + kBiasMaPerDegC * (temp_c - 25.0);
}

double tx_power_dbm(double temp_c, double lane_offset_db) noexcept {
  return kNominalTxPowerDbm + lane_offset_db + kTxPowerDbPerDegC * (temp_c - 25.0);
}

double dbm_to_mw(double dbm) noexcept { return std::pow(10.0, dbm / 10.0); }

}  // namespace npo::emu::optics
