// SPDX-License-Identifier: Apache-2.0
// LinkMonitor at scale: one snapshot of every port and lane of N emulated cards on the
// virtual clock (1 MiB HBM each), each card cabled to its ring neighbour (port 0 <-> 1) and to
// the card 32 on (port 2 <-> 3), links trained first by bring_up_links (whose wall time is
// reported as a counter). The snapshot uses the stats DMA block where the card answers it,
// register reads otherwise (counter `stats_dma`: 1 when card 0 answered).
#include <chrono>
#include <memory>
#include <string>

#include <benchmark/benchmark.h>

#include "npo/emu/emulator.hpp"
#include "npo/hal/backend/registry.hpp"
#include "npo/hal/link_monitor.hpp"
#include "npo/hal/port.hpp"
#include "npo/hal/system.hpp"

namespace {

struct Fixture {
  std::shared_ptr<npo::emu::Emulator> emu;
  std::unique_ptr<npo::System> sys;
  double bring_up_s = 0;
  unsigned up = 0;
};

npo::Result<Fixture> make(unsigned n) {
  npo::emu::SystemConfig c;
  c.name = "ring" + std::to_string(n);
  c.num_cards = n;
  c.card.hbm_bytes = 1u << 20;
  c.clock = npo::emu::ClockMode::kVirtual;
  for (std::uint32_t i = 0; i < n && n > 1; ++i) {
    c.cables.push_back({.card_a = i, .port_a = 0, .card_b = (i + 1) % n, .port_b = 1, .channel = {}});
    if (n > 32) c.cables.push_back({.card_a = i, .port_a = 2, .card_b = (i + 32) % n, .port_b = 3, .channel = {}});
  }
  Fixture f;
  auto e = npo::emu::Emulator::create(c);
  if (!e) return std::unexpected(e.error());
  f.emu = *e;
  npo::backend::Registry reg;
  auto keep = f.emu;
  if (auto r = reg.add(
          "emu", {"emu:bench"},
          [keep](std::string_view, std::string_view uri) -> npo::Result<std::unique_ptr<npo::backend::Backend>> {
            return keep->make_backend(std::string(uri));
          });
      !r) {
    return std::unexpected(r.error());
  }
  npo::SystemOptions o;
  o.registry = &reg;
  auto s = npo::System::open("emu:bench", o);
  if (!s) return std::unexpected(s.error());
  f.sys = std::move(*s);
  const auto t0 = std::chrono::steady_clock::now();
  auto up = npo::bring_up_links(*f.sys, 20'000'000'000ULL);
  if (!up) return std::unexpected(up.error());
  f.bring_up_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  f.up = up->up;
  return f;
}

void Snapshot(benchmark::State& state) {
  const auto n = static_cast<unsigned>(state.range(0));
  auto f = make(n);
  if (!f) {
    state.SkipWithError(f.error().to_string().c_str());
    return;
  }
  npo::LinkMonitor mon(*f->sys);
  std::size_t ports = 0;
  for (auto _ : state) {
    auto s = mon.snapshot();
    if (!s) {
      state.SkipWithError(s.error().to_string().c_str());
      return;
    }
    ports = 0;
    for (const auto& c : s->cards) ports += c.ports.size();
    benchmark::DoNotOptimize(s->cards.data());
  }
  state.counters["cards"] = n;
  state.counters["ports"] = static_cast<double>(ports);
  state.counters["links_up"] = f->up;
  state.counters["bring_up_s"] = f->bring_up_s;
  state.counters["stats_dma"] = mon.uses_stats_dma(0) ? 1 : 0;
}

BENCHMARK(Snapshot)->Arg(8)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
