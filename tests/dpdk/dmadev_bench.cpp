// SPDX-License-Identifier: Apache-2.0
// dma_npo vs DPDK's dma_skeleton, same process, same sizes and bursts (docs/dpdk.md,
// README "DPDK dmadev"). Both devices are driven through the public dmadev API the same way:
// keep up to `burst` x 4 ops in flight, enqueue in bursts of `burst` with one submit each,
// reap with rte_dma_completed. Reports op rate and bandwidth of each and their ratios.
// Each case runs five times, the contenders interleaved and each alone (the skeleton is stopped
// while the others run), and the best of each is reported.
// Figures are printed, never asserted (the ctest smoke run only proves the program works).
//
// Usage: npo-dmadev-bench [seconds-per-case (default 0.5)] [npo backend URI (default emu:1)]
#include <pthread.h>
#include <rte_cycles.h>
#include <rte_dmadev.h>
#include <rte_eal.h>
#include <rte_lcore.h>
#include <rte_malloc.h>
#include <sched.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "npo/dpdk/dmadev.h"
#include "npo/hal/device.hpp"
#include "npo/hal/dma.hpp"
#include "npo/hal/memory.hpp"
#include "npo/hal/system.hpp"

namespace {

struct Result {
  double mops = 0;  // million ops per second
  double gbs = 0;   // GB/s (10^9 bytes/s)
  bool ok = false;
};

Result run(int16_t dev, std::uint32_t size, unsigned burst, double seconds) {
  Result res;
  const unsigned inflight = burst * 4;
  std::vector<void*> src(inflight), dst(inflight);
  for (unsigned i = 0; i < inflight; ++i) {
    src[i] = rte_malloc(nullptr, size, 64);
    dst[i] = rte_malloc(nullptr, size, 64);
    if (src[i] == nullptr || dst[i] == nullptr) {
      std::fprintf(stderr, "rte_malloc of %u bytes failed\n", size);
      return res;
    }
    std::memset(src[i], static_cast<int>(i), size);
  }
  std::uint64_t done = 0, issued = 0;
  bool err = false;
  const auto t0 = std::chrono::steady_clock::now();
  const auto end = t0 + std::chrono::duration<double>(seconds);
  auto now = t0;
  while (true) {
    if (issued - done + burst <= inflight) {
      for (unsigned b = 0; b < burst; ++b) {
        const unsigned k = static_cast<unsigned>(issued % inflight);
        if (rte_dma_copy(dev, 0, rte_malloc_virt2iova(src[k]), rte_malloc_virt2iova(dst[k]), size, 0) < 0) break;
        ++issued;
      }
      rte_dma_submit(dev, 0);
    }
    const std::uint16_t n = rte_dma_completed(dev, 0, 64, nullptr, &err);
    done += n;
    if (err) {
      std::fprintf(stderr, "dev %d: copy error\n", dev);
      break;
    }
    if ((done & 0x3f) == 0 || n == 0) {
      now = std::chrono::steady_clock::now();
      if (now >= end) break;
    }
  }
  // drain
  const auto drain_end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (done < issued && std::chrono::steady_clock::now() < drain_end) {
    done += rte_dma_completed(dev, 0, 64, nullptr, &err);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  res.ok = !err && done == issued && std::memcmp(src[0], dst[0], size) == 0;
  res.mops = static_cast<double>(done) / secs / 1e6;
  res.gbs = static_cast<double>(done) * size / secs / 1e9;
  for (unsigned i = 0; i < inflight; ++i) {
    rte_free(src[i]);
    rte_free(dst[i]);
  }
  return res;
}

/// The same loop straight on a HAL DmaQueue of card 0 of `sys` (no DPDK): the driver's cost is
/// the difference between this column and dma_npo's.
Result run_hal(npo::System& sys, std::uint32_t size, unsigned burst, double seconds) {
  Result res;
  auto& dev = sys.device(0);
  npo::QueueOptions qo;
  qo.depth = 1024;
  auto q = dev.open_queue(qo);
  const unsigned inflight = burst * 4;
  auto mem = npo::allocate_host_memory(dev, std::size_t{size} * inflight * 2);
  if (!q || !mem) return res;
  auto& queue = **q;
  const std::uint64_t base = (*mem)->iova();
  std::array<npo::OpCompletion, 64> c{};
  std::uint64_t done = 0, issued = 0;
  bool err = false;
  const auto t0 = std::chrono::steady_clock::now();
  const auto end = t0 + std::chrono::duration<double>(seconds);
  while (true) {
    if (issued - done + burst <= inflight) {
      for (unsigned b = 0; b < burst; ++b) {
        const std::uint64_t k = issued % inflight;
        if (!queue.enqueue_copy(npo::DmaAddress::host(base + k * size),
                                npo::DmaAddress::host(base + (inflight + k) * size), size)) {
          break;
        }
        ++issued;
      }
      (void)queue.submit();
    }
    const std::size_t n = queue.poll(c);
    for (std::size_t i = 0; i < n; ++i) err = err || c[i].status != npo::OpStatus::kOk;
    done += n;
    if (err) break;
    if (((done & 0x3f) == 0 || n == 0) && std::chrono::steady_clock::now() >= end) break;
  }
  const auto drain_end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (done < issued && std::chrono::steady_clock::now() < drain_end) done += queue.poll(c);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  res.ok = !err && done == issued;
  res.mops = static_cast<double>(done) / secs / 1e6;
  res.gbs = static_cast<double>(done) * size / secs / 1e9;
  return res;
}

constexpr int kRounds = 5;

void keep_best(Result& best, const Result& r) {
  best.ok = best.ok && r.ok;
  if (r.mops > best.mops) {
    best.mops = r.mops;
    best.gbs = r.gbs;
  }
}

bool setup(int16_t dev) {
  const rte_dma_conf conf{.nb_vchans = 1, .enable_silent = false};
  rte_dma_vchan_conf q{};
  q.direction = RTE_DMA_DIR_MEM_TO_MEM;
  q.nb_desc = 1024;
  rte_dma_info info{};
  rte_dma_info_get(dev, &info);
  if (q.nb_desc > info.max_desc) q.nb_desc = info.max_desc;
  return rte_dma_configure(dev, &conf) == 0 && rte_dma_vchan_setup(dev, 0, &q) == 0 && rte_dma_start(dev) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 0.5;
  const std::string uri = argc > 2 ? argv[2] : "emu:1";
  npo_dpdk_register();
  const std::string vdev = "dma_npo0,backend=" + uri + ",card=0";
  const std::string prefix = "npo-bench-" + std::to_string(getpid());
  const char* eal[] = {"npo-dmadev-bench", "--no-huge",    "-m",          "512",
                       "--no-pci",         "-l",           "0-1",         "--no-shconf",
                       "--file-prefix",    prefix.c_str(), "--log-level", "pmd.dma.npo:warning",
                       "--vdev",           vdev.c_str(),   "--vdev",      "dma_skeleton0"};
  if (rte_eal_init(static_cast<int>(std::size(eal)), const_cast<char**>(eal)) < 0) {
    std::fprintf(stderr, "rte_eal_init failed\n");
    return 1;
  }
  const int npo = rte_dma_get_dev_id_by_name("dma_npo0");
  const int skel = rte_dma_get_dev_id_by_name("dma_skeleton0");
  if (npo < 0 || skel < 0 || !setup(static_cast<int16_t>(npo)) || !setup(static_cast<int16_t>(skel))) {
    std::fprintf(stderr, "device setup failed (dma_npo0 %d, dma_skeleton0 %d)\n", npo, skel);
    return 1;
  }
  std::printf("dma_npo (backend %s) vs dma_skeleton, %.2f s per case and device (best of %d), copies, %u lcores\n\n",
              uri.c_str(), seconds, kRounds, rte_lcore_count());
  // The HAL-only column's System is opened off the main lcore's CPU, as dma_npo opens its own
  // (drivers/dpdk/dmadev.cpp open_off_lcore), so its engine threads do not share the poller's core.
  cpu_set_t saved, others;
  pthread_getaffinity_np(pthread_self(), sizeof saved, &saved);
  CPU_ZERO(&others);
  for (long i = 0; i < sysconf(_SC_NPROCESSORS_ONLN) && i < CPU_SETSIZE; ++i) {
    if (!CPU_ISSET(static_cast<int>(i), &saved)) CPU_SET(static_cast<int>(i), &others);
  }
  if (CPU_COUNT(&others) > 0) pthread_setaffinity_np(pthread_self(), sizeof others, &others);
  auto hal = npo::System::open(uri);
  pthread_setaffinity_np(pthread_self(), sizeof saved, &saved);
  if (!hal) {
    std::fprintf(stderr, "System::open(%s): %s\n", uri.c_str(), hal.error().to_string().c_str());
    return 1;
  }
  std::printf(
      "| size | burst | dma_npo Mops/s | dma_skeleton Mops/s | **ops ratio npo/skeleton** | dma_npo GB/s | "
      "dma_skeleton GB/s | **GB/s ratio** | HAL queue alone Mops/s | dma_npo/HAL |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  const std::uint32_t sizes[] = {64, 4096, 65536, 1u << 20};
  const unsigned bursts[] = {1, 32};
  bool all_ok = true;
  for (const auto size : sizes) {
    for (const auto burst : bursts) {
      // Best of `kRounds`, the three contenders interleaved, so a burst of load from other
      // processes hits all of them alike.
      Result a, b, h;
      a.ok = b.ok = h.ok = true;
      // Each contender runs alone: the skeleton is stopped while the others run, because its
      // idle copy thread sleeps 10 us at a time on the main lcore's CPU (DPDK puts control
      // threads there when -l takes every CPU) and so preempts their poller thousands of
      // times a second; the emulator's engine threads sleep on their own when idle.
      for (int r = 0; r < kRounds; ++r) {
        rte_dma_stop(static_cast<int16_t>(skel));
        const Result ra = run(static_cast<int16_t>(npo), size, burst, seconds / kRounds);
        const Result rh = run_hal(**hal, size, burst, seconds / kRounds);
        if (rte_dma_start(static_cast<int16_t>(skel)) != 0) {
          std::fprintf(stderr, "restarting dma_skeleton0 failed\n");
          return 1;
        }
        const Result rb = run(static_cast<int16_t>(skel), size, burst, seconds / kRounds);
        keep_best(a, ra);
        keep_best(b, rb);
        keep_best(h, rh);
      }
      all_ok = all_ok && a.ok && b.ok && h.ok;
      const char* unit = size >= (1u << 20) ? "MiB" : size >= 1024 ? "KiB" : "B";
      const unsigned shown = size >= (1u << 20) ? size >> 20 : size >= 1024 ? size >> 10 : size;
      std::printf("| %u %s | %u | %.3f | %.3f | **%.2f** | %.2f | %.2f | **%.2f** | %.3f | %.2f |%s\n", shown, unit,
                  burst, a.mops, b.mops, b.mops > 0 ? a.mops / b.mops : 0.0, a.gbs, b.gbs,
                  b.gbs > 0 ? a.gbs / b.gbs : 0.0, h.mops, h.mops > 0 ? a.mops / h.mops : 0.0,
                  a.ok && b.ok && h.ok ? "" : " (check FAILED)");
      std::fflush(stdout);
    }
  }
  rte_dma_stop(static_cast<int16_t>(npo));
  rte_dma_stop(static_cast<int16_t>(skel));
  rte_eal_cleanup();
  return all_ok ? 0 : 1;
}
