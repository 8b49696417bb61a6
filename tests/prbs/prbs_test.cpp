// SPDX-License-Identifier: Apache-2.0
// PRBS generator and checker (firmware-iface/include/npo/fw/prbs.hpp) against the reference
// vectors in tests/data/vectors (prbs_reference_sequences.{txt,md}, libosmocore_prbs_test.ok),
// the sequence periods, and the checker's lock/count rule (spec registers.md §7.4), the latter
// also against a bit-serial model written straight from the rule.
#include "npo/fw/prbs.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace {

using npo::fw::prbs::BitOrder;
using npo::fw::prbs::CheckerConfig;
using npo::fw::prbs::Inversion;
using npo::fw::prbs::Options;
using npo::fw::prbs::Pattern;
using npo::fw::prbs::PrbsChecker;
using npo::fw::prbs::PrbsGenerator;

constexpr std::array<Pattern, 7> kPatterns = {Pattern::kPrbs7,  Pattern::kPrbs9,  Pattern::kPrbs11, Pattern::kPrbs13,
                                              Pattern::kPrbs15, Pattern::kPrbs23, Pattern::kPrbs31};

unsigned degree(Pattern p) { return npo::fw::prbs::polynomial(p).degree; }
std::string name(Pattern p) { return std::string(npo::fw::prbs::polynomial(p).name); }

Pattern pattern_of_degree(unsigned n) {
  for (Pattern p : kPatterns) {
    if (degree(p) == n) return p;
  }
  ADD_FAILURE() << "no pattern of degree " << n;
  return Pattern{15};
}

std::string read_text(const std::string& rel) {
  const std::string path = std::string(NPO_TEST_DATA_DIR) + "/" + rel;
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return {};
  const auto e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

// ---- Bit strings and packing ------------------------------------------------------------

std::string next_bits_string(PrbsGenerator& g, std::size_t count) {
  std::string s;
  s.reserve(count);
  for (std::size_t i = 0; i < count; ++i) s.push_back(g.next_bit() != 0 ? '1' : '0');
  return s;
}

std::string hex(const std::vector<std::byte>& bytes) {
  std::string s;
  static constexpr char kDigits[] = "0123456789abcdef";
  for (std::byte b : bytes) {
    if (!s.empty()) s.push_back(' ');
    s.push_back(kDigits[static_cast<unsigned>(b) >> 4]);
    s.push_back(kDigits[static_cast<unsigned>(b) & 15]);
  }
  return s;
}

std::vector<std::byte> fill_bytes(PrbsGenerator& g, std::size_t count) {
  std::vector<std::byte> out(count);
  g.fill(out);
  return out;
}

/// Packs a 0/1 vector into bytes (the last byte zero-padded).
std::vector<std::byte> pack(const std::vector<std::uint8_t>& bits, BitOrder order) {
  std::vector<std::byte> out((bits.size() + 7) / 8);
  for (std::size_t i = 0; i < bits.size(); ++i) {
    if (bits[i] == 0) continue;
    const unsigned shift = order == BitOrder::kMsbFirst ? 7 - i % 8 : i % 8;
    out[i / 8] |= static_cast<std::byte>(1u << shift);
  }
  return out;
}

std::vector<std::uint8_t> unpack(const std::vector<std::byte>& bytes, BitOrder order) {
  std::vector<std::uint8_t> bits(bytes.size() * 8);
  for (std::size_t i = 0; i < bits.size(); ++i) {
    const unsigned shift = order == BitOrder::kMsbFirst ? 7 - i % 8 : i % 8;
    bits[i] = static_cast<std::uint8_t>((static_cast<unsigned>(bytes[i / 8]) >> shift) & 1u);
  }
  return bits;
}

std::vector<std::uint8_t> generate_bits(PrbsGenerator& g, std::size_t count) {
  std::vector<std::uint8_t> bits(count);
  for (auto& b : bits) b = static_cast<std::uint8_t>(g.next_bit());
  return bits;
}

// ---- Reference file parsing ---------------------------------------------------------------

struct RefBlock {
  unsigned order = 0;
  std::vector<unsigned> exponents;  // of the x^e terms with e > 0
  std::uint64_t period = 0;
  bool inverted = false;
  std::map<std::string, std::string> rows;  // "A bits", "A MSBfirst", "B LSBfirst", "C bits", ...
};

std::vector<RefBlock> parse_reference(const std::string& text) {
  std::vector<RefBlock> blocks;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("PRBS", 0) == 0) {
      RefBlock b;
      std::istringstream ls(line);
      std::string tok;
      ls >> tok;
      b.order = static_cast<unsigned>(std::stoul(tok.substr(4)));
      ls >> tok;  // "poly"
      while (ls >> tok && tok != "period") {
        if (tok.rfind("x^", 0) == 0) {
          b.exponents.push_back(static_cast<unsigned>(std::stoul(tok.substr(2))));
        } else if (tok == "x") {
          b.exponents.push_back(1);
        }
      }
      ls >> b.period >> tok >> tok;
      b.inverted = tok == "INVERTED";
      blocks.push_back(b);
      continue;
    }
    if (blocks.empty() || line.size() < 3 || line[0] != ' ') continue;
    const std::string t = trim(line);
    const auto colon = t.find(':');
    if (colon == std::string::npos) continue;
    const std::string head = trim(t.substr(0, colon));
    std::string kind;
    if (head.ends_with("bits")) {
      kind = "bits";
    } else if (head.ends_with("MSBfirst")) {
      kind = "MSBfirst";
    } else if (head.ends_with("LSBfirst")) {
      kind = "LSBfirst";
    } else {
      continue;
    }
    blocks.back().rows[std::string(1, t[0]) + " " + kind] = trim(t.substr(colon + 1));
  }
  return blocks;
}

const std::vector<RefBlock>& reference() {
  static const std::vector<RefBlock> blocks = parse_reference(read_text("vectors/prbs_reference_sequences.txt"));
  return blocks;
}

/// libosmocore_prbs_test.ok: order -> the two consecutive periods, concatenated.
std::map<unsigned, std::string> parse_libosmocore(const std::string& text) {
  std::map<unsigned, std::string> out;
  std::istringstream in(text);
  std::string line;
  unsigned current = 0;
  while (std::getline(in, line)) {
    const auto at = line.find("'PRBS-");
    if (at != std::string::npos) {
      current = static_cast<unsigned>(std::stoul(line.substr(at + 6)));
      continue;
    }
    line = trim(line);
    if (current != 0 && !line.empty()) out[current] += line;
  }
  return out;
}

std::uint32_t seed_from_bits(const std::string& bits, unsigned n) {
  std::uint32_t s = 0;
  for (unsigned i = 0; i < n; ++i) s = (s << 1) | (bits.at(i) == '1' ? 1u : 0u);
  return s;
}

// ---- Reference vectors -------------------------------------------------------------------

TEST(PrbsReference, FileCoversEveryPattern) {
  const auto& blocks = reference();
  std::set<unsigned> orders;
  for (const auto& b : blocks) orders.insert(b.order);
  EXPECT_EQ(orders, (std::set<unsigned>{7, 9, 11, 13, 15, 23, 31}));
  EXPECT_EQ(blocks.size(), 7u);
  for (const auto& b : blocks) {
    // A rows for all, B rows only where O.150 inverts, C rows for all.
    for (const char* key : {"A bits", "A MSBfirst", "A LSBfirst", "C bits", "C MSBfirst"}) {
      EXPECT_TRUE(b.rows.contains(key)) << "PRBS" << b.order << " lacks " << key;
    }
    EXPECT_EQ(b.rows.contains("B bits"), b.inverted) << "PRBS" << b.order;
    EXPECT_EQ(b.rows.at("A bits").size(), 64u);
  }
}

TEST(PrbsReference, PolynomialsPeriodsAndInversionMatchTheFile) {
  for (const auto& b : reference()) {
    const Pattern p = pattern_of_degree(b.order);
    const auto poly = npo::fw::prbs::polynomial(p);
    std::uint32_t taps = 0;
    for (unsigned e : b.exponents) taps |= 1u << (e - 1);
    EXPECT_EQ(poly.taps, taps) << name(p);
    EXPECT_EQ(npo::fw::prbs::period(p), b.period) << name(p);
    EXPECT_EQ(poly.o150_inverted, b.inverted) << name(p);
  }
  // Spot values, independent of the parser.
  EXPECT_EQ(npo::fw::prbs::polynomial(Pattern::kPrbs13).taps, 0x1803u);  // x^13 + x^12 + x^2 + x
  EXPECT_EQ(npo::fw::prbs::polynomial(Pattern::kPrbs31).taps, 0x48000000u);
  EXPECT_EQ(npo::fw::prbs::period(Pattern::kPrbs23), 8388607u);
}

TEST(PrbsReference, ConventionAAllOnesRegister) {
  for (const auto& b : reference()) {
    const Pattern p = pattern_of_degree(b.order);
    PrbsGenerator bits(p);
    EXPECT_EQ(next_bits_string(bits, 64), b.rows.at("A bits")) << name(p);
    PrbsGenerator msb(p);
    EXPECT_EQ(hex(fill_bytes(msb, 8)), b.rows.at("A MSBfirst")) << name(p);
    PrbsGenerator lsb(p, PrbsGenerator::kAllOnes, {.bit_order = BitOrder::kLsbFirst});
    EXPECT_EQ(hex(fill_bytes(lsb, 8)), b.rows.at("A LSBfirst")) << name(p);
  }
}

TEST(PrbsReference, ConventionBO150Inversion) {
  for (const auto& b : reference()) {
    const Pattern p = pattern_of_degree(b.order);
    const Options o150{.inversion = Inversion::kO150};
    PrbsGenerator bits(p, PrbsGenerator::kAllOnes, o150);
    // Row B where O.150 inverts; otherwise O.150 output is row A.
    const std::string row = b.inverted ? "B" : "A";
    EXPECT_EQ(next_bits_string(bits, 64), b.rows.at(row + " bits")) << name(p);
    PrbsGenerator msb(p, PrbsGenerator::kAllOnes, o150);
    EXPECT_EQ(hex(fill_bytes(msb, 8)), b.rows.at(row + " MSBfirst")) << name(p);
    PrbsGenerator lsb(p, PrbsGenerator::kAllOnes, {.inversion = Inversion::kO150, .bit_order = BitOrder::kLsbFirst});
    EXPECT_EQ(hex(fill_bytes(lsb, 8)), b.rows.at(row + " LSBfirst")) << name(p);
  }
}

TEST(PrbsReference, ConventionCLibosmocorePhase) {
  // Same recurrence at another phase: seeding the register with the row's first n bits must
  // reproduce the remaining 64 - n bits.
  for (const auto& b : reference()) {
    const Pattern p = pattern_of_degree(b.order);
    const std::string& row = b.rows.at("C bits");
    PrbsGenerator g(p, seed_from_bits(row, b.order));
    EXPECT_EQ(next_bits_string(g, 64), row) << name(p);
    PrbsGenerator msb(p, seed_from_bits(row, b.order));
    EXPECT_EQ(hex(fill_bytes(msb, 8)), b.rows.at("C MSBfirst")) << name(p);
  }
}

TEST(PrbsReference, Prbs9EtsiDmrByteTable) {
  // prbs_reference_sequences.md: ETSI TS 102 361-1 Table D.2 PN9 bytes, MSB first, all-ones start.
  PrbsGenerator g(Pattern::kPrbs9);
  EXPECT_EQ(hex(fill_bytes(g, 12)), "ff 83 df 17 32 09 4e d1 e7 cd 8a 91");
}

TEST(PrbsLibosmocore, TwoFullPeriodsBitExact) {
  const auto seqs = parse_libosmocore(read_text("vectors/libosmocore_prbs_test.ok"));
  ASSERT_EQ(seqs.size(), 4u);
  for (unsigned n : {7u, 9u, 11u, 15u}) {
    ASSERT_TRUE(seqs.contains(n)) << n;
    const Pattern p = pattern_of_degree(n);
    const std::string& ref = seqs.at(n);
    ASSERT_EQ(ref.size(), 2 * npo::fw::prbs::period(p)) << name(p);
    // Bit path.
    PrbsGenerator g(p, seed_from_bits(ref, n));
    EXPECT_EQ(next_bits_string(g, ref.size()), ref) << name(p);
    // Byte path (fill) over the same bits.
    PrbsGenerator f(p, seed_from_bits(ref, n));
    const auto bits = unpack(fill_bytes(f, ref.size() / 8), BitOrder::kMsbFirst);
    std::string s;
    for (auto v : bits) s.push_back(v != 0 ? '1' : '0');
    EXPECT_EQ(s, ref.substr(0, s.size())) << name(p);
  }
}

TEST(PrbsLibosmocore, AllOnesPhaseOffsets) {
  // prbs_reference_sequences.md: convention A is the libosmocore sequence rotated by 114 (PRBS7),
  // 373 (PRBS9), 1008 (PRBS11), 32738 (PRBS15).
  const auto seqs = parse_libosmocore(read_text("vectors/libosmocore_prbs_test.ok"));
  const std::map<unsigned, std::size_t> offsets = {{7, 114}, {9, 373}, {11, 1008}, {15, 32738}};
  for (const auto& [n, off] : offsets) {
    const Pattern p = pattern_of_degree(n);
    const auto per = static_cast<std::size_t>(npo::fw::prbs::period(p));
    PrbsGenerator g(p);
    EXPECT_EQ(next_bits_string(g, per), seqs.at(n).substr(off, per)) << name(p);
  }
}

// ---- Generator mechanics -------------------------------------------------------------------

TEST(PrbsGenerator, WordByteAndBitPathsAgree) {
  std::mt19937_64 rng(7);
  for (Pattern p : kPatterns) {
    for (Options o : {Options{}, Options{Inversion::kO150, BitOrder::kLsbFirst}, Options{Inversion::kAlways}}) {
      const auto seed = static_cast<std::uint32_t>(rng());
      PrbsGenerator serial(p, seed, o);
      const auto ref = generate_bits(serial, 8 * 1000);
      // fill() in odd-sized pieces, after 8 bits taken singly.
      PrbsGenerator f(p, seed, o);
      std::vector<std::uint8_t> got = generate_bits(f, 8);
      std::size_t done = 1;
      for (std::size_t len = 1; done < 1000; len = len % 17 + 1) {
        const std::size_t take = std::min(len, 1000 - done);
        const auto bytes = fill_bytes(f, take);
        const auto bits = unpack(bytes, o.bit_order);
        got.insert(got.end(), bits.begin(), bits.end());
        done += take;
      }
      EXPECT_EQ(got, ref) << name(p);
      // next_bits(k) for random k.
      PrbsGenerator w(p, seed, o);
      std::vector<std::uint8_t> words;
      while (words.size() < ref.size()) {
        const auto k = static_cast<unsigned>(std::min<std::size_t>(rng() % 64 + 1, ref.size() - words.size()));
        const std::uint64_t v = w.next_bits(k);
        for (unsigned i = k; i-- > 0;) words.push_back(static_cast<std::uint8_t>((v >> i) & 1u));
      }
      EXPECT_EQ(words, ref) << name(p);
    }
  }
}

TEST(PrbsGenerator, SeedIsTheFirstBitsAndZeroSeedIsAllOnes) {
  for (Pattern p : kPatterns) {
    const unsigned n = degree(p);
    const std::uint32_t seed = 0x5a5a5a5au & ((1u << n) - 1);
    PrbsGenerator g(p, seed);
    EXPECT_EQ(g.state(), seed);
    EXPECT_EQ(g.next_bits(n), seed) << name(p);
    PrbsGenerator z(p, 0);
    EXPECT_EQ(z.state(), (1u << n) - 1) << name(p);
    // Bits above n are ignored.
    PrbsGenerator hi(p, seed | (1u << n));
    EXPECT_EQ(hi.state(), seed) << name(p);
  }
}

TEST(PrbsGenerator, DiscardMatchesStepping) {
  for (Pattern p : kPatterns) {
    PrbsGenerator a(p, 0x1234567u);
    PrbsGenerator b(p, 0x1234567u);
    for (std::uint64_t skip : {1u, 5u, 63u, 64u, 65u, 1000u, 4097u}) {
      a.discard(skip);
      for (std::uint64_t i = 0; i < skip; ++i) (void)b.next_bit();
      EXPECT_EQ(a.state(), b.state()) << name(p) << " skip " << skip;
    }
  }
}

// Full period, bit by bit, for n <= 23: the register returns to its seed first after exactly
// 2^n - 1 steps, and one period holds 2^(n-1) ones (maximal-length property).
TEST(PrbsGenerator, PeriodIsTwoToTheNMinusOne) {
  for (Pattern p : kPatterns) {
    const unsigned n = degree(p);
    if (n > 23) continue;
    const std::uint32_t seed = 0x2b3c4d5eu & ((1u << n) - 1);
    PrbsGenerator g(p, seed);
    std::uint64_t steps = 0;
    std::uint64_t ones = 0;
    do {
      ones += g.next_bit();
      ++steps;
    } while (g.state() != seed && steps <= (std::uint64_t{1} << n));
    EXPECT_EQ(steps, (std::uint64_t{1} << n) - 1) << name(p);
    EXPECT_EQ(ones, std::uint64_t{1} << (n - 1)) << name(p);
  }
}

// PRBS31 with the 64-bit path: 2^31 - 1 is prime, so returning to the seed after exactly that
// many bits (and not after one) proves the period.
TEST(PrbsGenerator, Prbs31Period) {
  const std::uint32_t seed = 0x3a5c7e91u & 0x7fffffffu;
  PrbsGenerator g(Pattern::kPrbs31, seed);
  const std::uint64_t per = npo::fw::prbs::period(Pattern::kPrbs31);
  ASSERT_EQ(per, 2147483647u);
  std::uint64_t ones = 0;
  std::uint64_t left = per;
  for (; left >= 64; left -= 64) ones += static_cast<std::uint64_t>(std::popcount(g.next_bits(64)));
  ones += static_cast<std::uint64_t>(std::popcount(g.next_bits(static_cast<unsigned>(left))));
  EXPECT_EQ(g.state(), seed);
  EXPECT_EQ(ones, std::uint64_t{1} << 30);
  (void)g.next_bit();
  EXPECT_NE(g.state(), seed);
}

TEST(PrbsGenerator, ReservedPatternTransmitsNothing) {
  for (unsigned v = 7; v < 16; ++v) {
    const Pattern p{static_cast<std::uint8_t>(v)};
    EXPECT_FALSE(npo::fw::prbs::is_supported(p));
    PrbsGenerator g(p, PrbsGenerator::kAllOnes, {.inversion = Inversion::kAlways});
    EXPECT_EQ(g.next_bits(64), 0u);
    const auto bytes = fill_bytes(g, 13);
    EXPECT_TRUE(std::all_of(bytes.begin(), bytes.end(), [](std::byte b) { return b == std::byte{0}; }));
  }
}

TEST(PrbsGenerator, UsableInConstantExpressions) {
  constexpr auto first = [] {
    PrbsGenerator g(Pattern::kPrbs13);
    std::array<std::byte, 8> out{};
    g.fill(out);
    return out;
  }();
  // prbs_reference_sequences.txt PRBS13 row A MSBfirst: ff fb 6d e7 9a b1 fe 1b.
  static_assert(first[0] == std::byte{0xff} && first[1] == std::byte{0xfb} && first[7] == std::byte{0x1b});
  constexpr auto prbs7 = [] {
    PrbsGenerator g(Pattern::kPrbs7);
    g.discard(127);
    return g.state();
  }();
  static_assert(prbs7 == 0x7f);
  EXPECT_EQ(first[2], std::byte{0x6d});
}

// ---- Checker -------------------------------------------------------------------------------

/// Bit-serial model of the checker rule (spec registers.md §7.4 / prbs.hpp "Checker rule"),
/// written for clarity, not speed: the oracle for the word-level implementation.
class ModelChecker {
 public:
  ModelChecker(Pattern p, CheckerConfig c) : poly_(npo::fw::prbs::polynomial(p)), cfg_(c) {}

  void bit(unsigned b) {
    const unsigned n = poly_.degree;
    if (!locked_) {
      if (hist_.size() == n) run_ = predict(hist_) == b ? run_ + 1 : 0;
      hist_.push_back(static_cast<std::uint8_t>(b));
      if (hist_.size() > n) hist_.pop_front();
      if (std::all_of(hist_.begin(), hist_.end(), [](std::uint8_t v) { return v == 0; })) run_ = 0;
      if (hist_.size() == n && run_ >= cfg_.lock_bits) {
        locked_ = true;
        ++locks;
        ref_ = hist_;
        window_.clear();
        window_errors_ = 0;
      }
      return;
    }
    const unsigned expected = predict(ref_);
    ref_.push_back(static_cast<std::uint8_t>(expected));
    ref_.pop_front();
    const unsigned e = expected != b ? 1 : 0;
    ++bits;
    errors += e;
    window_.push_back(static_cast<std::uint8_t>(e));
    window_errors_ += e;
    if (window_.size() > cfg_.window_bits) {
      window_errors_ -= window_.front();
      window_.pop_front();
    }
    if (window_errors_ > cfg_.max_window_errors) {
      locked_ = false;
      ++losses;
      hist_.clear();
      run_ = 0;
    }
  }
  [[nodiscard]] bool locked() const { return locked_; }

  std::uint64_t bits = 0;
  std::uint64_t errors = 0;
  std::uint64_t locks = 0;
  std::uint64_t losses = 0;

 private:
  // s[t] = XOR of s[t - e]; the deque holds s[t-n] .. s[t-1].
  [[nodiscard]] unsigned predict(const std::deque<std::uint8_t>& h) const {
    unsigned v = 0;
    const unsigned n = poly_.degree;
    for (unsigned e = 1; e <= n; ++e) {
      if ((poly_.taps >> (e - 1)) & 1u) v ^= h[n - e];
    }
    return v;
  }

  npo::fw::prbs::Polynomial poly_;
  CheckerConfig cfg_;
  std::deque<std::uint8_t> hist_;
  std::deque<std::uint8_t> ref_;
  std::deque<std::uint8_t> window_;
  unsigned run_ = 0;
  unsigned window_errors_ = 0;
  bool locked_ = false;
};

struct Snapshot {
  std::uint64_t bits, errors, locks, losses;
  bool locked;
  bool operator==(const Snapshot&) const = default;
};
Snapshot snap(const PrbsChecker& c) { return {c.bits(), c.errors(), c.lock_count(), c.loss_count(), c.locked()}; }
Snapshot snap(const ModelChecker& m) { return {m.bits, m.errors, m.locks, m.losses, m.locked()}; }
std::ostream& operator<<(std::ostream& os, const Snapshot& s) {
  return os << "{bits " << s.bits << ", errors " << s.errors << ", locks " << s.locks << ", losses " << s.losses
            << ", locked " << s.locked << "}";
}

/// The transmitted stream: `count` bits of `p` with `o`'s polarity, from a random phase.
std::vector<std::uint8_t> stream(Pattern p, Options o, std::size_t count, std::uint32_t seed) {
  PrbsGenerator g(p, seed, o);
  return generate_bits(g, count);
}

void feed_bits(PrbsChecker& c, const std::vector<std::uint8_t>& bits, BitOrder order) { c.feed(pack(bits, order)); }

TEST(PrbsChecker, LocksOnCleanStreamAfterNPlusLockBits) {
  constexpr std::size_t kBits = 8 * 4096;
  std::mt19937 rng(11);
  for (Pattern p : kPatterns) {
    for (Options o : {Options{}, Options{Inversion::kO150}, Options{Inversion::kAlways, BitOrder::kLsbFirst}}) {
      PrbsChecker c(p, o);
      EXPECT_FALSE(c.locked());
      feed_bits(c, stream(p, o, kBits, rng()), o.bit_order);
      EXPECT_TRUE(c.locked()) << name(p);
      EXPECT_EQ(c.bits(), kBits - degree(p) - 128) << name(p);
      EXPECT_EQ(c.errors(), 0u) << name(p);
      EXPECT_EQ(c.lock_count(), 1u);
      EXPECT_EQ(c.loss_count(), 0u);
    }
  }
}

TEST(PrbsChecker, LocksOnTheExactBit) {
  // n + 127 bits: one short of lock; the next bit locks, and the one after is the first counted.
  for (Pattern p : kPatterns) {
    const unsigned n = degree(p);
    const auto bits = stream(p, {}, n + 129, 0xabcdefu);
    PrbsChecker c(p);
    for (std::size_t i = 0; i < n + 127; ++i) c.feed_bits(bits[i], 1);
    EXPECT_FALSE(c.locked()) << name(p);
    c.feed_bits(bits[n + 127], 1);
    EXPECT_TRUE(c.locked()) << name(p);
    EXPECT_EQ(c.bits(), 0u);
    c.feed_bits(bits[n + 128] ^ 1u, 1);
    EXPECT_EQ(c.bits(), 1u);
    EXPECT_EQ(c.errors(), 1u);
  }
}

TEST(PrbsChecker, CountsExactlyTheInjectedErrors) {
  constexpr std::size_t kBits = 8 * 16384;
  std::mt19937 rng(12);
  for (Pattern p : kPatterns) {
    const Options o{Inversion::kO150};
    auto bits = stream(p, o, kBits, rng());
    // 37 isolated flips at known positions after the lock point, plus a burst of 10.
    std::set<std::size_t> flips;
    while (flips.size() < 37) flips.insert(400 + rng() % (kBits - 400));
    for (std::size_t i : flips) bits[i] ^= 1u;
    for (std::size_t i = 5000; i < 5010; ++i) bits[i] ^= static_cast<std::uint8_t>(flips.contains(i) ? 0 : 1);
    const std::size_t expected = 37 + 10 -
                                 static_cast<std::size_t>(std::count_if(flips.begin(), flips.end(),
                                                                        [](auto i) { return i >= 5000 && i < 5010; }));
    PrbsChecker c(p, o);
    feed_bits(c, bits, o.bit_order);
    EXPECT_TRUE(c.locked()) << name(p);
    EXPECT_EQ(c.errors(), expected) << name(p);
    EXPECT_EQ(c.bits(), kBits - degree(p) - 128) << name(p);
    EXPECT_EQ(c.loss_count(), 0u) << name(p);
  }
}

TEST(PrbsChecker, ErrorWhileHuntingDelaysLockAndIsNotCounted) {
  // A flipped bit q is mispredicted at q and at q + e for every term x^e, the last at q + n; the
  // lock then needs 128 more good predictions: lock on bit q + n + 128.
  constexpr std::size_t kBits = 8 * 1024;
  for (Pattern p : kPatterns) {
    const unsigned n = degree(p);
    auto bits = stream(p, {}, kBits, 0x13579bdu);
    const std::size_t q = 100;
    bits[q] ^= 1u;
    PrbsChecker c(p);
    feed_bits(c, bits, BitOrder::kMsbFirst);
    EXPECT_TRUE(c.locked()) << name(p);
    EXPECT_EQ(c.errors(), 0u) << name(p);
    EXPECT_EQ(c.bits(), kBits - (q + n + 128 + 1)) << name(p);
  }
}

TEST(PrbsChecker, LosesLockOnBurstAndRelocks) {
  // PRBS31 locks on bit 158. A burst inverts bits [B, E): the 513th error (bit B + 512) takes
  // the window over 512 and drops lock. Hunting restarts at B + 513; inside the burst every
  // prediction fails (three inverted terms), after it bits E+28 .. E+30 still see one inverted
  // term (x^31 only), so the last misprediction is E + 30 and lock returns on E + 30 + 128.
  constexpr std::size_t kBits = 8 * 8192;
  constexpr std::size_t kB = 20000;
  constexpr std::size_t kE = kB + 600;
  auto bits = stream(Pattern::kPrbs31, {}, kBits, 0x7eadbeefu);
  for (std::size_t i = kB; i < kE; ++i) bits[i] ^= 1u;
  PrbsChecker c(Pattern::kPrbs31);
  feed_bits(c, bits, BitOrder::kMsbFirst);
  EXPECT_EQ(c.errors(), 513u);
  EXPECT_EQ(c.loss_count(), 1u);
  EXPECT_EQ(c.lock_count(), 2u);
  EXPECT_TRUE(c.locked());
  const std::size_t first_lock = 31 + 127;
  const std::size_t relock = kE + 30 + 128;
  EXPECT_EQ(c.bits(), (kB + 512 - first_lock) + (kBits - 1 - relock));
}

TEST(PrbsChecker, RelocksAfterSlip) {
  for (Pattern p : kPatterns) {
    for (int slip : {-1, +1, -5}) {  // bits dropped (<0) or inserted (>0)
      constexpr std::size_t kBits = 8 * 8192;
      constexpr std::size_t kAt = 10000;
      auto bits = stream(p, {}, kBits + 64, 0x2468aceu);
      if (slip < 0) {
        bits.erase(bits.begin() + kAt, bits.begin() + kAt - slip);
      } else {
        bits.insert(bits.begin() + kAt, static_cast<std::size_t>(slip), std::uint8_t{1});
      }
      bits.resize(kBits);  // whole bytes: no padding bits, which would be one more slip
      PrbsChecker c(p);
      feed_bits(c, bits, BitOrder::kMsbFirst);
      EXPECT_TRUE(c.locked()) << name(p) << " slip " << slip;
      EXPECT_EQ(c.loss_count(), 1u) << name(p) << " slip " << slip;
      EXPECT_EQ(c.lock_count(), 2u) << name(p) << " slip " << slip;
      EXPECT_GE(c.errors(), 513u) << name(p) << " slip " << slip;
      // Once re-locked, clean bits add no errors and are all compared.
      const auto before = snap(c);
      PrbsGenerator tail(p, 0x2468aceu);
      tail.discard(static_cast<std::uint64_t>(static_cast<std::int64_t>(kBits) - slip));
      std::vector<std::byte> more(1024);
      tail.fill(more);
      c.feed(more);
      EXPECT_EQ(c.errors(), before.errors) << name(p);
      EXPECT_EQ(c.bits(), before.bits + 8 * 1024) << name(p);
      // And the exact figures agree with the bit-serial model.
      ModelChecker m(p, {});
      for (auto b : bits) m.bit(b);
      for (auto b : unpack(more, BitOrder::kMsbFirst)) m.bit(b);
      EXPECT_EQ(snap(c), snap(m)) << name(p) << " slip " << slip;
    }
  }
}

TEST(PrbsChecker, NoLockOnRandomData) {
  std::mt19937_64 rng(13);
  std::vector<std::byte> data(1 << 20);
  for (auto& b : data) b = static_cast<std::byte>(rng());
  for (Pattern p : kPatterns) {
    PrbsChecker c(p);
    c.feed(data);
    EXPECT_FALSE(c.locked()) << name(p);
    EXPECT_EQ(c.lock_count(), 0u) << name(p);
    EXPECT_EQ(c.bits(), 0u) << name(p);
    EXPECT_EQ(c.errors(), 0u) << name(p);
  }
}

TEST(PrbsChecker, NoLockOnConstantOrWrongStreams) {
  const std::vector<std::byte> zeros(4096, std::byte{0});
  const std::vector<std::byte> ones(4096, std::byte{0xff});
  for (Pattern p : kPatterns) {
    for (Options o : {Options{}, Options{Inversion::kAlways}}) {
      PrbsChecker c(p, o);
      c.feed(zeros);
      c.feed(ones);
      EXPECT_EQ(c.lock_count(), 0u) << name(p);
    }
    // The other polarity, and every other pattern.
    PrbsGenerator inv(p, 0x1111u, {.inversion = Inversion::kAlways});
    std::vector<std::byte> data(8192);
    inv.fill(data);
    PrbsChecker wrong_polarity(p);
    wrong_polarity.feed(data);
    EXPECT_EQ(wrong_polarity.lock_count(), 0u) << name(p);
    for (Pattern other : kPatterns) {
      if (other == p) continue;
      PrbsChecker wrong_pattern(other, {.inversion = Inversion::kAlways});
      wrong_pattern.feed(data);
      EXPECT_EQ(wrong_pattern.lock_count(), 0u) << name(p) << " checked as " << name(other);
    }
  }
  PrbsChecker reserved(Pattern{9});
  reserved.feed(zeros);
  EXPECT_FALSE(reserved.locked());
}

TEST(PrbsChecker, ClearCountersKeepsLockResetDoesNot) {
  PrbsGenerator g(Pattern::kPrbs23, 77);
  std::vector<std::byte> data(4096);
  g.fill(data);
  PrbsChecker c(Pattern::kPrbs23);
  c.feed(data);
  ASSERT_TRUE(c.locked());
  c.clear_counters();
  EXPECT_EQ(c.bits(), 0u);
  EXPECT_TRUE(c.locked());
  g.fill(data);
  c.feed(data);
  EXPECT_EQ(c.bits(), 8u * 4096);
  c.reset();
  EXPECT_FALSE(c.locked());
  EXPECT_EQ(c.bits(), 0u);
  EXPECT_EQ(c.lock_count(), 0u);
  g.fill(data);
  c.feed(data);
  EXPECT_EQ(c.bits(), 8u * 4096 - 23 - 128);
}

TEST(PrbsChecker, BitErrorRatioIsCountedExactly) {
  std::mt19937_64 rng(14);
  std::bernoulli_distribution flip(1e-3);
  for (Pattern p : {Pattern::kPrbs9, Pattern::kPrbs13, Pattern::kPrbs31}) {
    auto bits = stream(p, {}, 1 << 21, 4242);
    std::uint64_t injected = 0;
    for (std::size_t i = 1000; i < bits.size(); ++i) {
      if (flip(rng)) {
        bits[i] ^= 1u;
        ++injected;
      }
    }
    PrbsChecker c(p);
    feed_bits(c, bits, BitOrder::kMsbFirst);
    EXPECT_EQ(c.errors(), injected) << name(p);
    EXPECT_EQ(c.bits(), bits.size() - degree(p) - 128) << name(p);
    EXPECT_NEAR(static_cast<double>(c.errors()) / static_cast<double>(c.bits()), 1e-3, 1e-4);
  }
}

// ---- Chunking and the bit-serial model -----------------------------------------------------

/// A hostile stream: clean stretches, BER, bursts, slips, random and constant runs.
std::vector<std::uint8_t> scenario(Pattern p, Options o, std::mt19937_64& rng, std::size_t target) {
  PrbsGenerator tx(p, static_cast<std::uint32_t>(rng()), o);
  std::vector<std::uint8_t> out;
  while (out.size() < target) {
    const auto len = static_cast<std::size_t>(rng() % 3000 + 1);
    switch (rng() % 8) {
      case 0:
      case 1:
      case 2: {
        const auto b = generate_bits(tx, len);
        out.insert(out.end(), b.begin(), b.end());
        break;
      }
      case 3: {  // BER 1e-2 or 0.3
        const double ber = rng() % 2 ? 1e-2 : 0.3;
        std::bernoulli_distribution flip(ber);
        for (auto b : generate_bits(tx, len)) out.push_back(static_cast<std::uint8_t>(b ^ (flip(rng) ? 1 : 0)));
        break;
      }
      case 4:  // burst
        for (auto b : generate_bits(tx, len % 700 + 1)) out.push_back(static_cast<std::uint8_t>(b ^ 1u));
        break;
      case 5:  // slip: drop bits
        tx.discard(rng() % 3 + 1);
        break;
      case 6:  // random bits
        for (std::size_t i = 0; i < len; ++i) out.push_back(static_cast<std::uint8_t>(rng() & 1));
        break;
      default:  // constant run
        out.insert(out.end(), len % 300 + 1, static_cast<std::uint8_t>(rng() & 1));
        break;
    }
  }
  out.resize(target);
  return out;
}

TEST(PrbsChecker, ChunkSizeDoesNotMatter) {
  std::mt19937_64 rng(15);
  for (Pattern p : kPatterns) {
    const Options o{Inversion::kO150, p == Pattern::kPrbs13 ? BitOrder::kLsbFirst : BitOrder::kMsbFirst};
    const auto bits = scenario(p, o, rng, 8 * 40000);
    const auto bytes = pack(bits, o.bit_order);
    PrbsChecker whole(p, o);
    whole.feed(bytes);
    EXPECT_GT(whole.lock_count(), 1u) << name(p);  // the scenario exercises loss and re-lock
    // Odd-sized byte chunks.
    PrbsChecker chunked(p, o);
    std::size_t at = 0;
    for (std::size_t len = 1; at < bytes.size(); len = len % 13 + 2) {
      const std::size_t n = std::min(len, bytes.size() - at);
      chunked.feed(std::span<const std::byte>(bytes).subspan(at, n));
      at += n;
    }
    EXPECT_EQ(snap(chunked), snap(whole)) << name(p);
    // Bit groups of 1..64 (feed_bits takes the first bit most significant; polarity applies,
    // byte order does not).
    PrbsChecker grouped(p, o);
    for (std::size_t i = 0; i < bits.size();) {
      const auto k = static_cast<unsigned>(std::min<std::size_t>(rng() % 64 + 1, bits.size() - i));
      std::uint64_t v = 0;
      for (unsigned j = 0; j < k; ++j) v = (v << 1) | bits[i + j];
      grouped.feed_bits(v, k);
      i += k;
    }
    EXPECT_EQ(snap(grouped), snap(whole)) << name(p);
  }
}

TEST(PrbsChecker, MatchesBitSerialModel) {
  std::mt19937_64 rng(16);
  const std::vector<CheckerConfig> configs = {{},
                                              {.lock_bits = 8, .window_bits = 100, .max_window_errors = 10},
                                              {.lock_bits = 40, .window_bits = 777, .max_window_errors = 3}};
  for (const CheckerConfig& cfg : configs) {
    for (Pattern p : kPatterns) {
      const auto bits = scenario(p, {}, rng, 60000);
      PrbsChecker c(p, {}, cfg);
      ModelChecker m(p, cfg);
      // Compare after every chunk, not only at the end.
      for (std::size_t i = 0; i < bits.size();) {
        const auto k = static_cast<unsigned>(std::min<std::size_t>(rng() % 64 + 1, bits.size() - i));
        std::uint64_t v = 0;
        for (unsigned j = 0; j < k; ++j) {
          v = (v << 1) | bits[i + j];
          m.bit(bits[i + j]);
        }
        c.feed_bits(v, k);
        i += k;
        ASSERT_EQ(snap(c), snap(m)) << name(p) << " lock_bits " << cfg.lock_bits << " at bit " << i;
      }
      EXPECT_GT(c.lock_count(), 0u);
    }
  }
}

}  // namespace
