// SPDX-License-Identifier: Apache-2.0
// npo-emud fast path (issue 13 point 5), one run, three rows, each a ratio to a baseline of
// the same run:
//   1 MiB host->HBM bandwidth   emu-remote vs the in-process emulator   (target >= 0.90)
//   64 B host->HBM op rate      emu-remote vs the in-process emulator   (target >= 0.50)
//   4 MiB card->card through a window between two processes (emu-remote) vs a memcpy of
//   4 MiB between two huge-page host buffers                             (target >= 0.80)
// Starts its own npo-emud (mesh8) and stops it. Usage: npo-emud-fastpath-bench [SECONDS [h2d|peer]]
// (seconds per measurement, default 2; the second argument runs only those rows, e.g. to
// profile one path). Figures are printed, never asserted.
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/emud_process.hpp"
#include "npo/hal/dma.hpp"
#include "npo/hal/memory.hpp"
#include "npo/hal/system.hpp"
#include "npo/hal/window.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using npo::DmaAddress;

double secs(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// Host->HBM copies of `size` bytes, batches of 32, for `seconds`: {ops/s, bytes/s}.
std::pair<double, double> h2d(npo::System& sys, std::size_t size, double seconds) {
  auto& dev = sys.device(0);
  auto q = dev.open_queue({.engine = 0, .depth = 1024}).value();
  auto mem = npo::allocate_host_memory(dev, std::max<std::size_t>(size, 4096)).value();
  std::vector<npo::OpCompletion> buf(256);
  std::uint64_t done = 0;
  const auto t0 = Clock::now();
  while (secs(t0) < seconds) {
    for (int i = 0; i < 32; ++i) (void)q->enqueue_copy(DmaAddress::host(mem->iova()), DmaAddress::hbm(0), size);
    (void)q->submit();
    std::uint64_t got = 0;
    while (got < 32) got += q->poll(buf);
    done += got;
  }
  const double t = secs(t0);
  return {static_cast<double>(done) / t, static_cast<double>(done * size) / t};
}

/// memcpy between two 2 MiB-aligned buffers with MADV_HUGEPAGE, bytes/s.
double memcpy_rate(std::size_t size, double seconds) {
  auto alloc = [&] {
    void* p = nullptr;
    if (::posix_memalign(&p, 2u << 20, size) != 0) std::abort();
    ::madvise(p, size, MADV_HUGEPAGE);
    std::memset(p, 1, size);
    return static_cast<std::byte*>(p);
  };
  std::byte* a = alloc();
  std::byte* b = alloc();
  std::uint64_t n = 0;
  const auto t0 = Clock::now();
  while (secs(t0) < seconds) {
    std::memcpy(b, a, size);
    ++n;
  }
  const double t = secs(t0);
  std::free(a);
  std::free(b);
  return static_cast<double>(n * size) / t;
}

/// Card 0 of this process writes 4 MiB into a window that another process owns on card 1.
/// kPolled: the caller spins on poll(); kInterrupt: it sleeps in wait() on the queue's MSI-X
/// eventfd (one wake-up per batch of 4 ops = 16 MiB), leaving the cores to the engine.
double peer_rate(const std::string& uri, std::size_t size, double seconds, npo::CompletionMode mode) {
  int down[2], up[2];
  if (::pipe(down) != 0 || ::pipe(up) != 0) return 0;
  const pid_t owner = ::fork();
  if (owner == 0) {
    auto sys = npo::System::open(uri + "?card=1");
    if (!sys) ::_exit(2);
    auto w = npo::export_window((*sys)->device(0), 0, size);
    if (!w) ::_exit(3);
    const auto h = (*w)->handle().serialize();
    if (::write(up[1], h.data(), h.size()) != static_cast<ssize_t>(h.size())) ::_exit(4);
    char c = 0;
    (void)::read(down[0], &c, 1);
    ::_exit(0);
  }
  std::array<std::byte, npo::WindowHandle::kSerializedSize> hb{};
  if (::read(up[0], hb.data(), hb.size()) != static_cast<ssize_t>(hb.size())) return 0;
  double rate = 0;
  {
    auto sys = npo::System::open(uri + "?card=0").value();
    auto& dev = sys->device(0);
    auto h = npo::import_window(*sys, hb).value();
    auto q = dev.open_queue({.engine = 1, .depth = 64, .mode = mode}).value();
    auto mem = npo::allocate_host_memory(dev, size).value();
    std::vector<npo::OpCompletion> buf(64);
    // HBM -> remote HBM, as a card->card transfer is (source staged in local HBM once).
    (void)q->enqueue_copy(DmaAddress::host(mem->iova()), DmaAddress::hbm(0), size);
    (void)q->submit();
    while (q->poll(buf) == 0) {
    }
    std::uint64_t done = 0;
    const auto t0 = Clock::now();
    while (secs(t0) < seconds) {
      for (int i = 0; i < 4; ++i) (void)q->enqueue_remote_write(DmaAddress::hbm(0), h, 0, size);
      (void)q->submit();
      std::uint64_t got = 0;
      while (got < 4) {
        if (mode == npo::CompletionMode::kInterrupt) (void)q->wait(std::chrono::seconds(5));
        got += q->poll(buf);
      }
      done += got;
    }
    rate = static_cast<double>(done * size) / secs(t0);
  }
  (void)::write(down[1], "q", 1);
  ::waitpid(owner, nullptr, 0);
  return rate;
}

}  // namespace

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 2.0;
  npo_test::EmudProcess d;
  if (!d.start(NPO_EMUD, "emu:mesh8")) {
    std::fprintf(stderr, "npo-emud did not start:\n%s\n", d.output().c_str());
    return 1;
  }
  const std::string only = argc > 2 ? argv[2] : "";
  double l64 = 0, r64 = 0, l1m = 0, r1m = 0, peer = 0, peer_irq = 0, mc = 0;
  if (only.empty() || only == "h2d") {
    auto local = npo::System::open("emu:mesh8").value();
    auto remote = npo::System::open(d.uri() + "?card=0").value();
    l64 = h2d(*local, 64, seconds).first;
    r64 = h2d(*remote, 64, seconds).first;
    l1m = h2d(*local, 1u << 20, seconds).second;
    r1m = h2d(*remote, 1u << 20, seconds).second;
  }
  if (only.empty() || only == "peer") {
    peer = peer_rate(d.uri(), 4u << 20, seconds, npo::CompletionMode::kPolled);
    mc = memcpy_rate(4u << 20, seconds);
    peer_irq = peer_rate(d.uri(), 4u << 20, seconds, npo::CompletionMode::kInterrupt);
  }
  std::printf("npo-emud fast path (one run, %.1f s per measurement)\n\n", seconds);
  std::printf("%-44s %14s %14s %7s %7s\n", "measurement", "emu-remote", "baseline", "ratio", "target");
  std::printf("%-44s %11.2f GB/s %11.2f GB/s %7.2f %7s\n", "1 MiB host->HBM (baseline: in-process emu)", r1m / 1e9,
              l1m / 1e9, r1m / l1m, ">=0.90");
  std::printf("%-44s %9.0f ops/s %9.0f ops/s %7.2f %7s\n", "64 B host->HBM op rate (baseline: in-process)", r64, l64,
              r64 / l64, ">=0.50");
  std::printf("%-44s %11.2f GB/s %11.2f GB/s %7.2f %7s\n", "4 MiB card->card, 2 processes, polled (memcpy)", peer / 1e9,
              mc / 1e9, peer / mc, ">=0.80");
  std::printf("%-44s %11.2f GB/s %11.2f GB/s %7.2f %7s\n", "4 MiB card->card, 2 processes, irq wait (memcpy)",
              peer_irq / 1e9, mc / 1e9, peer_irq / mc, ">=0.80");
  return d.stop() == 0 ? 0 : 1;
}
