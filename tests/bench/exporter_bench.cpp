// SPDX-License-Identifier: Apache-2.0
// npo-exporter at scale (issue 17 point 1): one scrape -- a LinkMonitor snapshot of every
// port and lane plus its Prometheus text rendering -- of a generated fabric (3D torus, up to
// 1024 cards) on the emulator's virtual clock with every link trained first. Target: one
// scrape of 1024 cards <= 100 ms. Counters: cards, bytes and lines of one exposition. The
// fabric is built once per process (a 1024-card bring-up takes seconds), outside the loops; the
// LinkMonitor snapshot alone is the baseline in the same run, and so are the cards' activity
// counters (registers.md §9) alone; the *AllQueuesActive rows repeat the counters and the scrape
// after one op on every queue of every card (each card then reads 96 queue registers).
#include <unistd.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include <benchmark/benchmark.h>

#include "exporter.hpp"
#include "npo/hal/hal.hpp"

namespace {

/// A trained fabric of `cards` cards of `kind`, kept for the process (built once per size).
struct Fabric {
  std::unique_ptr<npo::System> sys;
  unsigned links_up = 0;
};

npo::Result<Fabric*> fabric(npo::FabricKind kind, unsigned cards) {
  static std::map<std::pair<int, unsigned>, Fabric> cache;
  const auto key = std::make_pair(static_cast<int>(kind), cards);
  if (auto it = cache.find(key); it != cache.end()) return &it->second;
  auto spec = npo::generate_fabric(kind, cards, {.hbm_bytes = 1u << 20});
  if (!spec) return std::unexpected(spec.error());
  const auto path = std::filesystem::temp_directory_path() /
                    ("npo-exporter-bench-" + std::to_string(::getpid()) + "-" + std::to_string(cards) + ".json");
  {
    std::ofstream out(path);
    out << npo::to_json(*spec);
  }
  auto sys = npo::System::open("emu:file=" + path.string() + "?clock=virtual&hbm=1M");
  std::filesystem::remove(path);
  if (!sys) return std::unexpected(sys.error());
  auto up = npo::bring_up_links(**sys);
  if (!up) return std::unexpected(up.error());
  auto& f = cache[key];
  f.sys = std::move(*sys);
  f.links_up = up->up;
  return &f;
}

/// Baseline: the LinkMonitor snapshot alone (what a scrape reads).
void Snapshot(benchmark::State& state, npo::FabricKind kind, unsigned cards) {
  auto f = fabric(kind, cards);
  if (!f) {
    state.SkipWithError(f.error().to_string().c_str());
    return;
  }
  npo::LinkMonitor mon(*(*f)->sys);
  (void)mon.snapshot();
  for (auto _ : state) {
    auto s = mon.snapshot();
    if (!s) {
      state.SkipWithError(s.error().to_string().c_str());
      return;
    }
    benchmark::DoNotOptimize(s->cards.data());
  }
  state.counters["cards"] = cards;
}

/// The activity counters alone (registers.md §9): Device::queue_counters() and card_counters()
/// of every card, what a scrape reads besides the snapshot.
void Counters(benchmark::State& state, npo::FabricKind kind, unsigned cards) {
  auto f = fabric(kind, cards);
  if (!f) {
    state.SkipWithError(f.error().to_string().c_str());
    return;
  }
  npo::System& sys = *(*f)->sys;
  std::uint64_t sum = 0;
  for (auto _ : state) {
    for (std::size_t c = 0; c < sys.device_count(); ++c) {
      auto q = sys.device(c).queue_counters();
      auto k = sys.device(c).card_counters();
      if (!q || !k) {
        state.SkipWithError("counters unreadable");
        return;
      }
      sum += q->size() + k->windows_valid;
    }
  }
  benchmark::DoNotOptimize(sum);
  state.counters["cards"] = cards;
}

/// Makes every queue of every card of `f` active (registers.md §9, GLOBAL.QUEUES_ACTIVE): one
/// 64-byte HBM fill on each, so a later read of the counters reads all 96 queue registers of a
/// card -- the worst case of a scrape. Done once per process.
npo::Result<void> make_all_queues_active(npo::System& sys) {
  static bool done = false;
  if (done) return {};
  for (std::size_t c = 0; c < sys.device_count(); ++c) {
    npo::Device& dev = sys.device(c);
    const auto caps = dev.dma_capabilities();
    std::vector<std::unique_ptr<npo::DmaQueue>> qs;
    for (unsigned i = 0; i < caps.engines * caps.queues_per_engine; ++i) {
      auto q = dev.open_queue({.engine = i / caps.queues_per_engine, .depth = 4});
      if (!q) return std::unexpected(q.error());
      if (auto e = (*q)->enqueue_fill(npo::DmaAddress::hbm(0), 0, 64); !e) return std::unexpected(e.error());
      if (auto r = (*q)->submit(); !r) return r;
      qs.push_back(std::move(*q));
    }
    for (auto& q : qs) {
      std::array<npo::OpCompletion, 1> comp;
      while (q->poll(comp) == 0) {
      }
      if (comp[0].status != npo::OpStatus::kOk) return npo::fail(npo::Code::kInternal, "fill failed");
    }
  }
  done = true;
  return {};
}

/// Counters and Scrape with every queue of every card active (the worst case).
void CountersAllQueuesActive(benchmark::State& state, npo::FabricKind kind, unsigned cards) {
  auto f = fabric(kind, cards);
  if (!f) {
    state.SkipWithError(f.error().to_string().c_str());
    return;
  }
  if (auto a = make_all_queues_active(*(*f)->sys); !a) {
    state.SkipWithError(a.error().to_string().c_str());
    return;
  }
  Counters(state, kind, cards);
}
void ScrapeAllQueuesActive(benchmark::State& state, npo::FabricKind kind, unsigned cards);

/// One scrape: snapshot + Prometheus text.
void Scrape(benchmark::State& state, npo::FabricKind kind, unsigned cards) {
  auto f = fabric(kind, cards);
  if (!f) {
    state.SkipWithError(f.error().to_string().c_str());
    return;
  }
  npo::exporter::Collector collector(*(*f)->sys);
  std::string text;
  {
    // The first snapshot registers the stats buffers; later scrapes are the steady state.
    auto warm = collector.collect(text);
    if (!warm) {
      state.SkipWithError(warm.error().to_string().c_str());
      return;
    }
  }
  for (auto _ : state) {
    text.clear();
    auto r = collector.collect(text);
    if (!r) {
      state.SkipWithError(r.error().to_string().c_str());
      return;
    }
    benchmark::DoNotOptimize(text.data());
  }
  std::size_t lines = 0;
  for (char c : text) lines += c == '\n' ? 1 : 0;
  state.counters["cards"] = cards;
  state.counters["links_up"] = (*f)->links_up;
  state.counters["bytes"] = static_cast<double>(text.size());
  state.counters["lines"] = static_cast<double>(lines);
}

void ScrapeAllQueuesActive(benchmark::State& state, npo::FabricKind kind, unsigned cards) {
  auto f = fabric(kind, cards);
  if (!f) {
    state.SkipWithError(f.error().to_string().c_str());
    return;
  }
  if (auto a = make_all_queues_active(*(*f)->sys); !a) {
    state.SkipWithError(a.error().to_string().c_str());
    return;
  }
  Scrape(state, kind, cards);
}

BENCHMARK_CAPTURE(Snapshot, torus3d_1024, npo::FabricKind::kTorus3d, 1024)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(1.0);
BENCHMARK_CAPTURE(Counters, torus3d_1024, npo::FabricKind::kTorus3d, 1024)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(1.0);
BENCHMARK_CAPTURE(Scrape, torus3d_1024, npo::FabricKind::kTorus3d, 1024)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(2.0);
// Last for 1024 cards: they leave every queue active (the fabric is shared by the benchmarks).
BENCHMARK_CAPTURE(CountersAllQueuesActive, torus3d_1024, npo::FabricKind::kTorus3d, 1024)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(1.0);
BENCHMARK_CAPTURE(ScrapeAllQueuesActive, torus3d_1024, npo::FabricKind::kTorus3d, 1024)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(2.0);
BENCHMARK_CAPTURE(Snapshot, torus2d_64, npo::FabricKind::kTorus2d, 64)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(Scrape, torus2d_64, npo::FabricKind::kTorus2d, 64)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
