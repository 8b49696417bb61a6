// SPDX-License-Identifier: Apache-2.0
// npo-dma-bench: DMA bandwidth and op rate of the cards' engines, each figure next to a
// memcpy baseline of the same size measured in the same run (the machines are shared and
// noisy: ratios, not absolutes). Uses only the public npo-hal API.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/backend.hpp"
#include "common/bring_up.hpp"
#include "common/cli.hpp"
#include "common/output.hpp"
#include "common/trace.hpp"
#include "npo/hal/hal.hpp"

namespace {

using npo::tools::Column;
using npo::tools::Table;

/// Program name in messages.
constexpr std::string_view kTool = "npo-dma-bench";

using Clock = std::chrono::steady_clock;

struct Options {
  std::optional<std::string> backend;  ///< --backend; unset: tools/common resolve_backend
  std::string mode = "h2d";
  std::vector<std::string> sizes = {"64", "4K", "64K", "1M", "16M"};
  unsigned batch = 32;
  unsigned queues = 1;
  unsigned iterations = 0;  // 0: auto
  unsigned depth = 1024;
  unsigned card = 0;
  int peer = -1;  // -1: card + 1
  bool json = false;
  double min_seconds = 0.2;
  std::string trace;  ///< --trace FILE
};

/// --trace: the writer, and how many ops it may still record (a long run would otherwise
/// write gigabytes; the cap and the ops left out are in the file's otherData).
npo::tools::TraceWriter* g_trace = nullptr;
constexpr std::uint64_t kMaxTracedOps = 200'000;
std::uint64_t g_traced_ops = 0;
std::uint64_t g_untraced_ops = 0;

/// Trace track of queue `q` of card `card` (npo::tools::TraceWriter tid).
std::uint32_t queue_tid(std::size_t card, std::size_t q) { return static_cast<std::uint32_t>(1 + card * 64 + q); }

/// Per queue of one measure() run under --trace: submit time of each op not yet completed.
struct QueueTrace {
  std::uint32_t tid = 0;
  std::unordered_map<npo::OpHandle, std::uint64_t> submitted;
  std::vector<npo::OpHandle> batch;  ///< handles enqueued since the last submit
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
  int src_card = 0, dst_card = 0;
  std::string first_error;          ///< status name of the first failed op
  double host_memcpy_gbps = 0;      ///< memcpy between two host buffers (THP), for reference
  std::optional<npo::Error> fatal;  ///< the failed enqueue/submit that stopped the run
  bool unreachable = false;         ///< stopped at the first kRemoteUnreachable completion
};

/// Bytes of a size option ("64", "4K", "16M"); 0 when it is not a size.
std::uint64_t parse_size(const std::string& s) {
  auto v = npo::parse_bytes(s);
  return v ? *v : 0;
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

int fail_with(std::string_view what, const npo::Error& e) { return npo::tools::fail(kTool, what, e); }

/// A cheap timestamp for the HAL-time accounting: the TSC on x86-64 (a steady_clock read costs
/// ~36 ns on these VMs, as much as the calls being timed), steady_clock elsewhere.
std::uint64_t ticks() noexcept {
#if defined(__x86_64__)
  return __rdtsc();
#else
  return static_cast<std::uint64_t>(Clock::now().time_since_epoch().count());
#endif
}
/// Nanoseconds per tick, calibrated once against steady_clock over 20 ms.
double ns_per_tick() {
  static const double v = [] {
    const auto t0 = Clock::now();
    const std::uint64_t c0 = ticks();
    while (Clock::now() - t0 < std::chrono::milliseconds(20)) {
    }
    const std::uint64_t c1 = ticks();
    return std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / static_cast<double>(c1 - c0);
  }();
  return v;
}

/// Enqueues one op of the measured kind on a queue.
using EnqueueFn = std::function<npo::Result<npo::OpHandle>(npo::DmaQueue&)>;

/// Runs `batch`-op batches of `enqueue` on every queue until `target_batches` per queue are
/// done (doubling while the run is shorter than min_seconds when iterations == 0). Keeps
/// each queue as full as its depth allows; the caller's thread does all HAL calls.
/// A failed enqueue or submit (a removed card: kUnavailable) stops the run: only the ops
/// actually enqueued are waited for, at most kDrainLimit once stopped, and the error is
/// returned in Result::fatal. So does the first kRemoteUnreachable completion (the
/// destination card is gone), without an error (Result::unreachable).
Result measure(std::vector<npo::DmaQueue*>& qs, const EnqueueFn& enqueue, std::uint64_t size, const Options& o,
               std::size_t card = 0) {
  // Once stopped, the outstanding ops complete (or the queue's watchdog fails them) well
  // within this; it only bounds the wait should a queue never report them.
  constexpr auto kDrainLimit = std::chrono::seconds(2);
  Result r;
  r.size = size;
  r.batch = std::min(o.batch, o.depth);
  r.queues = static_cast<unsigned>(qs.size());
  std::uint64_t target_batches = o.iterations;
  const bool timed = target_batches == 0;
  // Start with ~64 Ki ops or 256 MiB, whichever is less; doubled below until min_seconds.
  if (timed) {
    target_batches = std::max<std::uint64_t>(4, std::min((256ULL << 20) / (size * r.batch), 65536ULL / r.batch));
  }
  std::vector<npo::OpCompletion> comps(4096);
  std::uint64_t hal_ticks = 0, batches = 0, issued = 0, done = 0;
  // --trace: one track per queue; each op is a span from its doorbell to the poll that saw
  // its completion, with "submit" / "complete" instants listing the handles at both ends.
  std::vector<QueueTrace> traces(g_trace != nullptr ? qs.size() : 0);
  for (std::size_t i = 0; i < traces.size(); ++i) traces[i].tid = queue_tid(card, i);
  const std::string op_name = fmt::format("{} {}", o.mode, human(size));
  std::optional<Clock::time_point> stopped;  // when a failed call stopped the run
  const auto t0 = Clock::now();
  for (;;) {
    bool progressed = false;
    for (std::size_t qi = 0; qi < qs.size(); ++qi) {
      auto* q = qs[qi];
      QueueTrace* qt = traces.empty() ? nullptr : &traces[qi];
      if (!stopped && batches < target_batches * qs.size() && q->outstanding() + r.batch <= q->depth()) {
        const std::uint64_t a = ticks();
        for (unsigned b = 0; b < r.batch; ++b) {
          auto h = enqueue(*q);
          if (!h) {
            r.fatal = npo::Error(h.error()).prefixed("enqueue");
            break;
          }
          ++issued;
          if (qt != nullptr) qt->batch.push_back(*h);
        }
        const std::uint64_t submit_ns = qt != nullptr ? g_trace->now_ns() : 0;
        if (auto sr = q->submit(); !sr && !r.fatal) r.fatal = npo::Error(sr.error()).prefixed("submit");
        hal_ticks += ticks() - a;
        if (qt != nullptr && !qt->batch.empty()) {
          nlohmann::json handles = nlohmann::json::array();
          for (auto h : qt->batch) {
            if (g_traced_ops >= kMaxTracedOps) {
              ++g_untraced_ops;
              continue;
            }
            ++g_traced_ops;
            qt->submitted.emplace(h, submit_ns);
            handles.push_back(h);
          }
          if (!handles.empty())
            g_trace->instant("submit", "dma", qt->tid, submit_ns, {{"handles", std::move(handles)}});
          qt->batch.clear();
        }
        ++batches;
        progressed = true;
        if (r.fatal) stopped = Clock::now();
      }
      const std::uint64_t a = ticks();
      const std::size_t n = q->poll(comps);
      if (n > 0) {
        hal_ticks += ticks() - a;
        if (qt != nullptr) {
          const std::uint64_t done_ns = g_trace->now_ns();
          nlohmann::json handles = nlohmann::json::array();
          for (std::size_t k = 0; k < n; ++k) {
            auto it = qt->submitted.find(comps[k].handle);
            if (it == qt->submitted.end()) continue;
            const bool ok = comps[k].status == npo::OpStatus::kOk;
            g_trace->complete(op_name, ok ? "dma" : "dma,fault", qt->tid, it->second, done_ns - it->second,
                              {{"handle", comps[k].handle},
                               {"status", std::string(npo::op_status_name(comps[k].status))},
                               {"bytes", ok ? comps[k].info : 0}});
            if (!ok) {
              g_trace->instant(
                  "op error", "fault", qt->tid, done_ns,
                  {{"handle", comps[k].handle}, {"status", std::string(npo::op_status_name(comps[k].status))}});
            }
            handles.push_back(comps[k].handle);
            qt->submitted.erase(it);
          }
          if (!handles.empty())
            g_trace->instant("complete", "dma", qt->tid, done_ns, {{"handles", std::move(handles)}});
        }
        for (std::size_t k = 0; k < n; ++k) {
          if (comps[k].status != npo::OpStatus::kOk) {
            if (r.errors++ == 0) r.first_error = std::string(npo::op_status_name(comps[k].status));
            // The destination card is gone (removed, or no route left): every further op
            // would fail the same way, so stop instead of running the whole count.
            if (comps[k].status == npo::OpStatus::kRemoteUnreachable && !stopped) {
              r.unreachable = true;
              stopped = Clock::now();
            }
          }
        }
        done += n;
        progressed = true;
      }
    }
    if (stopped) {
      bool drained = true;
      for (auto* q : qs) drained = drained && q->outstanding() == 0;
      if (drained || Clock::now() - *stopped >= kDrainLimit) break;
    } else if (batches >= target_batches * qs.size() && done >= issued) {
      if (!timed || std::chrono::duration<double>(Clock::now() - t0).count() >= o.min_seconds ||
          target_batches >= (1ULL << 40)) {
        break;
      }
      target_batches *= 2;  // too quick to measure: run longer
    }
    if (!progressed) {
      // Large transfers take microseconds or more: sleep instead of spinning so the poller
      // does not compete with the engine for a core (2-core machines).
      if (size >= (256u << 10)) {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      } else {
        __builtin_ia32_pause();
      }
    }
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  r.ops = done;
  // Bandwidth and rate count successful ops only: a failed op moved nothing.
  r.gbps = static_cast<double>(size) * static_cast<double>(r.ops - r.errors) / r.seconds / 1e9;
  r.ops_per_s = static_cast<double>(r.ops - r.errors) / r.seconds;
  r.hal_ns_per_op = r.ops == 0 ? 0.0 : static_cast<double>(hal_ticks) * ns_per_tick() / static_cast<double>(r.ops);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  npo::tools::LogOptions log;
  CLI::App app{"npo-dma-bench: DMA bandwidth and op rate, with a same-run memcpy baseline per size"};
  npo::tools::add_version_flag(app, "npo-dma-bench");
  npo::tools::add_log_options(app, log);
  npo::tools::add_backend_option(
      app, o.backend, "-b,--backend",
      std::string("backend URI (") + npo::tools::kBackendDefaultHelp + "; emu:mesh8?hbm=1G for 256 MiB transfers)");
  app.add_option("-m,--mode", o.mode,
                 "h2d (host->HBM) | d2h | d2d (HBM->HBM, one card) | peer (card->card through a window) | "
                 "matrix (every card pair)")
      ->check(CLI::IsMember({"h2d", "d2h", "d2d", "peer", "matrix"}));
  app.add_option("-s,--sizes", o.sizes, "transfer sizes, 64 B .. 256 MiB (suffix K, M, G); matrix uses the largest")
      ->delimiter(',');
  app.add_option("--batch", o.batch, "ops per doorbell (submit)")->check(CLI::Range(1u, 4096u));
  app.add_option("--queues", o.queues, "queues driven round-robin, one per engine first")->check(CLI::Range(1u, 32u));
  app.add_option("--iterations", o.iterations, "batches per size per queue (0: run >= --min-seconds)");
  app.add_option("--min-seconds", o.min_seconds, "minimum run time per size when --iterations is 0");
  app.add_option("--depth", o.depth, "queue depth (power of two)");
  app.add_option("--card", o.card, "card to run on (the source card in peer mode)");
  app.add_option("--peer", o.peer, "destination card of --mode peer (default: --card + 1)");
  app.add_flag("--json", o.json, "print one JSON object with a 'results' array");
  npo::tools::add_trace_option(app, o.trace,
                               "each DMA op per queue from doorbell to completion (first 200000 ops), op errors, "
                               "and with peer/matrix the link training stages of every port");
  if (auto rc = npo::tools::parse_command_line(app, argc, argv, "npo-dma-bench")) return *rc;
  npo::tools::TraceWriter trace(o.trace);
  if (trace.enabled()) {
    g_trace = &trace;
    trace.process_name("npo-dma-bench");
  }
  // Written on every way out (also after a failed run: the trace shows what happened).
  struct TraceFlush {
    npo::tools::TraceWriter& t;
    ~TraceFlush() {
      if (!t.enabled()) return;
      if (auto w = t.write({{"tool", "npo-dma-bench"},
                            {"traced_ops", g_traced_ops},
                            {"untraced_ops", g_untraced_ops},
                            {"max_traced_ops", kMaxTracedOps}});
          !w) {
        npo::tools::fail(kTool, "--trace", w.error());
      }
    }
  } trace_flush{trace};

  if (auto r = npo::tools::configure_logging(log); !r) return fail_with("logging", r.error());
  if (!npo::tools::check_seconds(kTool, "--min-seconds", o.min_seconds)) return 2;
  std::vector<std::uint64_t> sizes;
  for (const auto& s : o.sizes) {
    const std::uint64_t v = parse_size(s);
    if (v == 0) {
      std::fprintf(stderr, "npo-dma-bench: cannot parse size '%s' (examples: 64, 4K, 1M, 256M)\n", s.c_str());
      return 2;
    }
    if (v < 64 || v > (256ULL << 20)) {
      std::fprintf(stderr, "npo-dma-bench: size '%s' outside 64 B .. 256 MiB\n", s.c_str());
      return 2;
    }
    sizes.push_back(v);
  }
  const bool fabric = o.mode == "peer" || o.mode == "matrix";
  // On emu-remote the cards it runs on are attached as owner, the others read-only (a job
  // holding them does not stop the benchmark); matrix mode uses every card.
  const std::string given_uri = npo::tools::backend_uri(o.backend, "npo-dma-bench");
  std::string uri = given_uri;
  if (o.mode != "matrix") {
    std::vector<unsigned> mine{o.card};
    if (o.mode == "peer") mine.push_back(o.peer < 0 ? o.card + 1 : static_cast<unsigned>(o.peer));
    uri = npo::tools::owner_uri(uri, mine);
  }
  auto sys = npo::System::open(uri);
  if (!sys && sys.error().code() == npo::Code::kNotFound && uri != given_uri) {
    // A --card/--peer the daemon does not serve: open every card, so the check below says
    // "card N not present" (a bad command line) as on every other backend.
    uri = given_uri;
    sys = npo::System::open(uri);
  }
  if (!sys) {
    fail_with("open " + uri, sys.error());
    return npo::tools::open_failure_status(sys.error());
  }
  auto& s = **sys;
  const std::size_t ncards = s.device_count();
  if (o.card >= ncards) {
    std::fprintf(stderr, "npo-dma-bench: card %u not present (%zu cards)\n", o.card, ncards);
    return 2;
  }
  const unsigned peer = o.peer >= 0 ? static_cast<unsigned>(o.peer) : static_cast<unsigned>((o.card + 1) % ncards);
  if (fabric && peer >= ncards) {
    std::fprintf(stderr, "npo-dma-bench: --peer %u: no such card (%zu cards)\n", peer, ncards);
    return 2;
  }
  if (fabric && (ncards < 2 || peer == o.card)) {
    std::fprintf(stderr, "npo-dma-bench: mode %s needs two distinct cards (card %u, peer %u of %zu)\n", o.mode.c_str(),
                 o.card, peer, ncards);
    return 2;
  }
  // Default sizes that do not fit the cards' HBM are dropped with a note; explicit ones are an error.
  const std::uint64_t hbm_min = [&] {
    std::uint64_t m = ~0ULL;
    for (std::size_t c = 0; c < ncards; ++c) m = std::min(m, s.device(c).info().hbm_bytes);
    return m;
  }();
  const std::uint64_t per_size = o.mode == "h2d" || o.mode == "d2h" ? 1 : 2;
  if (app.count("--sizes") == 0) {
    std::vector<std::uint64_t> fit;
    for (auto v : sizes) {
      if (v * per_size <= hbm_min) {
        fit.push_back(v);
      } else if (!o.json) {
        fmt::print("note: size {} skipped: needs {} of HBM per card, cards have {}\n", human(v), human(v * per_size),
                   human(hbm_min));
      }
    }
    if (fit.empty()) fit.push_back(64);
    sizes = fit;
  }
  if (o.mode == "matrix") sizes = {*std::max_element(sizes.begin(), sizes.end())};
  const std::uint64_t max_size = *std::max_element(sizes.begin(), sizes.end());
  for (std::size_t c = 0; c < ncards; ++c) {
    const std::uint64_t need = o.mode == "h2d" || o.mode == "d2h" ? max_size : 2 * max_size;
    if ((c == o.card || fabric) && need > s.device(c).info().hbm_bytes) {
      std::fprintf(stderr, "npo-dma-bench: mode %s with %s transfers needs %s of HBM per card; card %zu has %s\n",
                   o.mode.c_str(), human(max_size).c_str(), human(need).c_str(), c,
                   human(s.device(c).info().hbm_bytes).c_str());
      return 2;
    }
  }
  npo::RouteTable routes = npo::RouteTable::compute({}).value();
  if (fabric) {
    // Routes over the discovered graph, so cards that are not direct neighbours are reached
    // over several hops (registers.md §8).
    const std::uint64_t bring_up_ns = trace.now_ns();
    auto brought =
        npo::tools::bring_up(s, {.timeout_ns = npo::tools::kDefaultBringUpTimeoutNs, .program_routes = true});
    if (!brought) return fail_with(brought.error().step, brought.error().error);
    const npo::LinkBringUp& up = brought->links;
    npo::tools::trace_training(trace, up, bring_up_ns);
    routes = std::move(brought->routes);
    if (!o.json) {
      fmt::print(
          "npo-dma-bench: this run's bring-up: {} of {} ports with a module trained Up in {:.1f} ms; routes "
          "programmed, diameter {} hops\n",
          up.up, up.ports_with_module, static_cast<double>(up.elapsed_ns) / 1e6, routes.diameter());
    }
  }

  // Per card: a source HBM range, a destination HBM range (exported as a window in fabric
  // modes), queues. Host buffers on --card for h2d/d2h and the memcpy baseline.
  struct CardRig {
    npo::HbmRange src{}, dst{};
    std::unique_ptr<npo::Window> window;
    std::vector<std::unique_ptr<npo::DmaQueue>> queues;
  };
  std::vector<CardRig> rigs(ncards);
  for (std::size_t c = 0; c < ncards; ++c) {
    if (!fabric && c != o.card) continue;
    if (o.mode == "peer" && c != o.card && c != peer) continue;
    auto& dev = s.device(c);
    auto& rig = rigs[c];
    auto a = npo::allocate_hbm(dev, max_size, 2u << 20);
    if (!a) return fail_with("HBM", a.error());
    rig.src = *a;
    if (o.mode != "h2d" && o.mode != "d2h") {
      auto b = npo::allocate_hbm(dev, max_size, 2u << 20);
      if (!b) return fail_with("HBM", b.error());
      rig.dst = *b;
    }
    if (fabric) {
      auto w = npo::export_window(dev, rig.dst.offset, (max_size + 4095) & ~std::uint64_t{4095});
      if (!w) return fail_with("export window", w.error());
      rig.window = std::move(*w);
    }
    const auto caps = dev.dma_capabilities();
    for (unsigned i = 0; i < o.queues; ++i) {
      auto q = dev.open_queue({.engine = i % caps.engines, .depth = o.depth});
      if (!q) return fail_with("open queue", q.error());
      trace.thread_name(queue_tid(c, i), fmt::format("card {} queue {} (engine {})", c, i, i % caps.engines),
                        static_cast<int>(queue_tid(c, i)));
      rig.queues.push_back(std::move(*q));
    }
  }
  npo::Device& dev = s.device(o.card);
  auto hsrc = npo::allocate_host_memory(dev, max_size);
  auto hdst = npo::allocate_host_memory(dev, max_size);
  if (!hsrc) return fail_with("host buffer", hsrc.error());
  if (!hdst) return fail_with("host buffer", hdst.error());
  std::memset((*hsrc)->bytes().data(), 0x5a, max_size);

  // CPU views of the HBM ranges the DMA touches (through windows and the BAR2 aperture), so
  // the memcpy baseline copies between the same kinds of memory as the engine does.
  std::vector<std::unique_ptr<npo::Window>> view_windows;
  std::vector<std::unique_ptr<npo::WindowMapping>> views;
  auto hbm_view = [&](std::size_t card, npo::HbmRange r) -> std::byte* {
    auto w = npo::export_window(s.device(card), r.offset, (max_size + 4095) & ~std::uint64_t{4095});
    if (!w) return nullptr;
    auto m = npo::map_window(s.device(card), **w);
    if (!m) return nullptr;
    std::byte* p = (*m)->bytes().data();
    view_windows.push_back(std::move(*w));
    views.push_back(std::move(*m));
    return p;
  };
  // Baseline source and destination per mode: host<->HBM, HBM->HBM on a card, or HBM of one
  // card to HBM of another (peer, matrix). Falls back to host->host if a view cannot be made.
  std::byte* base_src = (*hsrc)->bytes().data();
  std::byte* base_dst = (*hdst)->bytes().data();
  {
    const std::size_t dst_card = o.mode == "peer" ? peer : (o.mode == "matrix" ? (o.card + 1) % ncards : o.card);
    std::byte* a = hbm_view(o.card, rigs[o.card].src);
    std::byte* b = o.mode == "h2d" || o.mode == "d2h" ? nullptr : hbm_view(dst_card, rigs[dst_card].dst);
    if (o.mode == "h2d" && a) base_dst = a;
    if (o.mode == "d2h" && a) base_src = a;
    if (o.mode != "h2d" && o.mode != "d2h" && a && b) {
      base_src = a;
      base_dst = b;
    }
  }

  auto queues_of = [&](std::size_t c) {
    std::vector<npo::DmaQueue*> v;
    for (auto& q : rigs[c].queues) v.push_back(q.get());
    return v;
  };
  std::vector<Result> results;
  std::vector<std::vector<double>> matrix(ncards, std::vector<double>(ncards, 0.0));
  std::vector<std::vector<bool>> matrix_err(ncards, std::vector<bool>(ncards, false));
  for (const std::uint64_t size : sizes) {
    const auto len = static_cast<std::uint32_t>(size);
    const std::uint64_t mc_ops = std::max<std::uint64_t>(4, (512ULL << 20) / size);
    const double mc = memcpy_gbps(base_dst, base_src, size, mc_ops);
    const double host_mc = memcpy_gbps((*hdst)->bytes().data(), (*hsrc)->bytes().data(), size, mc_ops);
    auto finish = [&](Result r, int src_card, int dst_card) {
      if (r.unreachable && !r.fatal) {
        // Unreachable because the destination card was removed? Then the run is over (a
        // removed card's mailbox answers at once: kUnavailable).
        if (auto hb = s.device(static_cast<std::size_t>(dst_card)).heartbeat();
            !hb && hb.error().code() == npo::Code::kUnavailable) {
          r.fatal = npo::Error(hb.error()).prefixed(fmt::format("destination card {}", dst_card));
        }
      }
      r.mode = o.mode;
      r.src_card = src_card;
      r.dst_card = dst_card;
      r.memcpy_gbps = mc;
      r.host_memcpy_gbps = host_mc;
      r.ratio = r.gbps / mc;
      results.push_back(r);
      return !r.fatal;
    };
    if (o.mode == "matrix") {
      for (std::size_t i = 0; i < ncards; ++i) {
        auto qs = queues_of(i);
        for (std::size_t j = 0; j < ncards; ++j) {
          if (i == j) continue;
          const auto& h = rigs[j].window->handle();
          const auto src = npo::DmaAddress::hbm(rigs[i].src.offset);
          auto r = measure(
              qs, [&](npo::DmaQueue& q) { return q.enqueue_remote_write(src, h, 0, len); }, size, o, i);
          matrix[i][j] = r.gbps;
          matrix_err[i][j] = r.errors != 0;
          if (!finish(r, static_cast<int>(i), static_cast<int>(j))) break;
        }
        if (results.back().fatal) break;
      }
      if (results.back().fatal) break;
      continue;
    }
    auto qs = queues_of(o.card);
    EnqueueFn fn;
    const auto& rig = rigs[o.card];
    if (o.mode == "h2d") {
      fn = [&, src = npo::DmaAddress::host((*hsrc)->iova()),
            dst = npo::DmaAddress::hbm(rig.src.offset)](npo::DmaQueue& q) { return q.enqueue_copy(src, dst, len); };
    } else if (o.mode == "d2h") {
      fn = [&, src = npo::DmaAddress::hbm(rig.src.offset),
            dst = npo::DmaAddress::host((*hdst)->iova())](npo::DmaQueue& q) { return q.enqueue_copy(src, dst, len); };
    } else if (o.mode == "d2d") {
      fn = [&, src = npo::DmaAddress::hbm(rig.src.offset),
            dst = npo::DmaAddress::hbm(rig.dst.offset)](npo::DmaQueue& q) { return q.enqueue_copy(src, dst, len); };
    } else {  // peer
      fn = [&, src = npo::DmaAddress::hbm(rig.src.offset), &h = rigs[peer].window->handle()](npo::DmaQueue& q) {
        return q.enqueue_remote_write(src, h, 0, len);
      };
    }
    if (!finish(measure(qs, fn, size, o, o.card), static_cast<int>(o.card),
                o.mode == "peer" ? static_cast<int>(peer) : static_cast<int>(o.card))) {
      break;
    }
  }
  // "card N" or, over the fabric, "card N -> M".
  const auto cards_of = [&](const Result& r) {
    return fabric ? fmt::format("card {} -> {}", r.src_card, r.dst_card) : fmt::format("card {}", r.src_card);
  };
  // A failed enqueue or submit (the card was removed): no table, the error and the ops that
  // did complete, exit 1.
  if (!results.empty() && results.back().fatal) {
    const auto& r = results.back();
    const npo::Error& e = *r.fatal;
    std::fprintf(stderr, "npo-dma-bench: %s %s %s: stopped after %llu ops (%llu failed%s%s): %s\n", r.mode.c_str(),
                 human(r.size).c_str(), cards_of(r).c_str(), static_cast<unsigned long long>(r.ops),
                 static_cast<unsigned long long>(r.errors), r.errors != 0 ? ", first: " : "", r.first_error.c_str(),
                 e.to_string().c_str());
    return 1;
  }

  // The batch a run used: --batch, at most the queue depth (measure()).
  const unsigned batch = std::min(o.batch, o.depth);
  const std::string batch_text =
      batch == o.batch ? fmt::format("{}", batch) : fmt::format("{} (--batch {} limited by --depth)", batch, o.batch);
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
                     {"host_memcpy_gbps", r.host_memcpy_gbps},
                     {"hal_ns_per_op", r.hal_ns_per_op},
                     {"src_card", r.src_card},
                     {"dst_card", r.dst_card},
                     {"errors", r.errors}});
    }
    nlohmann::json out = {{"backend", s.uri()}, {"card", o.card}, {"results", arr}};
    npo::tools::print_json(out);
  } else if (o.mode == "matrix") {
    fmt::print("npo-dma-bench  backend {}  mode matrix  size {}  batch {}  queues {}  depth {}\n", s.uri(),
               human(sizes[0]), batch_text, o.queues, o.depth);
    fmt::print(
        "remote-write bandwidth, GB/s (row: source card, column: destination card; ERR: ops failed, see\n"
        "stderr); memcpy of the same size {:.2f} GB/s\n"
        "A cell: the row card's engine writes from its HBM into the column card's HBM through that card's window;\n"
        "memcpy: the CPU copies {}, once, before the\n"
        "pairs. The emulator moves bytes with the CPU, so a cell above memcpy beat that one 4 KiB-page copy (or ran\n"
        "in a quieter moment), not an optical link: compare cells with each other; --mode peer gives a ratio.\n\n",
        results.empty() ? 0.0 : results[0].memcpy_gbps,
        base_src != (*hsrc)->bytes().data()
            ? fmt::format("card {}'s HBM to card {}'s through their 4 KiB-page mappings", o.card, (o.card + 1) % ncards)
            : std::string("between two host buffers (no HBM view could be mapped)"));
    if (ncards <= 16) {
      std::vector<Column> cols(ncards + 1, Column{.header = "", .width = 7});
      cols[0] = {.header = "", .width = 6, .before = ""};
      const Table table(std::move(cols));
      std::vector<std::string> cells{""};
      for (std::size_t j = 0; j < ncards; ++j) cells.push_back(fmt::format("{}", j));
      std::fputs(table.row_of(cells).c_str(), stdout);
      for (std::size_t i = 0; i < ncards; ++i) {
        cells = {fmt::format("{}", i)};
        for (std::size_t j = 0; j < ncards; ++j) {
          if (i == j) {
            cells.emplace_back("-");
          } else {
            cells.push_back(matrix_err[i][j] ? std::string("ERR") : fmt::format("{:.2f}", matrix[i][j]));
          }
        }
        std::fputs(table.row_of(cells).c_str(), stdout);
      }
    } else {
      // Too many columns to read: the card pairs grouped by the hops their route takes.
      std::map<int, std::vector<double>> by_hops;
      std::map<int, unsigned> errs;
      for (std::size_t i = 0; i < ncards; ++i) {
        for (std::size_t j = 0; j < ncards; ++j) {
          if (i == j) continue;
          const int h = routes.hops(s.device(i).info().fabric_id, s.device(j).info().fabric_id);
          if (matrix_err[i][j]) {
            ++errs[h];
          } else {
            by_hops[h].push_back(matrix[i][j]);
          }
        }
      }
      fmt::print("{} cards: {} ordered pairs, grouped by the hops of their route (--json has every pair)\n\n", ncards,
                 ncards * (ncards - 1));
      const Table table({{"HOPS", 6, Column::Align::kRight, ""},
                         {"PAIRS", 7},
                         {"MIN GB/s", 9},
                         {"MEDIAN", 9},
                         {"MAX GB/s", 9},
                         {"ERR", 7}});
      table.print_header();
      std::set<int> hops;
      for (const auto& [h, v] : by_hops) hops.insert(h);
      for (const auto& [h, n] : errs) hops.insert(h);
      for (const int h : hops) {
        auto v = by_hops[h];
        std::sort(v.begin(), v.end());
        const auto cell = [&](double x) { return v.empty() ? std::string("-") : fmt::format("{:.2f}", x); };
        table.print_row(h < 0 ? std::string("unreach") : std::to_string(h), v.size() + errs[h],
                        cell(v.empty() ? 0 : v.front()), cell(v.empty() ? 0 : v[v.size() / 2]),
                        cell(v.empty() ? 0 : v.back()), errs[h]);
      }
    }
  } else {
    fmt::print("npo-dma-bench  backend {}  card {}{}  mode {}  batch {}  queues {}  depth {}\n\n", s.uri(), o.card,
               o.mode == "peer" ? fmt::format(" -> card {}", peer) : std::string(), o.mode, batch_text, o.queues,
               o.depth);
    const Table table({{"SIZE", 8, Column::Align::kRight, ""},
                       {"OPS", 10},
                       {"GB/s", 9},
                       {"OPS/s", 12},
                       {"memcpy GB/s", 12},
                       {"RATIO", 8},
                       {"host memcpy", 12},
                       {"RATIO_H", 8},
                       {"HAL ns/op", 10},
                       {"ERRORS", 7}});
    table.print_header();
    for (const auto& r : results) {
      table.print_row(human(r.size), r.ops, fmt::format("{:.2f}", r.gbps), fmt::format("{:.0f}", r.ops_per_s),
                      fmt::format("{:.2f}", r.memcpy_gbps), fmt::format("{:.2f}", r.ratio),
                      fmt::format("{:.2f}", r.host_memcpy_gbps), fmt::format("{:.2f}", r.gbps / r.host_memcpy_gbps),
                      fmt::format("{:.1f}", r.hal_ns_per_op), r.errors);
    }
    fmt::print(
        "\nGB/s = 1e9 bytes/s of successful ops, end to end (enqueue to completion). memcpy GB/s: CPU memcpy of the "
        "same\n"
        "size between the same memories (HBM through the BAR2 aperture), same run; RATIO = GB/s / that. host memcpy:\n"
        "memcpy between two host buffers (huge pages), RATIO_H = GB/s / that. The two baselines differ because the\n"
        "emulated HBM is a memfd with 4 KiB pages. HAL ns/op: caller time in enqueue+submit+poll per op, no "
        "waiting\n"
        "(on emu-remote, where the owner runs its card's engines, the doorbell in submit runs the copies: they "
        "count).\n"
        "Header: batch = ops enqueued per doorbell (--batch), queues = DMA queues driven round-robin (--queues),\n"
        "depth = entries of each submission queue (--depth). Small sizes: RATIO near 0 is expected -- the memcpy\n"
        "baseline copies the same few bytes again and again from the CPU cache, while every DMA op pays its\n"
        "descriptor, doorbell share and completion; judge small ops by OPS/s and HAL ns/op, bandwidth from 64K up.\n");
  }
  std::uint64_t errs = 0;
  for (const auto& r : results) errs += r.errors;
  if (errs != 0) {
    for (const auto& r : results) {
      if (r.errors == 0) continue;
      std::fprintf(stderr, "npo-dma-bench: %s %s %s: %llu of %llu ops failed (first: %s)%s\n", r.mode.c_str(),
                   human(r.size).c_str(), cards_of(r).c_str(), static_cast<unsigned long long>(r.errors),
                   static_cast<unsigned long long>(r.ops), r.first_error.c_str(),
                   r.unreachable ? fmt::format("; run stopped: card {} unreachable", r.dst_card).c_str() : "");
    }
  }
  return errs == 0 ? 0 : 1;
}
