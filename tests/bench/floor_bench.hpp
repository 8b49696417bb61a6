// SPDX-License-Identifier: Apache-2.0
// What the floor benchmarks share (npo-copy-floor-bench, npo-doorbell-floor-bench): two
// processes, or a process and a thread, each pinned on its own CPU of the ones this process may
// run on, and a main() that prints what the rows mean on --help.
#pragma once

#include <sched.h>

#include <cstdio>
#include <string_view>
#include <utility>

#include <benchmark/benchmark.h>

namespace npo_bench {

/// Pins the calling thread to CPU `cpu` (sched_setaffinity; a failure leaves it unpinned).
inline void pin(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  (void)::sched_setaffinity(0, sizeof s, &s);
}

/// The first two CPUs this process may run on, or {-1, -1} when it may run on fewer.
inline std::pair<int, int> two_cpus() {
  cpu_set_t s;
  CPU_ZERO(&s);
  if (::sched_getaffinity(0, sizeof s, &s) != 0) return {-1, -1};
  int a = -1;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &s)) continue;
    if (a < 0) {
      a = c;
    } else {
      return {a, c};
    }
  }
  return {-1, -1};
}

/// Google Benchmark's main, with `about` printed first on --help or -h.
inline int bench_main(int argc, char** argv, const char* about) {
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--help" || std::string_view(argv[i]) == "-h") std::fputs(about, stdout);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace npo_bench
