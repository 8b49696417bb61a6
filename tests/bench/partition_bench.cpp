// SPDX-License-Identifier: Apache-2.0
// Partition manager on a 1024-card pool (8 ports, 8 OCS of radix 1024): create a 64-card
// torus (p50/p99 over the iterations), carve 1024 into 16 x 64, a spare swap, rebuild from a
// journal, one create on an emulated pool, and the composability experiment (docs/partitions.md).
// In-memory switches (InMemoryOcs) measure the manager's algorithm and journal; the emulated
// figure adds the emulator's switch and link training on the virtual clock.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include <benchmark/benchmark.h>

#include "npo/emu/emulator.hpp"
#include "npo/emu/ocs.hpp"
#include "npo/hal/backend/registry.hpp"
#include "npo/hal/partition.hpp"
#include "npo/hal/port.hpp"
#include "npo/hal/system.hpp"
#include "npo/hal/topology_gen.hpp"

namespace {

using namespace npo;
using Clk = std::chrono::steady_clock;

struct MemPool {
  explicit MemPool(unsigned cards = 1024, unsigned ports = 8) {
    spec = *generate_fabric(FabricKind::kPool, cards, {.pool_ports = ports});
    for (const auto& s : spec.switches) owned.push_back(std::make_unique<InMemoryOcs>(s.name, s.ports));
    for (auto& o : owned) switches.push_back(o.get());
  }
  FabricSpec spec;
  std::vector<std::unique_ptr<InMemoryOcs>> owned;
  std::vector<OpticalCircuitSwitch*> switches;
};

struct TempDir {
  TempDir() {
    char t[] = "/tmp/npo-partition-bench-XXXXXX";
    dir = ::mkdtemp(t);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  std::filesystem::path dir;
};

double ns_of(Clk::time_point t0) { return std::chrono::duration<double, std::nano>(Clk::now() - t0).count(); }

/// Runs `op` once, appends its wall time (ns) to `lat` and returns what it returned: the one
/// timing loop body of the latency benchmarks below.
template <class Op>
auto timed(std::vector<double>& lat, Op&& op) {
  const auto t0 = Clk::now();
  auto r = std::forward<Op>(op)();
  lat.push_back(ns_of(t0));
  return r;
}

void percentiles(benchmark::State& st, std::vector<double> v) {
  if (v.empty()) return;
  std::sort(v.begin(), v.end());
  st.counters["p50_us"] = v[v.size() / 2] / 1e3;
  st.counters["p99_us"] = v[std::min(v.size() - 1, v.size() * 99 / 100)] / 1e3;
}

/// Create (and, untimed, destroy) a torus2d:8x8 on the 1024-card pool; arg 1: with an fsync'd journal.
void BM_Create64(benchmark::State& st) {
  MemPool pool;
  TempDir td;
  PartitionOptions o;
  if (st.range(0)) o.journal = td.dir / "j.jsonl";
  auto m = std::move(*PartitionManager::open(pool.spec, pool.switches, o));
  std::vector<double> lat;
  for (auto _ : st) {
    auto r = timed(lat, [&] { return m->create("job", "torus2d:8x8"); });
    if (!r) st.SkipWithError(r.error().to_string().c_str());
    st.PauseTiming();
    (void)m->destroy("job");
    st.ResumeTiming();
  }
  percentiles(st, lat);
}
BENCHMARK(BM_Create64)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

/// Carve the 1024-card pool into 16 torus2d:8x8 partitions (destroyed untimed).
void BM_Carve16x64(benchmark::State& st) {
  MemPool pool;
  TempDir td;
  PartitionOptions o;
  if (st.range(0)) o.journal = td.dir / "j.jsonl";
  auto m = std::move(*PartitionManager::open(pool.spec, pool.switches, o));
  for (auto _ : st) {
    for (int i = 0; i < 16; ++i) {
      if (!m->create("job" + std::to_string(i), "torus2d:8x8")) st.SkipWithError("create failed");
    }
    st.PauseTiming();
    for (int i = 0; i < 16; ++i) (void)m->destroy("job" + std::to_string(i));
    st.ResumeTiming();
  }
}
BENCHMARK(BM_Carve16x64)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

/// Spare swap in a pool carved into 15 x 64 with 64 free cards (16 marked spare).
void BM_SpareSwap(benchmark::State& st) {
  MemPool pool;
  TempDir td;
  PartitionOptions o;
  if (st.range(0)) o.journal = td.dir / "j.jsonl";
  auto m = std::move(*PartitionManager::open(pool.spec, pool.switches, o));
  for (int i = 0; i < 15; ++i) (void)m->create("job" + std::to_string(i), "torus2d:8x8");
  for (std::uint32_t c = 1008; c < 1024; ++c) (void)m->set_health(c, CardHealth::kSpare);
  std::mt19937 rng(7);
  std::vector<double> lat;
  for (auto _ : st) {
    st.PauseTiming();
    std::uint32_t victim = 0;
    do victim = rng() % 1024;
    while (!m->owner(victim));
    (void)m->set_health(victim, CardHealth::kFailed);
    st.ResumeTiming();
    auto r = timed(lat, [&] { return m->swap(victim); });
    if (!r) st.SkipWithError(r.error().to_string().c_str());
    st.PauseTiming();
    (void)m->set_health(victim, CardHealth::kHealthy);  // repaired: back to the free pool
    st.ResumeTiming();
  }
  percentiles(st, lat);
}
BENCHMARK(BM_SpareSwap)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

/// open(): rebuild the table of a 1024-card pool from a journal of 16 creates and 200 swaps
/// plus the 8 switches' cross-connects.
void BM_Rebuild1024(benchmark::State& st) {
  MemPool pool;
  TempDir td;
  PartitionOptions o;
  o.journal = td.dir / "j.jsonl";
  {
    auto m = std::move(*PartitionManager::open(pool.spec, pool.switches, o));
    for (int i = 0; i < 15; ++i) (void)m->create("job" + std::to_string(i), "torus2d:8x8");
    std::mt19937 rng(3);
    for (int i = 0; i < 200; ++i) {
      std::uint32_t v = 0;
      do v = rng() % 1024;
      while (!m->owner(v));
      (void)m->set_health(v, CardHealth::kFailed);
      (void)m->swap(v);
      (void)m->set_health(v, CardHealth::kHealthy);
    }
  }
  std::uint64_t lines = 0;
  for (auto _ : st) {
    auto m = PartitionManager::open(pool.spec, pool.switches, o);
    if (!m)
      st.SkipWithError(m.error().to_string().c_str());
    else
      lines = (*m)->rebuild_report().records;
  }
  st.counters["journal_lines"] = static_cast<double>(lines);
}
BENCHMARK(BM_Rebuild1024)->Unit(benchmark::kMillisecond);

/// Create torus2d:8x8 on an emulated pool of range(0) cards (virtual clock), waiting for its
/// 256 links to train Up; destroy untimed. Reports emulated link-up time too.
void BM_Create64Emulated(benchmark::State& st) {
  const auto cards = static_cast<unsigned>(st.range(0));
  auto spec = *generate_fabric(FabricKind::kPool, cards, {.pool_ports = 4});
  auto cfg = *emu::system_config_from_spec(spec);
  cfg.clock = emu::ClockMode::kVirtual;
  cfg.card.hbm_bytes = 16u << 20;
  for (auto& pc : cfg.per_card) pc.hbm_bytes = 16u << 20;
  auto e = std::move(*emu::Emulator::create(cfg));
  backend::Registry reg;
  (void)reg.add("emu", {"emu:bench"},
                [e](std::string_view, std::string_view uri) -> Result<std::unique_ptr<backend::Backend>> {
                  return e->make_backend(std::string(uri));
                });
  SystemOptions so;
  so.registry = &reg;
  auto sys = std::move(*System::open("emu:bench", so));
  for (std::size_t c = 0; c < sys->device_count(); ++c) {
    for (unsigned p = 0; p < 4; ++p) (void)enable_port(sys->device(c), p);
  }
  auto ocs = emu::EmulatedOcs::open_all(e);
  std::vector<OpticalCircuitSwitch*> sw;
  for (auto& x : ocs) sw.push_back(x.get());
  PartitionOptions o;
  o.system = sys.get();
  auto m = std::move(*PartitionManager::open(spec, sw, o));
  double up_ns = 0, switch_ns = 0;
  std::vector<double> lat;
  for (auto _ : st) {
    auto r = timed(lat, [&] { return m->create("job", "torus2d:8x8"); });
    if (!r) {
      st.SkipWithError(r.error().to_string().c_str());
      break;
    }
    up_ns = static_cast<double>(r->links_up_ns);
    switch_ns = static_cast<double>(r->switch_ns);
    st.PauseTiming();
    (void)m->destroy("job");
    (void)e->advance(2'000'000'000);  // the dark ports settle before the next create
    st.ResumeTiming();
  }
  percentiles(st, lat);
  st.counters["emulated_link_up_ms"] = up_ns / 1e6;
  st.counters["switch_ops_ms"] = switch_ns / 1e6;
}
BENCHMARK(BM_Create64Emulated)->Arg(256)->Arg(1024)->Iterations(5)->Unit(benchmark::kMillisecond);

/// Composability: with k random failed cards among 1024, can a 1008-card job (torus2d:28x36,
/// 4 ports) be composed? Static 32x32 torus (no switches): its only torus holding 1008 cards is
/// the full 32x32 ring structure (no 28x36 fits a 32x32 grid, and a torus ring cannot skip a
/// card without a switch), so it composes iff no card failed. Switch-composed pool (16 spare
/// cards): the job is placed on healthy cards by the manager; counted from real create() calls.
void BM_Composability(benchmark::State& st) {
  const int failures = static_cast<int>(st.range(0));
  const int trials = 20;
  int ok_static = 0, ok_pool = 0;
  for (auto _ : st) {
    ok_static = ok_pool = 0;
    std::mt19937 rng(1000 + failures);
    for (int t = 0; t < trials; ++t) {
      MemPool pool(1024, 4);
      auto m = std::move(*PartitionManager::open(pool.spec, pool.switches, {}));
      std::vector<std::uint32_t> all(1024);
      for (std::uint32_t i = 0; i < 1024; ++i) all[i] = i;
      std::shuffle(all.begin(), all.end(), rng);
      for (int f = 0; f < failures; ++f) (void)m->set_health(all[f], CardHealth::kFailed);
      ok_static += failures == 0 ? 1 : 0;
      ok_pool += m->create("job", "torus2d:28x36").has_value() ? 1 : 0;
    }
  }
  st.counters["static_torus_ok_pct"] = 100.0 * ok_static / trials;
  st.counters["switch_pool_ok_pct"] = 100.0 * ok_pool / trials;
}
BENCHMARK(BM_Composability)->DenseRange(1, 8)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
