// SPDX-License-Identifier: Apache-2.0
// Test helper for exporter_prometheus_test: a job in its own process that owns one card of
// npo-emud and does a known amount of work on it -- `ops` copies of `size` bytes host -> HBM on
// a queue of `engine` plus one copy from an unmapped IOVA (fails with IOMMU_FAULT), `windows`
// exported windows, `mbox_errors` mailbox requests answered with an error -- prints
// "ready ok=N error=M bytes=B", and holds the card until SIGTERM (or 120 s), then exits 0.
//
//   npo-obs-dma-client URI ENGINE OPS SIZE WINDOWS MBOX_ERRORS
#include <signal.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "npo/hal/hal.hpp"

namespace {

int die(const char* what, const npo::Error& e) {
  std::fprintf(stderr, "npo-obs-dma-client: %s: %s\n", what, e.to_string().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 7) {
    std::fprintf(stderr, "usage: %s URI ENGINE OPS SIZE WINDOWS MBOX_ERRORS\n", argv[0]);
    return 2;
  }
  const std::string uri = argv[1];
  const auto engine = static_cast<unsigned>(std::stoul(argv[2]));
  const auto ops = static_cast<unsigned>(std::stoul(argv[3]));
  const auto size = static_cast<std::uint32_t>(std::stoul(argv[4]));
  const auto windows = static_cast<unsigned>(std::stoul(argv[5]));
  const auto mbox_errors = static_cast<unsigned>(std::stoul(argv[6]));

  // SIGTERM is taken by sigtimedwait below, not by a handler.
  sigset_t term;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &term, nullptr);

  auto sys = npo::System::open(uri);
  if (!sys) return die("open", sys.error());
  npo::Device& dev = (*sys)->device(0);
  auto q = dev.open_queue({.engine = engine, .depth = 64});
  if (!q) return die("open queue", q.error());
  auto host = npo::allocate_host_memory(dev, size);
  if (!host) return die("host memory", host.error());
  auto hbm = npo::allocate_hbm(dev, size);
  if (!hbm) return die("HBM", hbm.error());
  std::uint64_t ok = 0, error = 0, bytes = 0;
  std::array<npo::OpCompletion, 64> buf;
  auto run = [&](unsigned n, std::uint64_t src_iova) -> bool {
    for (unsigned i = 0; i < n; ++i) {
      if (!(*q)->enqueue_copy(npo::DmaAddress::host(src_iova), npo::DmaAddress::hbm(hbm->offset), size)) return false;
    }
    if (!(*q)->submit()) return false;
    unsigned done = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (done < n && std::chrono::steady_clock::now() < deadline) {
      const std::size_t k = (*q)->poll(buf);
      for (std::size_t i = 0; i < k; ++i) {
        if (buf[i].status == npo::OpStatus::kOk) {
          ++ok;
          bytes += size;
        } else {
          ++error;
        }
      }
      done += static_cast<unsigned>(k);
    }
    return done == n;
  };
  for (unsigned left = ops; left > 0;) {  // batches of at most the ring depth
    const unsigned n = left < 64 ? left : 64;
    if (!run(n, (*host)->iova())) {
      std::fprintf(stderr, "npo-obs-dma-client: DMA did not complete\n");
      return 1;
    }
    left -= n;
  }
  if (!run(1, 0x7fff'0000'0000ULL)) {  // never mapped: completes with IOMMU_FAULT
    std::fprintf(stderr, "npo-obs-dma-client: failing op did not complete\n");
    return 1;
  }
  std::vector<std::unique_ptr<npo::Window>> ws;
  auto whbm = npo::allocate_hbm(dev, std::uint64_t{windows + 1} * 4096);
  if (!whbm) return die("window HBM", whbm.error());
  for (unsigned i = 0; i < windows; ++i) {
    auto w = npo::export_window(dev, whbm->offset + std::uint64_t{i} * 4096, 4096);
    if (!w) return die("export window", w.error());
    ws.push_back(std::move(*w));
  }
  for (unsigned i = 0; i < mbox_errors; ++i) {
    std::array<std::byte, 16> x{};
    // Bank 1 is never advertised: the firmware answers PAGE_NOT_SUPPORTED.
    if (npo::read_transceiver(dev, 0, 1, 0x10, 128, x)) {
      std::fprintf(stderr, "npo-obs-dma-client: bank 1 read did not fail\n");
      return 1;
    }
  }
  std::printf("ready ok=%llu error=%llu bytes=%llu\n", static_cast<unsigned long long>(ok),
              static_cast<unsigned long long>(error), static_cast<unsigned long long>(bytes));
  std::fflush(stdout);
  timespec limit{120, 0};
  (void)sigtimedwait(&term, nullptr, &limit);
  return 0;
}
