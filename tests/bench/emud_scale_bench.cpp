// SPDX-License-Identifier: Apache-2.0
// npo-emud at scale (issue 13 point 9): starts a daemon on TOPOLOGY (default emu:1024?hbm=4M;
// for the figure a generated fat-tree: `npo-emu topo generate fat-tree --cards 1024
// --hbm 1M -o ft.yaml`), reports the time to its "ready" line and its peak RSS, then forks
// CLIENTS processes (default 64), each opening one card and moving 1 MiB host->HBM copies for
// SECONDS, all at once, and reports the aggregate rate. Figures are printed, never asserted.
// Usage: npo-emud-scale-bench [TOPOLOGY [CLIENTS [SECONDS]]]
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "common/emud_process.hpp"
#include "npo/hal/dma.hpp"
#include "npo/hal/memory.hpp"
#include "npo/hal/system.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double secs(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// VmHWM of `pid` in bytes (0 if unreadable).
double peak_rss(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string k;
  double kb = 0;
  while (f >> k) {
    if (k == "VmHWM:") {
      f >> kb;
      break;
    }
  }
  return kb * 1024;
}

/// One client: bytes moved in `seconds` on `card`, written to `out` (a double), or -1.
int client(const std::string& uri, unsigned card, double seconds, int start_fd, int out) {
  auto sys = npo::System::open(uri + "?card=" + std::to_string(card));
  if (!sys) return 2;
  auto& dev = (*sys)->device(0);
  constexpr std::size_t kLen = 1u << 20;
  auto q = dev.open_queue({.engine = 0, .depth = 64});
  auto mem = npo::allocate_host_memory(dev, kLen);
  if (!q || !mem) return 3;
  char go = 0;
  if (::read(start_fd, &go, 1) != 1) return 4;  // all clients start together
  std::vector<npo::OpCompletion> buf(16);
  double bytes = 0;
  const auto t0 = Clock::now();
  while (secs(t0) < seconds) {
    for (int i = 0; i < 4; ++i)
      (void)(*q)->enqueue_copy(npo::DmaAddress::host((*mem)->iova()), npo::DmaAddress::hbm(0), kLen);
    (void)(*q)->submit();
    std::size_t got = 0;
    while (got < 4) {
      const std::size_t n = (*q)->poll(buf);
      for (std::size_t i = 0; i < n; ++i)
        if (buf[i].status == npo::OpStatus::kOk) bytes += kLen;
      got += n;
    }
  }
  const double rate = bytes / secs(t0);
  return ::write(out, &rate, sizeof rate) == sizeof rate ? 0 : 5;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string topology = argc > 1 ? argv[1] : "emu:1024?hbm=4M";
  const unsigned clients = argc > 2 ? static_cast<unsigned>(std::atoi(argv[2])) : 64;
  const double seconds = argc > 3 ? std::atof(argv[3]) : 2.0;
  npo_test::EmudProcess d;
  const auto t0 = Clock::now();
  if (!d.start(NPO_EMUD, topology, {}, 120000)) {
    std::fprintf(stderr, "npo-emud did not start:\n%s\n", d.output().c_str());
    return 1;
  }
  const double ready_s = secs(t0);
  const double rss_ready = peak_rss(d.pid());
  int start[2], results[2];
  if (::pipe(start) != 0 || ::pipe(results) != 0) return 1;
  std::vector<pid_t> pids;
  for (unsigned c = 0; c < clients; ++c) {
    const pid_t p = ::fork();
    if (p == 0) ::_exit(client(d.uri(), c, seconds, start[0], results[1]));
    pids.push_back(p);
  }
  ::usleep(500000);  // let every client open its card and allocate
  for (unsigned c = 0; c < clients; ++c) (void)::write(start[1], "g", 1);
  double total = 0;
  unsigned ok = 0;
  for (unsigned c = 0; c < clients; ++c) {
    int st = 0;
    ::waitpid(pids[c], &st, 0);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) ++ok;
  }
  for (unsigned c = 0; c < ok; ++c) {
    double r = 0;
    if (::read(results[0], &r, sizeof r) == sizeof r) total += r;
  }
  const double rss_end = peak_rss(d.pid());
  std::printf("npo-emud scale: topology %s\n", topology.c_str());
  std::printf("  ready            %.2f s (from exec to the ready line)\n", ready_s);
  std::printf("  daemon peak RSS  %.0f MiB at ready, %.0f MiB after the clients\n", rss_ready / 1048576.0,
              rss_end / 1048576.0);
  std::printf("  clients          %u of %u ran (one card each, 1 MiB host->HBM copies, %.1f s, all at once)\n", ok,
              clients, seconds);
  std::printf("  aggregate        %.2f GB/s (%.3f GB/s per client)\n", total / 1e9, ok != 0 ? total / 1e9 / ok : 0.0);
  const std::string last = d.output().substr(0, d.output().find('\n', d.output().find("ready ")));
  std::printf("  %s\n", last.substr(last.rfind('\n') + 1).c_str());
  return d.stop() == 0 && ok == clients ? 0 : 1;
}
