// SPDX-License-Identifier: Apache-2.0
// Supernode scale: a generated 1024-card fabric (3D torus, or a two-level fat-tree through
// optical switches) on the emulator's virtual clock, brought up end to end the way a user
// does it -- System::open("emu:file=...") probing every card, every link trained by the
// driver's training supervisor, the graph discovered from the neighbour identities training
// exchanged, routes computed and programmed into every card, then one LinkMonitor snapshot
// of every port and lane. Issue targets (2-core, 24 GiB machine): trained + discovered in
// <= 10 s wall and <= 4 GiB RSS; one snapshot <= 50 ms.
//
// Each phase is timed once per process (a 1024-card bring-up is not repeated), so run one
// benchmark per process: --benchmark_filter=Supernode/torus3d or Supernode/fat-tree.
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <benchmark/benchmark.h>

#include "npo/hal/hal.hpp"

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Peak resident set size of this process so far, bytes (getrusage ru_maxrss is in KiB).
double peak_rss_bytes() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) * 1024.0;
}

void Supernode(benchmark::State& state, npo::FabricKind kind, unsigned cards) {
  for (auto _ : state) {
    auto spec = npo::generate_fabric(kind, cards, {.hbm_bytes = 1u << 20});
    if (!spec) {
      state.SkipWithError(spec.error().to_string().c_str());
      return;
    }
    const auto path = std::filesystem::temp_directory_path() / ("npo-supernode-" + std::to_string(::getpid()) + "-" +
                                                                std::string(npo::fabric_kind_name(kind)) + ".json");
    {
      std::ofstream out(path);
      out << npo::to_json(*spec);
    }
    const auto t0 = std::chrono::steady_clock::now();
    auto sys = npo::System::open("emu:file=" + path.string() + "?clock=virtual&hbm=1M");
    std::filesystem::remove(path);
    if (!sys) {
      state.SkipWithError(sys.error().to_string().c_str());
      return;
    }
    const double open_s = seconds_since(t0);
    const auto t1 = std::chrono::steady_clock::now();
    auto up = npo::bring_up_links(**sys);
    if (!up) {
      state.SkipWithError(up.error().to_string().c_str());
      return;
    }
    const double train_s = seconds_since(t1);
    const auto t2 = std::chrono::steady_clock::now();
    auto topo = npo::discover_topology(**sys);
    if (!topo) {
      state.SkipWithError(topo.error().to_string().c_str());
      return;
    }
    const double discover_s = seconds_since(t2);
    const auto t3 = std::chrono::steady_clock::now();
    auto routes = npo::route_fabric(**sys);
    if (!routes) {
      state.SkipWithError(routes.error().to_string().c_str());
      return;
    }
    const double route_s = seconds_since(t3);
    const double total_s = seconds_since(t0);
    npo::LinkMonitor mon(**sys);
    auto warm = mon.snapshot();  // first snapshot allocates and registers the stats buffers
    if (!warm) {
      state.SkipWithError(warm.error().to_string().c_str());
      return;
    }
    const auto t4 = std::chrono::steady_clock::now();
    auto snap = mon.snapshot();
    const double snapshot_ms = seconds_since(t4) * 1e3;
    if (!snap) {
      state.SkipWithError(snap.error().to_string().c_str());
      return;
    }
    std::size_t lanes = 0;
    for (const auto& c : snap->cards) {
      for (const auto& p : c.ports) lanes += p.lanes.size();
    }
    unsigned up_links = 0;
    for (const auto& l : topo->links) up_links += l.up ? 1 : 0;
    state.counters["cards"] = static_cast<double>(topo->cards.size());
    state.counters["cables"] = static_cast<double>(spec->cables.size());
    state.counters["ports_up"] = up->up;
    state.counters["ports_failed"] = up->failed;
    state.counters["links_up"] = up_links;
    state.counters["diameter"] = routes->diameter();
    state.counters["open_s"] = open_s;
    state.counters["train_s"] = train_s;
    state.counters["discover_s"] = discover_s;
    state.counters["route_s"] = route_s;
    state.counters["total_s"] = total_s;
    state.counters["snapshot_ms"] = snapshot_ms;
    state.counters["snapshot_lanes"] = static_cast<double>(lanes);
    state.counters["peak_rss_MiB"] = peak_rss_bytes() / (1 << 20);
  }
}

BENCHMARK_CAPTURE(Supernode, torus3d, npo::FabricKind::kTorus3d, 1024)
    ->Iterations(1)
    ->Unit(benchmark::kSecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(Supernode, fat_tree, npo::FabricKind::kFatTree, 1024)
    ->Iterations(1)
    ->Unit(benchmark::kSecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(Supernode, torus2d_64, npo::FabricKind::kTorus2d, 64)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
