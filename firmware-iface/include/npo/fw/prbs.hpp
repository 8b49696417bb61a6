// SPDX-License-Identifier: Apache-2.0
// npo-hal firmware interface: PRBS pattern generator and checker (spec registers.md §7.4).
//
// One implementation for both sides of the contract: the emulator transmits and checks
// lanes with it, the drivers use it for host-side pattern work. Header-only, standard
// library only (firmware-iface rule, README.md).
//
// ---- Sequences ------------------------------------------------------------------------
// Pattern   polynomial                  period    O.150 output   standard
// PRBS7     x^7 + x^6 + 1               2^7 - 1   not inverted   not an O.150 sequence (XAPP884: "non-standard");
//                                                                the common SerDes PRBS7
// PRBS9     x^9 + x^5 + 1               2^9 - 1   not inverted   ITU-T O.150 (05/96) §5.1
// PRBS11    x^11 + x^9 + 1              2^11 - 1  not inverted   ITU-T O.150 §5 (2^11-1 sequence)
// PRBS13    x^13 + x^12 + x^2 + x + 1   2^13 - 1  not inverted   IEEE 802.3 Clause 94 / Clause 120 PRBS13(Q);
//                                                                not an O.150 sequence, so never inverted
// PRBS15    x^15 + x^14 + 1             2^15 - 1  INVERTED       ITU-T O.150 §5 (2^15-1 sequence)
// PRBS23    x^23 + x^18 + 1             2^23 - 1  INVERTED       ITU-T O.150 §5.6
// PRBS31    x^31 + x^28 + 1             2^31 - 1  INVERTED       ITU-T O.150 §5 (2^31-1 sequence); IEEE 802.3
//                                                                Clause 49 PRBS31 test pattern (10GBASE-R)
// Polynomials: spec registers.md §7.4. Inverted/non-inverted: the O.150 table as quoted by
// tests/data/vectors/prbs_reference_sequences.md (Xilinx XAPP884 header table; O.150 (05/96)
// Sec. 4-5, Table 1). Section numbers: O.150 §5.1 (2^9-1 phase) from that .md, §5.6 (2^23-1) from
// public IEEE 802.3ae list correspondence quoting O.150; the other subsection numbers and the IEEE
// 802.3 subclauses were not checked against the standards' text, which was not at hand.
// PRBS13: the polynomial is the one the reference file uses and the .md attributes to IEEE 802.3
// Clause 94/120 PRBS13Q. It is not self-reciprocal: x^13 + x^12 + x^11 + x + 1 gives the
// time-reversed sequence. IEEE 802.3's PRBS13Q per-lane seeds and Gray-coded PAM4 mapping are not
// modelled (this header produces the NRZ bit sequence; a PAM4 mapping is a later stage).
//
// ---- Conventions (checked bit-exact by tests/prbs against tests/data/vectors) ---------
// Recurrence:  every sequence satisfies s[i] = XOR over the polynomial's terms x^e (e > 0) of
//              s[i - e], e.g. PRBS31: s[i] = s[i-31] ^ s[i-28]. This is the O.150 register form:
//              a Fibonacci shift register Q1..Qn, Q1 <- XOR of the stages named by the exponents,
//              output taken from Qn ("convention A" of the reference file). The libosmocore
//              sequences (tests/data/vectors/libosmocore_prbs_test.ok) obey the same recurrence at
//              another phase, so seeding with their first n bits reproduces them exactly.
// Seed:        the register content, which is also the first n output bits: bit n-1 of the seed
//              is transmitted first. The default seed is all ones (reference convention A); for
//              PRBS9 that yields the one phase O.150 fixes (§5.1, "the first ONE of 9 consecutive
//              ONEs"). A seed with no bit set in the low n bits would lock the register at zero and
//              is replaced by all ones.
// Inversion:   Inversion::kNone transmits the register output as is (reference convention A);
//              Inversion::kO150 inverts PRBS15/23/31 as O.150 specifies (convention B) and leaves
//              the others alone; Inversion::kAlways inverts every pattern. Generator and checker
//              must agree: a checker set for the other polarity never locks (for an odd number of
//              polynomial terms the inverted stream breaks the recurrence on every bit).
// Bit order:   BitOrder::kMsbFirst (default): the first transmitted bit is bit 7 of byte 0. This
//              is the packing of the one byte-level third-party vector, the PN9/PRBS9 table
//              FF 83 DF 17 32 09 4E D1 E7 CD 8A 91 (ETSI TS 102 361-1 Table D.2, quoted in the
//              reference .md). BitOrder::kLsbFirst: the first bit is bit 0 of byte 0 (how a
//              little-endian parallel PRBS word is loaded; "LSBfirst" rows of the reference file).
// Words:       next_bits(k) returns k bits right-aligned, the first transmitted bit most
//              significant, whatever the byte bit order.
//
// ---- Checker rule (spec registers.md §7.4; defaults in CheckerConfig) ------------------
// Hunting:     the checker predicts every received bit from the n bits received before it with the
//              recurrence (a self-synchronising predictor: it seeds itself from the stream, so it
//              needs no knowledge of the transmitter's seed or phase). It locks on the bit that
//              completes `lock_bits` (128) consecutive correct predictions, provided the last n
//              received bits are not all zero (an all-zero register predicts zeros forever, so a
//              dead lane full of zeros must not lock). A clean stream therefore locks on its bit
//              index n + lock_bits - 1, i.e. after n + lock_bits bits.
// Locked:      the checker runs its own copy of the register, seeded from the stream at lock, and
//              compares it with every later bit: PRBS_BITS counts compared bits, PRBS_ERRORS the
//              mismatches, so k flipped bits count exactly k errors (a self-synchronising checker
//              would count each flip once per polynomial term). Bits received while hunting
//              (including the bits that qualified the lock) are not counted.
// Losing lock: when more than `max_window_errors` (512) of the last `window_bits` (1024) compared
//              bits are wrong (a sliding window; before `window_bits` bits have been compared since
//              the lock, the missing ones count as correct), the checker drops lock on that bit and
//              hunts again from the next bit with an empty history. Counters keep their values.
// Chunking:    every decision is taken at a bit position of the stream, so feeding a stream in
//              chunks of any size (bytes or bit groups) gives exactly the same counters, lock state
//              and lock/loss counts as feeding it whole.
//
// ---- Performance ------------------------------------------------------------------------
// The generator advances 64 bits per step with byte-sliced tables (the next 64 bits are a
// GF(2)-linear function of the n-bit register: one 256-entry table per register byte, built at
// compile time), so one step costs at most four loads and XORs. The checker hunts in 32-bit
// syndrome words and, once locked, compares 64 bits per step (popcount of the XOR). Figures
// measured on the 2-core development VM: tests/prbs/README.md and `npo-prbs-bench`.
//
// Thread-safety: value types, no shared state beyond the immutable constexpr tables; one
// generator or checker per thread (per lane), copy freely.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

#include "npo/fw/regs.hpp"

namespace npo::fw::prbs {

/// The PRBS pattern numbers of PORT.CTRL.PRBS_PATTERN (spec registers.md §7.4).
using Pattern = regs::port::PrbsPattern;

/// Number of defined pattern values (0 .. kNumPatterns-1); the rest are reserved.
inline constexpr unsigned kNumPatterns = 7;

/// Output polarity (see the header comment).
enum class Inversion : std::uint8_t {
  kNone = 0,    ///< register output as is (reference convention A)
  kO150 = 1,    ///< inverted for PRBS15, PRBS23, PRBS31 as ITU-T O.150 specifies (convention B)
  kAlways = 2,  ///< inverted for every pattern
};

/// How bits are packed into bytes by PrbsGenerator::fill and read by PrbsChecker::feed.
enum class BitOrder : std::uint8_t {
  kMsbFirst = 0,  ///< first bit = bit 7 of byte 0 (default; the PRBS9 byte table of ETSI TS 102 361-1)
  kLsbFirst = 1,  ///< first bit = bit 0 of byte 0
};

/// Options shared by a generator and the checker that receives its stream.
struct Options {
  Inversion inversion = Inversion::kNone;
  BitOrder bit_order = BitOrder::kMsbFirst;
};

/// A PRBS polynomial x^n + ... + 1.
struct Polynomial {
  unsigned degree;     ///< n; 0 for a reserved pattern value
  std::uint32_t taps;  ///< bit e-1 set for every term x^e with e > 0 (so bit n-1 is always set)
  bool o150_inverted;  ///< ITU-T O.150 transmits the inverted register output
  std::string_view name;
};

namespace detail {
[[nodiscard]] constexpr std::uint32_t term(unsigned e) noexcept { return std::uint32_t{1} << (e - 1); }
}  // namespace detail

/// The polynomial of `pattern`; degree 0 for a reserved value (the generator then transmits
/// zeros and the checker never locks, as spec §7.4 requires of a reserved PRBS_PATTERN).
[[nodiscard]] constexpr Polynomial polynomial(Pattern pattern) noexcept {
  using detail::term;
  switch (pattern) {
    case Pattern::kPrbs7: return {7, term(7) | term(6), false, "PRBS7"};
    case Pattern::kPrbs9: return {9, term(9) | term(5), false, "PRBS9"};
    case Pattern::kPrbs11: return {11, term(11) | term(9), false, "PRBS11"};
    case Pattern::kPrbs15: return {15, term(15) | term(14), true, "PRBS15"};
    case Pattern::kPrbs23: return {23, term(23) | term(18), true, "PRBS23"};
    case Pattern::kPrbs31: return {31, term(31) | term(28), true, "PRBS31"};
    case Pattern::kPrbs13: return {13, term(13) | term(12) | term(2) | term(1), false, "PRBS13"};
  }
  return {0, 0, false, "reserved"};
}

/// True for the seven defined patterns.
[[nodiscard]] constexpr bool is_supported(Pattern pattern) noexcept { return polynomial(pattern).degree != 0; }

/// Sequence period 2^n - 1 (0 for a reserved pattern).
[[nodiscard]] constexpr std::uint64_t period(Pattern pattern) noexcept {
  const unsigned n = polynomial(pattern).degree;
  return n == 0 ? 0 : (std::uint64_t{1} << n) - 1;
}

/// True when `inversion` inverts the output of `pattern`.
[[nodiscard]] constexpr bool is_inverted(Pattern pattern, Inversion inversion) noexcept {
  if (!is_supported(pattern)) return false;
  switch (inversion) {
    case Inversion::kNone: return false;
    case Inversion::kO150: return polynomial(pattern).o150_inverted;
    case Inversion::kAlways: return true;
  }
  return false;
}

namespace detail {

[[nodiscard]] constexpr std::uint32_t low_mask32(unsigned n) noexcept {
  return n >= 32 ? ~std::uint32_t{0} : (std::uint32_t{1} << n) - 1;
}
[[nodiscard]] constexpr std::uint64_t low_mask(unsigned k) noexcept {
  return k >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << k) - 1;
}
/// The k most significant bits of a 64-bit word.
[[nodiscard]] constexpr std::uint64_t top_mask(unsigned k) noexcept {
  return k == 0 ? 0 : ~std::uint64_t{0} << (64 - k);
}
[[nodiscard]] constexpr std::uint32_t parity(std::uint32_t v) noexcept {
  return static_cast<std::uint32_t>(std::popcount(v)) & 1u;
}
/// Reverses the bit order inside each byte (MSB-first <-> LSB-first packing).
[[nodiscard]] constexpr std::uint64_t reverse_bits_in_bytes(std::uint64_t x) noexcept {
  x = ((x >> 1) & 0x5555555555555555ull) | ((x & 0x5555555555555555ull) << 1);
  x = ((x >> 2) & 0x3333333333333333ull) | ((x & 0x3333333333333333ull) << 2);
  return ((x >> 4) & 0x0f0f0f0f0f0f0f0full) | ((x & 0x0f0f0f0f0f0f0f0full) << 4);
}
/// Big-endian load of 8 bytes (byte 0 becomes the top byte).
[[nodiscard]] constexpr std::uint64_t load_be64(const std::byte* p) noexcept {
  if
    !consteval {
      std::uint64_t v;
      std::memcpy(&v, p, sizeof v);
      if constexpr (std::endian::native == std::endian::little) v = std::byteswap(v);
      return v;
    }
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<std::uint64_t>(p[i]);
  return v;
}
/// Stores all 8 bytes of `v`, top byte first.
constexpr void store_be64(std::byte* p, std::uint64_t v) noexcept {
  if
    !consteval {
      if constexpr (std::endian::native == std::endian::little) v = std::byteswap(v);
      std::memcpy(p, &v, sizeof v);
      return;
    }
  for (unsigned i = 0; i < 8; ++i) p[i] = static_cast<std::byte>(v >> (56 - 8 * i));
}
/// Stores the top `bytes` (0..8) bytes of `v`, top byte first.
constexpr void store_be(std::byte* p, std::uint64_t v, unsigned bytes) noexcept {
  for (unsigned i = 0; i < bytes; ++i) p[i] = static_cast<std::byte>(v >> (56 - 8 * i));
}

/// The 64 bits that follow an n-bit register `w` (w holds the next n bits, the first in bit n-1),
/// computed one bit at a time; the reference the tables are built from.
[[nodiscard]] constexpr std::uint64_t next64_serial(const Polynomial& p, std::uint32_t w) noexcept {
  const std::uint32_t mask = low_mask32(p.degree);
  std::uint64_t out = 0;
  for (int i = 0; i < 64; ++i) {
    const std::uint32_t fb = parity(w & p.taps);
    w = ((w << 1) | fb) & mask;
    out = (out << 1) | fb;
  }
  return out;
}

/// next64(w) = T[0][w & 0xff] ^ T[1][(w >> 8) & 0xff] ^ ... (the map is GF(2)-linear in w).
using StepTable = std::array<std::array<std::uint64_t, 256>, 4>;

[[nodiscard]] constexpr StepTable make_step_table(Pattern pattern) noexcept {
  StepTable t{};
  const Polynomial p = polynomial(pattern);
  std::array<std::uint64_t, 32> basis{};
  for (unsigned i = 0; i < p.degree; ++i) basis[i] = next64_serial(p, std::uint32_t{1} << i);
  for (unsigned j = 0; j < 4; ++j) {
    for (unsigned b = 1; b < 256; ++b) {
      const unsigned low = static_cast<unsigned>(std::countr_zero(b));
      t[j][b] = t[j][b & (b - 1)] ^ basis[8 * j + low];
    }
  }
  return t;
}

inline constexpr std::array<StepTable, kNumPatterns> kStepTables = {
    make_step_table(Pattern{0}), make_step_table(Pattern{1}), make_step_table(Pattern{2}), make_step_table(Pattern{3}),
    make_step_table(Pattern{4}), make_step_table(Pattern{5}), make_step_table(Pattern{6})};

template <unsigned NB>
[[nodiscard]] constexpr std::uint64_t step64(const StepTable& t, std::uint32_t w) noexcept {
  std::uint64_t r = t[0][w & 0xffu];
  if constexpr (NB > 1) r ^= t[1][(w >> 8) & 0xffu];
  if constexpr (NB > 2) r ^= t[2][(w >> 16) & 0xffu];
  if constexpr (NB > 3) r ^= t[3][(w >> 24) & 0xffu];
  return r;
}

}  // namespace detail

/// PRBS pattern generator: a Fibonacci LFSR advanced 64 bits per table step.
/// Usable in constant expressions (next_bit, next_bits, fill, discard are all constexpr).
class PrbsGenerator {
 public:
  /// Seed that presets the register to all ones (the reference phase, "convention A").
  static constexpr std::uint32_t kAllOnes = ~std::uint32_t{0};

  /// `seed`: the register, i.e. the first n raw output bits, first bit in bit n-1 (bits above n are
  /// ignored; zero is replaced by all ones). A reserved `pattern` transmits zeros.
  constexpr explicit PrbsGenerator(Pattern pattern, std::uint32_t seed = kAllOnes, Options options = {}) noexcept
      : pattern_(pattern), options_(options) {
    const Polynomial p = polynomial(pattern);
    n_ = p.degree;
    taps_ = p.taps;
    mask_ = detail::low_mask32(n_);
    table_bytes_ = (n_ + 7) / 8;
    table_ = n_ == 0 ? nullptr : &detail::kStepTables[static_cast<unsigned>(pattern)];
    invert_ = is_inverted(pattern, options.inversion) ? ~std::uint64_t{0} : 0;
    reseed(seed);
  }

  /// Reloads the register (same rules as the constructor's seed).
  constexpr void reseed(std::uint32_t seed) noexcept {
    w_ = seed & mask_;
    if (w_ == 0) w_ = mask_;
  }

  /// The next transmitted bit (0 or 1).
  constexpr unsigned next_bit() noexcept {
    if (n_ == 0) return 0;
    const std::uint32_t out = (w_ >> (n_ - 1)) & 1u;
    w_ = ((w_ << 1) | detail::parity(w_ & taps_)) & mask_;
    return out ^ static_cast<unsigned>(invert_ & 1u);
  }

  /// The next `count` (1..64) transmitted bits, right-aligned, the first one most significant.
  constexpr std::uint64_t next_bits(unsigned count) noexcept {
    if (count == 0) return 0;
    count = std::min(count, 64u);
    return (take(count) ^ invert_) >> (64 - count);
  }

  /// Writes the next 8 * out.size() transmitted bits, packed per options().bit_order.
  constexpr void fill(std::span<std::byte> out) noexcept {
    switch (table_bytes_) {
      case 1: fill_impl<1>(out); break;
      case 2: fill_impl<2>(out); break;
      case 3: fill_impl<3>(out); break;
      case 4: fill_impl<4>(out); break;
      default:
        for (auto& b : out) b = std::byte{0};  // reserved pattern: transmits nothing
        break;
    }
  }

  /// Skips `bits` transmitted bits (linear time, 64 bits per step).
  constexpr void discard(std::uint64_t bits) noexcept {
    for (; bits >= 64; bits -= 64) (void)take(64);
    if (bits != 0) (void)take(static_cast<unsigned>(bits));
  }

  /// The register: the next n raw (not inverted) output bits, the first one in bit n-1.
  [[nodiscard]] constexpr std::uint32_t state() const noexcept { return w_; }
  [[nodiscard]] constexpr Pattern pattern() const noexcept { return pattern_; }
  [[nodiscard]] constexpr Options options() const noexcept { return options_; }
  [[nodiscard]] constexpr unsigned degree() const noexcept { return n_; }
  [[nodiscard]] constexpr bool inverted() const noexcept { return invert_ != 0; }

 private:
  /// The next k (1..64) raw bits, top-aligned (first bit in bit 63).
  constexpr std::uint64_t take(unsigned k) noexcept {
    if (n_ == 0) return 0;
    std::uint64_t next = 0;  // the 64 bits after the register's n bits
    switch (table_bytes_) {
      case 1: next = detail::step64<1>(*table_, w_); break;
      case 2: next = detail::step64<2>(*table_, w_); break;
      case 3: next = detail::step64<3>(*table_, w_); break;
      default: next = detail::step64<4>(*table_, w_); break;
    }
    const std::uint64_t bits = (static_cast<std::uint64_t>(w_) << (64 - n_)) | (next >> n_);
    // New register = raw bits k .. k+n-1 of the stream (w_ followed by next).
    if (k < n_) {
      w_ = ((w_ << k) | static_cast<std::uint32_t>(next >> (64 - k))) & mask_;
    } else {
      w_ = static_cast<std::uint32_t>(next >> (64 - k)) & mask_;
    }
    return bits & detail::top_mask(k);
  }

  template <unsigned NB>
  constexpr void fill_impl(std::span<std::byte> out) noexcept {
    // Members in locals: byte stores may alias *this, which would force reloads in the loop.
    const detail::StepTable& t = *table_;
    const unsigned n = n_;
    const std::uint32_t mask = mask_;
    const std::uint64_t invert = invert_;
    const bool lsb = options_.bit_order == BitOrder::kLsbFirst;
    std::uint32_t w = w_;
    std::byte* p = out.data();
    std::size_t i = 0;
    for (; i + 8 <= out.size(); i += 8) {
      const std::uint64_t next = detail::step64<NB>(t, w);
      std::uint64_t bits = ((static_cast<std::uint64_t>(w) << (64 - n)) | (next >> n)) ^ invert;
      w = static_cast<std::uint32_t>(next) & mask;
      if (lsb) bits = detail::reverse_bits_in_bytes(bits);
      detail::store_be64(p + i, bits);
    }
    w_ = w;
    if (i < out.size()) {
      const auto rest = static_cast<unsigned>(out.size() - i);
      std::uint64_t bits = take(8 * rest) ^ invert;
      if (lsb) bits = detail::reverse_bits_in_bytes(bits);
      detail::store_be(p + i, bits, rest);
    }
  }

  Pattern pattern_;
  Options options_;
  unsigned n_ = 0;
  unsigned table_bytes_ = 0;
  std::uint32_t taps_ = 0;
  std::uint32_t mask_ = 0;
  std::uint32_t w_ = 0;
  std::uint64_t invert_ = 0;
  const detail::StepTable* table_ = nullptr;
};

// Compile-time self-checks: constexpr use, the all-ones phase and MSB-first packing (PRBS9 bytes
// FF 83 DF of ETSI TS 102 361-1 Table D.2), and O.150 inversion of PRBS31 (reference row B).
static_assert(PrbsGenerator(Pattern::kPrbs9).next_bits(24) == 0xff83dfu);
static_assert(PrbsGenerator(Pattern::kPrbs31, PrbsGenerator::kAllOnes, {Inversion::kO150}).next_bits(64) ==
              0x00000001ffffffe3ull);
static_assert(PrbsGenerator(Pattern{7}).next_bits(8) == 0);

/// Lock rule parameters (header comment, "Checker rule"); the defaults are spec §7.4's.
struct CheckerConfig {
  unsigned lock_bits = 128;          ///< consecutive correct predictions needed to lock (>= 1)
  unsigned window_bits = 1024;       ///< sliding window of compared bits (1 .. kMaxWindowBits)
  unsigned max_window_errors = 512;  ///< lock is lost when the window holds more errors than this
};

/// PRBS checker: self-synchronising hunt, then error counting against its own register.
class PrbsChecker {
 public:
  static constexpr unsigned kMaxWindowBits = 1024;

  explicit PrbsChecker(Pattern pattern, Options options = {}, CheckerConfig config = {}) noexcept
      : pattern_(pattern), options_(options), config_(config), gen_(pattern) {
    const Polynomial p = polynomial(pattern);
    n_ = p.degree;
    taps_ = p.taps;
    mask_ = detail::low_mask32(n_);
    invert_ = is_inverted(pattern, options.inversion) ? ~std::uint64_t{0} : 0;
    config_.lock_bits = std::max(config_.lock_bits, 1u);
    config_.window_bits = std::clamp(config_.window_bits, 1u, kMaxWindowBits);
  }

  /// Checks received bytes (packed per options().bit_order).
  void feed(std::span<const std::byte> data) noexcept {
    const bool lsb = options_.bit_order == BitOrder::kLsbFirst;
    std::size_t i = 0;
    for (; i + 8 <= data.size(); i += 8) {
      std::uint64_t x = detail::load_be64(data.data() + i);
      if (lsb) x = detail::reverse_bits_in_bytes(x);
      process(x ^ invert_, 64);
    }
    if (i < data.size()) {
      const auto rest = static_cast<unsigned>(data.size() - i);
      std::uint64_t x = 0;
      for (unsigned b = 0; b < rest; ++b) x |= static_cast<std::uint64_t>(data[i + b]) << (56 - 8 * b);
      if (lsb) x = detail::reverse_bits_in_bytes(x);
      process((x ^ invert_) & detail::top_mask(8 * rest), 8 * rest);
    }
  }

  /// Checks `count` (0..64) received bits, right-aligned in `value`, the first one most significant.
  void feed_bits(std::uint64_t value, unsigned count) noexcept {
    if (count == 0) return;
    count = std::min(count, 64u);
    process(((value << (64 - count)) ^ invert_) & detail::top_mask(count), count);
  }

  /// Bits compared while locked (LANE.PRBS_BITS).
  [[nodiscard]] std::uint64_t bits() const noexcept { return bits_; }
  /// Mismatching bits while locked (LANE.PRBS_ERRORS).
  [[nodiscard]] std::uint64_t errors() const noexcept { return errors_; }
  /// Synchronised to the received pattern (LANE.LANE_STATUS.PRBS_LOCK).
  [[nodiscard]] bool locked() const noexcept { return locked_; }
  /// Times lock was acquired / lost since construction or reset().
  [[nodiscard]] std::uint64_t lock_count() const noexcept { return locks_; }
  [[nodiscard]] std::uint64_t loss_count() const noexcept { return losses_; }

  /// Power-on state: counters zero, hunting with an empty history.
  void reset() noexcept {
    bits_ = errors_ = locks_ = losses_ = 0;
    unlock();
  }
  /// Zeroes PRBS_BITS/PRBS_ERRORS only (LANE.CLEAR); lock state is kept.
  void clear_counters() noexcept { bits_ = errors_ = 0; }

  [[nodiscard]] Pattern pattern() const noexcept { return pattern_; }
  [[nodiscard]] Options options() const noexcept { return options_; }
  [[nodiscard]] CheckerConfig config() const noexcept { return config_; }

 private:
  // x: raw (de-inverted) bits, top-aligned; k: how many (1..64).
  void process(std::uint64_t x, unsigned k) noexcept {
    while (k > 0) {
      const unsigned used = locked_ ? track(x, k) : hunt(x, k);
      if (used >= k) break;
      x <<= used;
      k -= used;
    }
  }

  void unlock() noexcept {
    locked_ = false;
    hist_ = 0;
    filled_ = 0;
    run_ = 0;
  }

  // Hunting: returns the bits consumed; stops right after the bit that acquires lock.
  unsigned hunt(std::uint64_t x, unsigned k) noexcept {
    if (n_ == 0) return k;  // reserved pattern: never locks
    const unsigned lock_bits = config_.lock_bits;
    unsigned done = 0;
    while (done < k) {
      const unsigned m = std::min(32u, k - done);
      // h: received history, newest bit in bit 0; the m new bits are its low bits.
      const std::uint64_t h = (hist_ << m) | ((x << done) >> (64 - m));
      // Syndrome bit j = h_j ^ XOR_e h_{j+e}: 1 where the recurrence mispredicts bit j.
      std::uint64_t syn = h;
      for (std::uint32_t t = taps_; t != 0; t &= t - 1) syn ^= h >> (std::countr_zero(t) + 1);
      // Positions 0..v-1 have n received bits before them (the others only seed the history).
      const unsigned v = filled_ + m > n_ ? std::min(m, filled_ + m - n_) : 0;
      const std::uint64_t s = syn & detail::low_mask(v);
      unsigned j = v;  // positions j-1 .. 0 remain, oldest first
      while (j > 0) {
        const std::uint64_t cur = s & detail::low_mask(j);
        const unsigned top = cur == 0 ? 0 : 64u - static_cast<unsigned>(std::countl_zero(cur));  // highest 1, + 1
        const unsigned zeros = j - top;
        if (run_ < lock_bits && run_ + zeros >= lock_bits) {
          const unsigned p = j - (lock_bits - run_);  // the bit completing the run
          const auto reg = static_cast<std::uint32_t>(h >> p) & mask_;
          if (reg != 0) {
            acquire(reg);
            return done + (m - p);
          }
          // All-zero register: it stays zero until the next misprediction, which resets the run.
        }
        run_ = std::min(run_ + zeros, lock_bits);
        if (cur == 0) break;
        run_ = 0;
        j = top - 1;
        if (j < lock_bits) {  // too few positions left to lock: only the newest run matters
          const std::uint64_t rest = s & detail::low_mask(j);
          run_ = rest == 0 ? j : static_cast<unsigned>(std::countr_zero(rest));
          break;
        }
      }
      hist_ = h;
      filled_ = std::min(filled_ + m, 64u);
      done += m;
    }
    return k;
  }

  // `reg`: the last n received bits (oldest in bit n-1). The reference register must hold the
  // n bits after them: load it and step n bits.
  void acquire(std::uint32_t reg) noexcept {
    gen_.reseed(reg);
    gen_.discard(n_);
    locked_ = true;
    ++locks_;
    ring_.fill(0);
    pos_ = 0;
    window_errors_ = 0;
  }

  // Locked: returns the bits consumed; stops right after the bit that loses lock.
  unsigned track(std::uint64_t x, unsigned k) noexcept {
    const std::uint64_t ref = gen_.next_bits(k) << (64 - k);
    const std::uint64_t err = (x ^ ref) & detail::top_mask(k);
    if (err == 0 && window_errors_ == 0) {  // fast path: the window is and stays all zero
      bits_ += k;
      pos_ += k;
      if (pos_ >= config_.window_bits) pos_ %= config_.window_bits;
      return k;
    }
    const unsigned used = slide_window(err, k);
    bits_ += used;
    errors_ += static_cast<unsigned>(std::popcount(err & detail::top_mask(used)));
    if (used < k || window_errors_ > config_.max_window_errors) {
      ++losses_;
      unlock();
    }
    return used;
  }

  // Pushes k error bits (top-aligned) into the sliding window; returns k, or the number of bits
  // up to and including the one that takes the window over the threshold.
  unsigned slide_window(std::uint64_t err, unsigned k) noexcept {
    const unsigned w = config_.window_bits;
    const unsigned limit = config_.max_window_errors;
    unsigned done = 0;
    while (done < k) {
      const unsigned m = std::min(k - done, w - pos_);
      const std::uint64_t e = (err << done) & detail::top_mask(m);
      if (e != 0 || window_errors_ != 0) {
        const std::uint64_t old = ring_extract(pos_, m);
        const auto added = static_cast<unsigned>(std::popcount(e));
        if (window_errors_ + added <= limit) {
          window_errors_ = window_errors_ + added - static_cast<unsigned>(std::popcount(old));
        } else {
          for (unsigned i = 0; i < m; ++i) {
            window_errors_ += static_cast<unsigned>((e >> (63 - i)) & 1u);
            window_errors_ -= static_cast<unsigned>((old >> (63 - i)) & 1u);
            if (window_errors_ > limit) return done + i + 1;
          }
        }
        ring_deposit(pos_, m, e);
      }
      pos_ = pos_ + m == w ? 0 : pos_ + m;
      done += m;
    }
    return k;
  }

  // Ring of the last window_bits error bits; bit position p is bit 63 - p % 64 of ring_[p / 64].
  [[nodiscard]] std::uint64_t ring_extract(unsigned p, unsigned m) const noexcept {
    const unsigned a = p / 64;
    const unsigned off = p % 64;
    std::uint64_t v = ring_[a] << off;
    if (off != 0 && off + m > 64) v |= ring_[a + 1] >> (64 - off);
    return v & detail::top_mask(m);
  }
  void ring_deposit(unsigned p, unsigned m, std::uint64_t e) noexcept {
    const unsigned a = p / 64;
    const unsigned off = p % 64;
    const std::uint64_t tm = detail::top_mask(m);
    ring_[a] = (ring_[a] & ~(tm >> off)) | (e >> off);
    if (off != 0 && off + m > 64) ring_[a + 1] = (ring_[a + 1] & ~(tm << (64 - off))) | (e << (64 - off));
  }

  Pattern pattern_;
  Options options_;
  CheckerConfig config_;
  PrbsGenerator gen_;  // raw reference register while locked
  unsigned n_ = 0;
  std::uint32_t taps_ = 0;
  std::uint32_t mask_ = 0;
  std::uint64_t invert_ = 0;
  // hunting
  std::uint64_t hist_ = 0;  // received bits, newest in bit 0
  unsigned filled_ = 0;     // valid bits in hist_ (saturates at 64)
  unsigned run_ = 0;        // consecutive correct predictions (capped at lock_bits)
  // locked
  bool locked_ = false;
  std::array<std::uint64_t, kMaxWindowBits / 64> ring_{};
  unsigned pos_ = 0;
  unsigned window_errors_ = 0;
  // counters
  std::uint64_t bits_ = 0;
  std::uint64_t errors_ = 0;
  std::uint64_t locks_ = 0;
  std::uint64_t losses_ = 0;
};

}  // namespace npo::fw::prbs
