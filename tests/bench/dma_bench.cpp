// SPDX-License-Identifier: Apache-2.0
// Microbenchmarks of the DMA hot path on the emulated card: enqueue, submit (doorbell),
// poll, and a full batch round trip, each beside a memcpy of the same bytes in the same
// process. Issue target: 64 B copies in batches of 32 cost <= 50 ns per op of HAL time
// (enqueue + submit + poll on the caller's thread).
#include <sys/mman.h>
#include <sys/resource.h>
#include <x86intrin.h>

#include <chrono>
#include <cstring>

#include <benchmark/benchmark.h>

#include "npo/hal/hal.hpp"

namespace {

struct Fixture {
  std::unique_ptr<npo::System> sys;
  std::unique_ptr<npo::DmaQueue> q;
  std::unique_ptr<npo::MemoryRegion> buf;
  Fixture() {
    sys = std::move(npo::System::open("emu:1?hbm=16M").value());
    q = std::move(sys->device(0).open_queue({.engine = 0, .depth = 1024}).value());
    buf = std::move(npo::allocate_host_memory(sys->device(0), 1u << 20).value());
  }
};

Fixture& fx() {
  static Fixture f;
  return f;
}

void drain(npo::DmaQueue& q) {
  std::array<npo::OpCompletion, 256> out;
  while (q.outstanding() > 0) {
    if (q.poll(out) == 0) __builtin_ia32_pause();
  }
}

/// Enqueue only (no doorbell): the cost of writing one descriptor.
void Enqueue(benchmark::State& state) {
  auto& f = fx();
  const auto src = npo::DmaAddress::host(f.buf->iova());
  const auto dst = npo::DmaAddress::hbm(0);
  using C = std::chrono::steady_clock;
  for (auto _ : state) {
    const auto t0 = C::now();
    for (int i = 0; i < 32; ++i) benchmark::DoNotOptimize(f.q->enqueue_copy(src, dst, 64));
    state.SetIterationTime(std::chrono::duration<double>(C::now() - t0).count());
    (void)f.q->submit();
    drain(*f.q);
  }
  state.SetItemsProcessed(state.iterations() * 32);
}

/// Full round trip of a batch of N x 64 B copies: enqueue xN, one submit, poll until all N
/// completed. hal_ns_per_op counts only time spent inside the HAL calls that did work
/// (enqueue, submit, polls that returned completions), i.e. excluding waiting for the engine,
/// timed with the TSC (a steady_clock read costs ~36 ns here, as much as what is measured).
/// Nanoseconds per TSC tick (constant TSC; calibrated once against steady_clock over 20 ms).
double ns_per_tick() {
  static const double v = [] {
    const auto t0 = std::chrono::steady_clock::now();
    const std::uint64_t c0 = __rdtsc();
    while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(20)) {
    }
    const std::uint64_t c1 = __rdtsc();
    return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
           static_cast<double>(c1 - c0);
  }();
  return v;
}

void BatchRoundTrip(benchmark::State& state) {
  auto& f = fx();
  const auto batch = static_cast<int>(state.range(0));
  const auto src = npo::DmaAddress::host(f.buf->iova());
  const auto dst = npo::DmaAddress::hbm(0);
  std::array<npo::OpCompletion, 256> out;
  std::uint64_t hal_ticks = 0, ops = 0;
  for (auto _ : state) {
    std::uint64_t t0 = __rdtsc();
    for (int i = 0; i < batch; ++i) benchmark::DoNotOptimize(f.q->enqueue_copy(src, dst, 64));
    (void)f.q->submit();
    hal_ticks += __rdtsc() - t0;
    int got = 0;
    while (got < batch) {
      t0 = __rdtsc();
      const auto n = f.q->poll(out);
      if (n > 0) {
        hal_ticks += __rdtsc() - t0;  // only polls that reaped count: empty ones are waiting
        got += static_cast<int>(n);
      } else {
        _mm_pause();
      }
    }
    ops += static_cast<std::uint64_t>(batch);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(ops));
  state.counters["hal_ns_per_op"] = static_cast<double>(hal_ticks) * ns_per_tick() / static_cast<double>(ops);
}

/// Baseline in the same process: memcpy of the same 64 B x batch.
void MemcpyBaseline(benchmark::State& state) {
  auto& f = fx();
  const auto batch = static_cast<int>(state.range(0));
  std::byte* b = f.buf->bytes().data();
  for (auto _ : state) {
    for (int i = 0; i < batch; ++i) {
      std::memcpy(b + 4096 + i * 64, b, 64);
      benchmark::ClobberMemory();
    }
  }
  state.SetItemsProcessed(state.iterations() * batch);
}

/// Page faults taken by this process so far (minor + major), from getrusage(2).
double page_faults() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_minflt + ru.ru_majflt);
}

/// allocate_host_memory of `range(0)` MiB: hugetlbfs, else transparent huge pages (this
/// machine reserves no hugetlbfs pages), populated and IOMMU-mapped. Reports time and the
/// page faults taken.
void AllocateHuge(benchmark::State& state) {
  auto& f = fx();
  const std::size_t bytes = static_cast<std::size_t>(state.range(0)) << 20;
  double faults = 0;
  int kind = -1;
  for (auto _ : state) {
    const double f0 = page_faults();
    auto r = npo::allocate_host_memory(f.sys->device(0), bytes);
    if (!r) {
      state.SkipWithError(r.error().to_string().c_str());
      return;
    }
    faults = page_faults() - f0;
    kind = static_cast<int>((*r)->page_kind());
    state.PauseTiming();
    r->reset();
    state.ResumeTiming();
  }
  state.counters["page_faults"] = faults;
  state.counters["page_kind"] = kind;  // 0 hugetlb, 1 THP, 2 4 KiB
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(bytes));
}

/// The same amount with 4 KiB pages: anonymous memory with MADV_NOHUGEPAGE, touched, then
/// register_host_memory.
void Register4K(benchmark::State& state) {
  auto& f = fx();
  const std::size_t bytes = static_cast<std::size_t>(state.range(0)) << 20;
  double faults = 0;
  for (auto _ : state) {
    const double f0 = page_faults();
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      state.SkipWithError("mmap failed");
      return;
    }
    ::madvise(p, bytes, MADV_NOHUGEPAGE);
    std::memset(p, 0, bytes);
    auto r = npo::register_host_memory(f.sys->device(0), std::span(static_cast<std::byte*>(p), bytes));
    if (!r) {
      state.SkipWithError(r.error().to_string().c_str());
      return;
    }
    faults = page_faults() - f0;
    state.PauseTiming();
    r->reset();
    ::munmap(p, bytes);
    state.ResumeTiming();
  }
  state.counters["page_faults"] = faults;
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(bytes));
}

BENCHMARK(AllocateHuge)->Arg(1024)->Iterations(3)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(Register4K)->Arg(1024)->Iterations(3)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(Enqueue)->UseManualTime();
BENCHMARK(BatchRoundTrip)->Arg(1)->Arg(32)->Arg(256)->UseRealTime();
BENCHMARK(MemcpyBaseline)->Arg(32);

}  // namespace

BENCHMARK_MAIN();
