// SPDX-License-Identifier: Apache-2.0
// The copy floor of moving a 1 MiB message between two processes on this host, with no card,
// daemon or provider involved: what the CPUs and the memory system allow each data path
// (README "Open MPI over npo", the paragraph "Where the rest goes"). Per iteration,
// interleaved so that other load on the host falls on both alike:
//  - one copy: Open MPI's shared-memory path (vader with CMA): the receiver's CPU reads the
//    sender's buffer with process_vm_readv straight into its own buffer;
//  - two copies, pipelined: the emulated card's rendezvous path: the sender's card engine, run
//    by the sender's own process (npo-emud protocol §5.12), copies each chunk of the sender's
//    buffer with the CPU, after MADV_POPULATE_READ checked its pages as the engine does, into
//    shared memory (the receiving card's HBM landing zone, 16 chunk slots), and the receiver's
//    CPU copies each chunk out into its buffer as soon as it landed. The engine spins instead of
//    being rung, so no doorbell is counted: this is the best that design can do here. (Until
//    2026-12-06 the engine was a daemon thread that read the sender with process_vm_readv.)
// The argument is the chunk size in KiB (1024: the whole message at once). Counters:
// one_copy_GBps, two_copies_GBps (10^9 bytes per second of each path's own time) and their
// ratio two_over_one (< 1: the two-copy path cannot reach the one-copy path on this host,
// whatever its protocol). The Time column is one iteration: both paths. Needs 2 CPUs.
#include <sched.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <new>
#include <string_view>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>

#include "floor_bench.hpp"

namespace {

constexpr std::size_t kMessage = std::size_t{1} << 20;  // bytes per message
constexpr std::size_t kLandingSlots = 16;               // chunk slots of the landing zone

using npo_bench::pin;
using npo_bench::two_cpus;

void* map_anon(std::size_t n) {
  void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14
#endif

// Copies `len` bytes at `remote` of process `pid` to `local`; false when the kernel refused.
bool cma_read(pid_t pid, void* local, const void* remote, std::size_t len) {
  std::size_t done = 0;
  while (done < len) {
    iovec l{static_cast<char*>(local) + done, len - done};
    iovec r{const_cast<char*>(static_cast<const char*>(remote)) + done, len - done};
    const ssize_t n = ::process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

void BM_CopyFloor(benchmark::State& state) {
  const std::size_t chunk = static_cast<std::size_t>(state.range(0)) << 10;
  const std::size_t chunks = kMessage / chunk;
  const auto [sender_cpu, receiver_cpu] = two_cpus();
  if (sender_cpu < 0) {
    state.SkipWithError("needs 2 CPUs");
    return;
  }
  // The sender: a process that owns the source buffer (written once, as a ping-pong's is) and
  // runs its card's engine: on each `go` it copies the message chunk by chunk into the landing
  // zone, counting `landed`, until `stop`.
  struct Sync {
    std::atomic<long> go{0}, landed{0};
    std::atomic<bool> stop{false}, engine_failed{false};
  };
  auto* src = static_cast<unsigned char*>(map_anon(kMessage));
  void* sync_map = ::mmap(nullptr, sizeof(Sync), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  // The landing zone: shared memory, as the card's HBM is (a memfd every owner maps).
  const int fd = ::memfd_create("copy-floor-landing", MFD_CLOEXEC);
  void* land_map = MAP_FAILED;
  if (fd >= 0 && ::ftruncate(fd, static_cast<off_t>(kLandingSlots * chunk)) == 0) {
    land_map = ::mmap(nullptr, kLandingSlots * chunk, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  if (src == nullptr || sync_map == MAP_FAILED || land_map == MAP_FAILED) {
    state.SkipWithError("mmap or memfd failed");
    return;
  }
  auto* sync = new (sync_map) Sync();
  auto* land = static_cast<unsigned char*>(land_map);
  std::memset(land, 0, kLandingSlots * chunk);
  std::memset(src, 0x5a, kMessage);
  const pid_t sender = ::fork();
  if (sender == 0) {
    pin(sender_cpu);
    long k = 0;
    for (long m = 0;; ++m) {
      while (sync->go.load(std::memory_order_acquire) <= m) {
        if (sync->stop.load(std::memory_order_relaxed)) ::_exit(0);
      }
      for (std::size_t j = 0; j < chunks; ++j, ++k) {
        if (::madvise(src + j * chunk, chunk, MADV_POPULATE_READ) != 0) sync->engine_failed.store(true);
        std::memcpy(land + std::size_t(k % kLandingSlots) * chunk, src + j * chunk, chunk);
        sync->landed.store(k + 1, std::memory_order_release);
      }
    }
  }
  auto* dst = static_cast<unsigned char*>(map_anon(kMessage));
  if (sender < 0 || dst == nullptr) {
    state.SkipWithError("fork or mmap failed");
  } else {
    std::memset(dst, 0, kMessage);
    cpu_set_t before;
    CPU_ZERO(&before);
    const bool restore = ::sched_getaffinity(0, sizeof before, &before) == 0;
    pin(receiver_cpu);
    double one_s = 0, two_s = 0;
    long m = 0, k = 0;
    bool ok = true;
    for (auto _ : state) {
      auto t0 = std::chrono::steady_clock::now();
      ok = ok && cma_read(sender, dst, src, kMessage);
      auto t1 = std::chrono::steady_clock::now();
      sync->go.store(++m, std::memory_order_release);
      for (std::size_t j = 0; j < chunks; ++j, ++k) {
        while (sync->landed.load(std::memory_order_acquire) <= k) {
        }
        std::memcpy(dst + j * chunk, land + std::size_t(k % kLandingSlots) * chunk, chunk);
      }
      auto t2 = std::chrono::steady_clock::now();
      benchmark::DoNotOptimize(dst[kMessage - 1]);
      one_s += std::chrono::duration<double>(t1 - t0).count();
      two_s += std::chrono::duration<double>(t2 - t1).count();
    }
    if (restore) (void)::sched_setaffinity(0, sizeof before, &before);
    if (!ok) {
      state.SkipWithError("process_vm_readv refused (ptrace scope?)");
    } else if (sync->engine_failed.load()) {
      state.SkipWithError("madvise(MADV_POPULATE_READ) refused (Linux before 5.14?)");
    } else if (dst[0] != 0x5a || dst[kMessage - 1] != 0x5a) {
      state.SkipWithError("the copies did not move the data");
    } else {
      const double bytes = static_cast<double>(m) * kMessage;
      state.counters["one_copy_GBps"] = bytes / one_s / 1e9;
      state.counters["two_copies_GBps"] = bytes / two_s / 1e9;
      state.counters["two_over_one"] = one_s / two_s;
    }
  }
  sync->stop.store(true);
  if (sender > 0) (void)::waitpid(sender, nullptr, 0);
  ::munmap(sync_map, sizeof(Sync));
  if (land_map != MAP_FAILED) ::munmap(land_map, kLandingSlots * chunk);
  if (fd >= 0) ::close(fd);
  if (dst) ::munmap(dst, kMessage);
  ::munmap(src, kMessage);
}
// 256 KiB: the provider's rendezvous chunk (drivers/libfabric/provider.hpp kRndvChunk).
BENCHMARK(BM_CopyFloor)->Arg(64)->Arg(256)->Arg(1024)->Unit(benchmark::kMicrosecond)->UseRealTime();

constexpr const char* kAbout =
    "npo-copy-floor-bench: the copy floor of a 1 MiB message between two processes on this host.\n"
    "Per iteration, one CMA copy (Open MPI's shared memory: the receiver reads the sender's buffer)\n"
    "and two pipelined copies (the emulated card: the sender's card engine, run by the sender's own\n"
    "process, copies each chunk into shared memory with the CPU, the receiver's CPU copies it out),\n"
    "interleaved. BM_CopyFloor/K: chunks\n"
    "of K KiB (1024: the whole message at once). Counters: one_copy_GBps and two_copies_GBps (10^9\n"
    "B/s of each path's own time), two_over_one (their ratio). Time: one iteration, both paths.\n"
    "Needs 2 CPUs (else the rows say ERROR OCCURRED: needs 2 CPUs). README \"Open MPI over npo\".\n\n";

}  // namespace

int main(int argc, char** argv) { return npo_bench::bench_main(argc, argv, kAbout); }
