// SPDX-License-Identifier: Apache-2.0
// PRBS generator and checker throughput (firmware-iface/include/npo/fw/prbs.hpp), in Gbit/s
// beside a memcpy of the same number of bytes in the same run. Target: a PRBS31 generator
// produces >= 1 Gbit/s. Figures are read from the output ("Gbit/s" counter), never asserted.
#include <cstddef>
#include <cstring>
#include <random>
#include <vector>

#include <benchmark/benchmark.h>

#include "npo/fw/prbs.hpp"

namespace {

using npo::fw::prbs::BitOrder;
using npo::fw::prbs::Inversion;
using npo::fw::prbs::Options;
using npo::fw::prbs::Pattern;
using npo::fw::prbs::PrbsChecker;
using npo::fw::prbs::PrbsGenerator;

constexpr std::size_t kBytes = 64 * 1024;

void report(benchmark::State& state, std::size_t bytes) {
  const auto total = static_cast<double>(bytes) * static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<std::int64_t>(total));
  state.counters["Gbit/s"] = benchmark::Counter(total * 8 / 1e9, benchmark::Counter::kIsRate);
}

// Baseline: memcpy of the same buffer size.
void BM_Memcpy(benchmark::State& state) {
  std::vector<std::byte> src(kBytes, std::byte{0x5a});
  std::vector<std::byte> dst(kBytes);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), kBytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  report(state, kBytes);
}
BENCHMARK(BM_Memcpy);

// Generator: fill() of a 64 KiB buffer. Arg 0: pattern, arg 1: 1 = O.150 inversion + LSB-first.
void BM_Generate(benchmark::State& state) {
  const auto p = static_cast<Pattern>(state.range(0));
  const Options o = state.range(1) != 0 ? Options{Inversion::kO150, BitOrder::kLsbFirst} : Options{};
  PrbsGenerator g(p, 0x1234567u, o);
  std::vector<std::byte> out(kBytes);
  for (auto _ : state) {
    g.fill(out);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetLabel(std::string(npo::fw::prbs::polynomial(p).name));
  report(state, kBytes);
}
BENCHMARK(BM_Generate)
    ->Args({static_cast<int>(Pattern::kPrbs7), 0})
    ->Args({static_cast<int>(Pattern::kPrbs13), 0})
    ->Args({static_cast<int>(Pattern::kPrbs23), 0})
    ->Args({static_cast<int>(Pattern::kPrbs31), 0})
    ->Args({static_cast<int>(Pattern::kPrbs31), 1});

// The one-bit-at-a-time path, for scale (8 * 4096 bits per iteration).
void BM_GenerateBitSerial(benchmark::State& state) {
  PrbsGenerator g(Pattern::kPrbs31, 0x1234567u);
  constexpr std::size_t kBits = 8 * 4096;
  for (auto _ : state) {
    unsigned acc = 0;
    for (std::size_t i = 0; i < kBits; ++i) acc += g.next_bit();
    benchmark::DoNotOptimize(acc);
  }
  report(state, kBits / 8);
}
BENCHMARK(BM_GenerateBitSerial);

// Checker, locked: a pre-generated stream fed 64 KiB at a time. The buffer holds a whole number
// of periods where that is possible (PRBS7: 127 bytes = 8 periods, PRBS13: 8191 bytes, PRBS15:
// 32767 bytes), so wrapping around it keeps the stream continuous; PRBS31 uses a 16 MiB buffer and
// re-locks once per pass (reported as the "relocks" counter).
void BM_CheckLocked(benchmark::State& state) {
  const auto p = static_cast<Pattern>(state.range(0));
  const std::uint64_t per = npo::fw::prbs::period(p);
  std::size_t buf_bytes = 16u << 20;
  if (per < (1u << 16)) buf_bytes = static_cast<std::size_t>(per) * ((kBytes + per - 1) / per);
  std::vector<std::byte> stream(buf_bytes + kBytes);
  PrbsGenerator g(p, 0x1234567u);
  g.fill(std::span<std::byte>(stream).first(buf_bytes));
  std::memcpy(stream.data() + buf_bytes, stream.data(), kBytes);  // wrap-around tail
  PrbsChecker c(p);
  c.feed(std::span<const std::byte>(stream).first(kBytes));
  std::size_t at = kBytes % buf_bytes;
  for (auto _ : state) {
    c.feed(std::span<const std::byte>(stream).subspan(at, kBytes));
    at = (at + kBytes) % buf_bytes;
  }
  benchmark::DoNotOptimize(c.errors());
  state.SetLabel(std::string(npo::fw::prbs::polynomial(p).name) + (c.locked() ? " locked" : " NOT LOCKED"));
  state.counters["relocks"] = static_cast<double>(c.loss_count());
  report(state, kBytes);
}
BENCHMARK(BM_CheckLocked)
    ->Arg(static_cast<int>(Pattern::kPrbs7))
    ->Arg(static_cast<int>(Pattern::kPrbs13))
    ->Arg(static_cast<int>(Pattern::kPrbs15))
    ->Arg(static_cast<int>(Pattern::kPrbs31));

// Checker, hunting: random bytes, never locks.
void BM_CheckHunting(benchmark::State& state) {
  std::vector<std::byte> data(kBytes);
  std::mt19937_64 rng(1);
  for (auto& b : data) b = static_cast<std::byte>(rng());
  PrbsChecker c(Pattern::kPrbs31);
  for (auto _ : state) c.feed(data);
  benchmark::DoNotOptimize(c.lock_count());
  report(state, kBytes);
}
BENCHMARK(BM_CheckHunting);

// Generator feeding checker (one lane end to end, 64 KiB per iteration).
void BM_GenerateAndCheck(benchmark::State& state) {
  PrbsGenerator g(Pattern::kPrbs31, 0x7654321u);
  PrbsChecker c(Pattern::kPrbs31);
  std::vector<std::byte> buf(kBytes);
  for (auto _ : state) {
    g.fill(buf);
    c.feed(buf);
  }
  benchmark::DoNotOptimize(c.errors());
  report(state, kBytes);
}
BENCHMARK(BM_GenerateAndCheck);

}  // namespace

BENCHMARK_MAIN();
