// SPDX-License-Identifier: Apache-2.0
// Emulator scale: time and resident memory to bring up N emulated cards (1 MiB HBM each),
// both the bare model (Emulator::create) and a full System::open, which probes every card
// through config space, BAR0 and two firmware mailbox commands.
// Issue target: 1024 cards in <= 2 s and <= 2 GiB RSS on a 2-core machine.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>

#include <benchmark/benchmark.h>

#include "npo/emu/emulator.hpp"
#include "npo/hal/system.hpp"

namespace {

/// Resident set size of this process, bytes (/proc/self/statm field 2 x page size).
double rss_bytes() {
  std::ifstream in("/proc/self/statm");
  long size = 0, resident = 0;
  in >> size >> resident;
  return static_cast<double>(resident) * static_cast<double>(::sysconf(_SC_PAGESIZE));
}

// Google Benchmark re-runs a benchmark with growing iteration counts and reports the last
// run; freed memory is reused after the first iteration, so the RSS growth is kept per
// process (the first bring-up is the true one) and reported on every run.
double& max_rss(const std::string& key) {
  static std::map<std::string, double> m;
  return m[key];
}

void Create(benchmark::State& state) {
  const auto n = static_cast<unsigned>(state.range(0));
  double& rss_delta = max_rss("create" + std::to_string(n));
  for (auto _ : state) {
    const double before = rss_bytes();
    npo::emu::SystemConfig c;
    c.name = std::to_string(n);
    c.num_cards = n;
    c.cables.clear();
    c.card.hbm_bytes = 1u << 20;
    c.clock = npo::emu::ClockMode::kVirtual;
    auto emu = npo::emu::Emulator::create(c);
    if (!emu) {
      state.SkipWithError(emu.error().to_string().c_str());
      return;
    }
    rss_delta = std::max(rss_delta, rss_bytes() - before);  // first iteration: later ones reuse freed memory
    benchmark::DoNotOptimize(emu->get());
    state.PauseTiming();
    emu->reset();
    state.ResumeTiming();
  }
  state.counters["cards"] = n;
  state.counters["rss_MiB"] = rss_delta / (1 << 20);
  state.counters["rss_KiB_per_card"] = rss_delta / 1024.0 / n;
}

void SystemOpen(benchmark::State& state) {
  const auto n = state.range(0);
  const std::string uri = "emu:" + std::to_string(n) + "?hbm=1M&clock=virtual";
  double& rss_delta = max_rss("open" + std::to_string(n));
  for (auto _ : state) {
    const double before = rss_bytes();
    auto sys = npo::System::open(uri);
    if (!sys) {
      state.SkipWithError(sys.error().to_string().c_str());
      return;
    }
    rss_delta = std::max(rss_delta, rss_bytes() - before);  // first iteration: later ones reuse freed memory
    benchmark::DoNotOptimize(sys->get());
    state.PauseTiming();
    sys->reset();
    state.ResumeTiming();
  }
  state.counters["cards"] = static_cast<double>(n);
  state.counters["rss_MiB"] = rss_delta / (1 << 20);
}

BENCHMARK(Create)->Arg(8)->Arg(64)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(SystemOpen)->Arg(8)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
