// SPDX-License-Identifier: Apache-2.0
// npo-emud fast path (issue 13 point 5), one run, five rows, each a ratio to a baseline of
// the same run, the two sides of a ratio interleaved in 50 ms slices:
//   1 MiB host->HBM bandwidth   emu-remote vs the in-process emulator   (target >= 0.90)
//   64 B host->HBM op rate      emu-remote vs the in-process emulator   (target >= 0.50)
//   4 MiB card->card through a window between two processes (emu-remote) vs a memcpy of
//   4 MiB between two huge-page host buffers                             (target >= 0.80),
//   with the caller spinning on poll(), in wait() on a polled queue (spin, then yield), and
//   sleeping in wait() on the MSI-X eventfd of an interrupt-mode queue
// Starts its own npo-emud (mesh8) and stops it. Usage: npo-emud-fastpath-bench [SECONDS [h2d|peer|all
// [DAEMON-ARGS...]]] (seconds per measurement, default 2; the second argument runs only those
// rows, e.g. to profile one path; the rest go to npo-emud, e.g. `--engine workers`). Figures
// are printed, never asserted.
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

/// Work done over time, summed over the slices of one measurement.
struct Acc {
  double units = 0;
  double seconds = 0;
  [[nodiscard]] double rate() const { return seconds > 0 ? units / seconds : 0; }
};

/// Measurements are interleaved in slices (kSlice each, round robin) so that the load other
/// processes put on the machine falls on both sides of a ratio alike.
constexpr double kSlice = 0.05;

/// Host->HBM copies of `size` bytes, batches of 32, on card 0 of `sys`.
class H2d {
 public:
  H2d(npo::System& sys, std::size_t size)
      : size_(size),
        q_(sys.device(0).open_queue({.engine = 0, .depth = 1024}).value()),
        mem_(npo::allocate_host_memory(sys.device(0), std::max<std::size_t>(size, 4096)).value()) {}
  /// Runs for `seconds`; adds ops to `ops` and bytes to `bytes`.
  void run(double seconds, Acc& ops, Acc& bytes) {
    std::uint64_t done = 0;
    const auto t0 = Clock::now();
    while (secs(t0) < seconds) {
      for (int i = 0; i < 32; ++i) (void)q_->enqueue_copy(DmaAddress::host(mem_->iova()), DmaAddress::hbm(0), size_);
      (void)q_->submit();
      std::uint64_t got = 0;
      while (got < 32) got += q_->poll(buf_);
      done += got;
    }
    const double t = secs(t0);
    ops.units += static_cast<double>(done);
    ops.seconds += t;
    bytes.units += static_cast<double>(done * size_);
    bytes.seconds += t;
  }

 private:
  std::size_t size_;
  std::unique_ptr<npo::DmaQueue> q_;
  std::unique_ptr<npo::MemoryRegion> mem_;
  std::vector<npo::OpCompletion> buf_ = std::vector<npo::OpCompletion>(256);
};

/// memcpy between two 2 MiB-aligned buffers with MADV_HUGEPAGE.
class Memcpy {
 public:
  explicit Memcpy(std::size_t size) : size_(size), a_(alloc()), b_(alloc()) {}
  ~Memcpy() {
    std::free(a_);
    std::free(b_);
  }
  Memcpy(const Memcpy&) = delete;
  Memcpy& operator=(const Memcpy&) = delete;
  /// Runs for `seconds`; adds bytes to `bytes`.
  void run(double seconds, Acc& bytes) {
    std::uint64_t n = 0;
    const auto t0 = Clock::now();
    while (secs(t0) < seconds) {
      std::memcpy(b_, a_, size_);
      ++n;
    }
    bytes.seconds += secs(t0);
    bytes.units += static_cast<double>(n * size_);
  }

 private:
  std::byte* alloc() const {
    void* p = nullptr;
    if (::posix_memalign(&p, 2u << 20, size_) != 0) std::abort();
    ::madvise(p, size_, MADV_HUGEPAGE);
    std::memset(p, 1, size_);
    return static_cast<std::byte*>(p);
  }
  std::size_t size_;
  std::byte* a_;
  std::byte* b_;
};

/// Batches of 4 remote writes of `size` bytes from card 0's HBM into a window `h` that another
/// process owns. `use_wait` false: the caller spins on poll(); true: it calls wait() before each
/// poll -- with kPolled that spins on the ring and then yields the CPU (DmaQueue::wait), with
/// kInterrupt it sleeps on the queue's MSI-X eventfd (one wake-up per batch of 4 ops).
class Peer {
 public:
  Peer(npo::Device& dev, const npo::WindowHandle& h, std::size_t size, unsigned engine, npo::CompletionMode mode,
       bool use_wait)
      : h_(h),
        size_(size),
        use_wait_(use_wait),
        q_(dev.open_queue({.engine = engine, .depth = 64, .mode = mode}).value()) {}
  /// Runs for `seconds`; adds bytes to `bytes`.
  void run(double seconds, Acc& bytes) {
    std::uint64_t done = 0;
    const auto t0 = Clock::now();
    while (secs(t0) < seconds) {
      for (int i = 0; i < 4; ++i) (void)q_->enqueue_remote_write(DmaAddress::hbm(0), h_, 0, size_);
      (void)q_->submit();
      std::uint64_t got = 0;
      while (got < 4) {
        if (use_wait_) (void)q_->wait(std::chrono::seconds(5));
        got += q_->poll(buf_);
      }
      done += got;
    }
    bytes.seconds += secs(t0);
    bytes.units += static_cast<double>(done * size_);
  }

 private:
  const npo::WindowHandle& h_;
  std::size_t size_;
  bool use_wait_;
  std::unique_ptr<npo::DmaQueue> q_;
  std::vector<npo::OpCompletion> buf_ = std::vector<npo::OpCompletion>(64);
};

struct PeerRates {
  Acc polled, polled_wait, irq, memcpy;
};

/// Card 0 of this process writes 4 MiB ops into a window that another process owns on card
/// 1, polled and with interrupt waits, interleaved with the same-size memcpy baseline.
PeerRates peer_rates(const std::string& uri, std::size_t size, double seconds) {
  PeerRates out;
  int down[2], up[2];
  if (::pipe(down) != 0 || ::pipe(up) != 0) return out;
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
  if (::read(up[0], hb.data(), hb.size()) != static_cast<ssize_t>(hb.size())) return out;
  {
    auto sys = npo::System::open(uri + "?card=0").value();
    auto& dev = sys->device(0);
    auto h = npo::import_window(*sys, hb).value();
    // HBM -> remote HBM, as a card->card transfer is (source staged in local HBM once).
    {
      auto q = dev.open_queue({.engine = 1, .depth = 64}).value();
      auto mem = npo::allocate_host_memory(dev, size).value();
      std::vector<npo::OpCompletion> buf(4);
      (void)q->enqueue_copy(DmaAddress::host(mem->iova()), DmaAddress::hbm(0), size);
      (void)q->submit();
      while (q->poll(buf) == 0) {
      }
    }
    Peer polled(dev, h, size, 1, npo::CompletionMode::kPolled, false);
    Peer polled_wait(dev, h, size, 2, npo::CompletionMode::kPolled, true);
    Peer irq(dev, h, size, 3, npo::CompletionMode::kInterrupt, true);
    Memcpy mc(size);
    for (double t = 0; t < seconds; t += kSlice) {
      polled.run(kSlice, out.polled);
      mc.run(kSlice, out.memcpy);
      polled_wait.run(kSlice, out.polled_wait);
      irq.run(kSlice, out.irq);
    }
  }
  (void)::write(down[1], "q", 1);
  ::waitpid(owner, nullptr, 0);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 2.0;
  std::vector<std::string> daemon_args;
  for (int i = 3; i < argc; ++i) daemon_args.emplace_back(argv[i]);
  npo_test::EmudProcess d;
  if (!d.start(NPO_EMUD, "emu:mesh8", daemon_args)) {
    std::fprintf(stderr, "npo-emud did not start:\n%s\n", d.output().c_str());
    return 1;
  }
  const std::string only = argc > 2 && std::string(argv[2]) != "all" ? argv[2] : "";
  Acc l64, r64, l1m, r1m, unused;
  PeerRates peer;
  if (only.empty() || only == "h2d") {
    auto local = npo::System::open("emu:mesh8").value();
    auto remote = npo::System::open(d.uri() + "?card=0").value();
    {
      H2d l(*local, 64), r(*remote, 64);
      for (double t = 0; t < seconds; t += kSlice) {
        l.run(kSlice, l64, unused);
        r.run(kSlice, r64, unused);
      }
    }
    H2d l(*local, 1u << 20), r(*remote, 1u << 20);
    for (double t = 0; t < seconds; t += kSlice) {
      l.run(kSlice, unused, l1m);
      r.run(kSlice, unused, r1m);
    }
  }
  if (only.empty() || only == "peer") peer = peer_rates(d.uri(), 4u << 20, seconds);
  std::printf("npo-emud fast path (one run, %.1f s per measurement, interleaved in %.0f ms slices)\n\n", seconds,
              kSlice * 1e3);
  std::printf("%-48s %14s %14s %7s %7s\n", "measurement", "emu-remote", "baseline", "ratio", "target");
  auto row = [](const char* what, double a, double b, const char* target) {
    std::printf("%-48s %11.2f GB/s %11.2f GB/s %7.2f %7s\n", what, a / 1e9, b / 1e9, b > 0 ? a / b : 0.0, target);
  };
  row("1 MiB host->HBM (baseline: in-process emu)", r1m.rate(), l1m.rate(), ">=0.90");
  std::printf("%-48s %9.0f ops/s %9.0f ops/s %7.2f %7s\n", "64 B host->HBM op rate (baseline: in-process)", r64.rate(),
              l64.rate(), l64.rate() > 0 ? r64.rate() / l64.rate() : 0.0, ">=0.50");
  row("4 MiB card->card, 2 processes, poll loop (memcpy)", peer.polled.rate(), peer.memcpy.rate(), ">=0.80");
  row("4 MiB card->card, 2 processes, polled wait (memcpy)", peer.polled_wait.rate(), peer.memcpy.rate(), ">=0.80");
  row("4 MiB card->card, 2 processes, irq wait (memcpy)", peer.irq.rate(), peer.memcpy.rate(), ">=0.80");
  return d.stop() == 0 ? 0 : 1;
}
