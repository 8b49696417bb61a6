// SPDX-License-Identifier: Apache-2.0
// npo-dma-bench: DMA bandwidth and op rate of the cards' engines, each figure next to a
// memcpy baseline of the same size measured in the same run (the machines are shared and
// noisy: ratios, not absolutes). Uses only the public npo-hal API.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "npo/hal/hal.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string uri = "emu:mesh8?hbm=512M";
  std::string mode = "h2d";
  std::vector<std::string> sizes = {"64", "4K", "64K", "1M", "16M", "64M"};
  unsigned batch = 32;
  unsigned queues = 1;
  unsigned iterations = 0;  // 0: auto
  unsigned depth = 1024;
  unsigned card = 0;
  bool json = false;
  double min_seconds = 0.2;
};

struct Result {
  std::string mode;
  std::uint64_t size = 0;
  unsigned batch = 0, queues = 0;
  std::uint64_t ops = 0;
  double seconds = 0, gbps = 0, ops_per_s = 0;
  double memcpy_gbps = 0, ratio = 0;
  double hal_ns_per_op = 0;  ///< caller CPU time in enqueue+submit+non-empty poll, per op
  std::uint64_t errors = 0;
};

std::uint64_t parse_size(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  std::uint64_t mult = 1;
  if (end != nullptr && *end != '\0') {
    switch (*end) {
      case 'K': case 'k': mult = 1ULL << 10; break;
      case 'M': case 'm': mult = 1ULL << 20; break;
      case 'G': case 'g': mult = 1ULL << 30; break;
      default: return 0;
    }
    if (end[1] != '\0' && !(end[1] == 'B' && end[2] == '\0') && !(end[1] == 'i' && end[2] == 'B' && end[3] == '\0')) return 0;
  }
  if (!(v > 0)) return 0;
  return static_cast<std::uint64_t>(v * static_cast<double>(mult));
}

std::string human(std::uint64_t b) {
  if (b >= (1ULL << 30) && b % (1ULL << 30) == 0) return fmt::format("{}G", b >> 30);
  if (b >= (1ULL << 20) && b % (1ULL << 20) == 0) return fmt::format("{}M", b >> 20);
  if (b >= (1ULL << 10) && b % (1ULL << 10) == 0) return fmt::format("{}K", b >> 10);
  return fmt::format("{}", b);
}

/// memcpy bandwidth for `size`-byte copies between two distinct buffers, `ops` copies.
double memcpy_gbps(std::byte* dst, const std::byte* src, std::uint64_t size, std::uint64_t ops) {
  const auto t0 = Clock::now();
  for (std::uint64_t i = 0; i < ops; ++i) {
    std::memcpy(dst, src, size);
    asm volatile("" ::: "memory");  // keep every copy
  }
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  return static_cast<double>(size) * static_cast<double>(ops) / s / 1e9;
}

int fail_with(const std::string& what, const npo::Error& e) {
  std::fprintf(stderr, "npo-dma-bench: %s: %s\n", what.c_str(), e.to_string().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"npo-dma-bench: DMA bandwidth and op rate, with a same-run memcpy baseline per size"};
  app.add_option("-b,--backend", o.uri, "backend URI (default emu:mesh8 with 512 MiB HBM per card)");
  app.add_option("-m,--mode", o.mode, "h2d | d2h | d2d | peer | matrix")
      ->check(CLI::IsMember({"h2d", "d2h", "d2d", "peer", "matrix"}));
  app.add_option("-s,--sizes", o.sizes, "transfer sizes, 64 B .. 256 MiB (suffix K, M, G)")->delimiter(',');
  app.add_option("--batch", o.batch, "ops per doorbell (submit)")->check(CLI::Range(1u, 4096u));
  app.add_option("--queues", o.queues, "queues driven round-robin, one per engine first")->check(CLI::Range(1u, 32u));
  app.add_option("--iterations", o.iterations, "batches per size per queue (0: run >= --min-seconds)");
  app.add_option("--min-seconds", o.min_seconds, "minimum run time per size when --iterations is 0");
  app.add_option("--depth", o.depth, "queue depth (power of two)");
  app.add_option("--card", o.card, "card to run on");
  app.add_flag("--json", o.json, "print one JSON object with a 'results' array");
  CLI11_PARSE(app, argc, argv);

  if (auto r = npo::log::configure({}); !r) return fail_with("logging", r.error());
  if (o.mode == "peer" || o.mode == "matrix") {
    std::fprintf(stderr,
                 "npo-dma-bench: mode '%s' moves data card to card through peer windows, which are not built yet "
                 "(windows issue); available now: h2d, d2h, d2d\n",
                 o.mode.c_str());
    return 2;
  }
  std::vector<std::uint64_t> sizes;
  for (const auto& s : o.sizes) {
    const std::uint64_t v = parse_size(s);
    if (v < 64 || v > (256ULL << 20)) {
      std::fprintf(stderr, "npo-dma-bench: size '%s' outside 64 B .. 256 MiB\n", s.c_str());
      return 2;
    }
    sizes.push_back(v);
  }
  auto sys = npo::System::open(o.uri);
  if (!sys) return fail_with("open " + o.uri, sys.error());
  if (o.card >= (*sys)->device_count()) {
    std::fprintf(stderr, "npo-dma-bench: card %u not present (%zu cards)\n", o.card, (*sys)->device_count());
    return 2;
  }
  npo::Device& dev = (*sys)->device(o.card);
  const auto caps = dev.dma_capabilities();
  const std::uint64_t max_size = *std::max_element(sizes.begin(), sizes.end());
  {
    if (2 * max_size > dev.info().hbm_bytes && o.mode == "d2d") {
      std::fprintf(stderr, "npo-dma-bench: d2d of %s needs 2x that in HBM; card has %s\n", human(max_size).c_str(),
                   human(dev.info().hbm_bytes).c_str());
      return 2;
    }
    if (max_size > dev.info().hbm_bytes) {
      std::fprintf(stderr, "npo-dma-bench: size %s exceeds the card's HBM (%s)\n", human(max_size).c_str(),
                   human(dev.info().hbm_bytes).c_str());
      return 2;
    }
  }
  std::vector<std::unique_ptr<npo::DmaQueue>> qs;
  for (unsigned i = 0; i < o.queues; ++i) {
    auto q = dev.open_queue({.engine = i % caps.engines, .depth = o.depth});
    if (!q) return fail_with("open queue", q.error());
    qs.push_back(std::move(*q));
  }
  // Two host buffers (source/destination) of the largest size, and two HBM ranges.
  auto hsrc = npo::allocate_host_memory(dev, max_size);
  auto hdst = npo::allocate_host_memory(dev, max_size);
  if (!hsrc) return fail_with("host buffer", hsrc.error());
  if (!hdst) return fail_with("host buffer", hdst.error());
  std::memset((*hsrc)->bytes().data(), 0x5a, max_size);
  auto hbm_a = npo::allocate_hbm(dev, max_size, 2u << 20);
  if (!hbm_a) return fail_with("HBM", hbm_a.error());
  npo::Result<npo::HbmRange> hbm_b = npo::HbmRange{};
  if (o.mode == "d2d") {
    hbm_b = npo::allocate_hbm(dev, max_size, 2u << 20);
    if (!hbm_b) return fail_with("HBM", hbm_b.error());
  }

  std::vector<Result> results;
  std::vector<npo::OpCompletion> comps(4096);
  for (const std::uint64_t size : sizes) {
    npo::DmaAddress src, dst;
    if (o.mode == "h2d") {
      src = npo::DmaAddress::host((*hsrc)->iova());
      dst = npo::DmaAddress::hbm(hbm_a->offset);
    } else if (o.mode == "d2h") {
      src = npo::DmaAddress::hbm(hbm_a->offset);
      dst = npo::DmaAddress::host((*hdst)->iova());
    } else {
      src = npo::DmaAddress::hbm(hbm_a->offset);
      dst = npo::DmaAddress::hbm(hbm_b->offset);
    }
    const unsigned batch = std::min(o.batch, o.depth);
    // Auto iterations: enough batches to move >= 256 MiB or 64k ops, re-checked against time.
    std::uint64_t target_batches = o.iterations;
    const bool timed = target_batches == 0;
    if (timed) target_batches = std::max<std::uint64_t>(8, (256ULL << 20) / (size * batch));
    Result r;
    r.mode = o.mode;
    r.size = size;
    r.batch = batch;
    r.queues = o.queues;
    std::uint64_t hal_ns = 0;
    const auto t0 = Clock::now();
    std::uint64_t issued_batches = 0, done_ops = 0;
    std::vector<std::uint64_t> in_flight(qs.size(), 0);
    for (;;) {
      bool progressed = false;
      for (std::size_t qi = 0; qi < qs.size(); ++qi) {
        auto& q = *qs[qi];
        if (issued_batches < target_batches * qs.size() && q.outstanding() + batch <= q.depth()) {
          const auto a = Clock::now();
          for (unsigned b = 0; b < batch; ++b) {
            if (!q.enqueue_copy(src, dst, static_cast<std::uint32_t>(size))) break;
          }
          (void)q.submit();
          hal_ns += static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - a).count());
          ++issued_batches;
          progressed = true;
        }
        const auto a = Clock::now();
        const std::size_t n = q.poll(comps);
        if (n > 0) {
          hal_ns += static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - a).count());
          for (std::size_t k = 0; k < n; ++k) r.errors += comps[k].status != npo::OpStatus::kOk;
          done_ops += n;
          progressed = true;
        }
      }
      if (issued_batches >= target_batches * qs.size() && done_ops >= issued_batches * batch) {
        if (!timed || std::chrono::duration<double>(Clock::now() - t0).count() >= o.min_seconds ||
            target_batches >= (1ULL << 40)) {
          break;
        }
        target_batches *= 2;  // too quick to measure: run longer
      }
      if (!progressed) {
        // Large transfers take microseconds or more: sleep instead of spinning so the
        // poller does not compete with the engine for the core (2-core machines).
        if (size >= (256u << 10)) {
          std::this_thread::sleep_for(std::chrono::microseconds(20));
        } else {
          __builtin_ia32_pause();
        }
      }
    }
    r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    r.ops = done_ops;
    r.gbps = static_cast<double>(size) * static_cast<double>(r.ops) / r.seconds / 1e9;
    r.ops_per_s = static_cast<double>(r.ops) / r.seconds;
    r.hal_ns_per_op = static_cast<double>(hal_ns) / static_cast<double>(r.ops);
    // memcpy baseline: same size, same count (capped to ~the same time), distinct buffers.
    const std::uint64_t mc_ops = std::max<std::uint64_t>(1, std::min<std::uint64_t>(r.ops, (1ULL << 31) / size));
    r.memcpy_gbps = memcpy_gbps((*hdst)->bytes().data(), (*hsrc)->bytes().data(), size, mc_ops);
    r.ratio = r.gbps / r.memcpy_gbps;
    results.push_back(r);
  }

  if (o.json) {
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& r : results) {
      arr.push_back({{"mode", r.mode},
                     {"size_bytes", r.size},
                     {"batch", r.batch},
                     {"queues", r.queues},
                     {"ops", r.ops},
                     {"seconds", r.seconds},
                     {"gbps", r.gbps},
                     {"ops_per_s", r.ops_per_s},
                     {"memcpy_gbps", r.memcpy_gbps},
                     {"ratio_to_memcpy", r.ratio},
                     {"hal_ns_per_op", r.hal_ns_per_op},
                     {"errors", r.errors}});
    }
    nlohmann::json out = {{"backend", (*sys)->uri()}, {"card", o.card}, {"results", arr}};
    std::puts(out.dump(2).c_str());
  } else {
    fmt::print("npo-dma-bench  backend {}  card {}  mode {}  batch {}  queues {}  depth {}\n\n", (*sys)->uri(), o.card,
               o.mode, o.batch, o.queues, o.depth);
    fmt::print("{:>8} {:>10} {:>9} {:>12} {:>12} {:>8} {:>10} {:>7}\n", "SIZE", "OPS", "GB/s", "OPS/s", "memcpy GB/s",
               "RATIO", "HAL ns/op", "ERRORS");
    for (const auto& r : results) {
      fmt::print("{:>8} {:>10} {:>9.2f} {:>12.0f} {:>12.2f} {:>8.2f} {:>10.1f} {:>7}\n", human(r.size), r.ops, r.gbps,
                 r.ops_per_s, r.memcpy_gbps, r.ratio, r.hal_ns_per_op, r.errors);
    }
    fmt::print(
        "\nGB/s = 1e9 bytes/s end to end (enqueue to completion). memcpy GB/s: host memcpy of the same size in the same\n"
        "run. RATIO = GB/s / memcpy GB/s. HAL ns/op: caller time in enqueue+submit+poll per op (excludes waiting).\n");
  }
  std::uint64_t errs = 0;
  for (const auto& r : results) errs += r.errors;
  return errs == 0 ? 0 : 1;
}
