// SPDX-License-Identifier: Apache-2.0
// The latency floor of one 8 B message between two processes on this host, with no card,
// engine, descriptor or provider involved: what each design pays before it does any work
// (README "Open MPI over npo", the paragraph "Where the rest goes"; the bandwidth side is
// npo-copy-floor-bench). Two ranks ping-pong an 8 B message, one pinned on each of two CPUs, and
// each iteration runs kRounds round trips of every path, interleaved so that other load on the
// host falls on all alike:
//  - shared memory: the receiver spins on a cache line the sender writes (the floor under Open
//    MPI's vader);
//  - doorbell: the sender writes the message into its submission slot (shared memory) and rings
//    the daemon. A thread of a third process, bound to the sender's CPU (npo-emud's session
//    thread under --session-cpus client), wakes from poll, takes the doorbell, copies the message
//    into the receiver's ring and sleeps again; the receiver spins on its ring. Nothing else
//    happens: this is the least that a design waking the daemon once per message can cost here.
//    Two ways to ring: a 1-byte sendmsg on the SOCK_SEQPACKET connection (a posted REGION_WRITE,
//    protocol §5.6) and an 8-byte write to an eventfd the thread polls (a shadow doorbell,
//    DOORBELL_SHADOW, protocol §5.11);
//  - TCP: 8 B over loopback with TCP_NODELAY, each side spinning on a non-blocking recv (as
//    libfabric's tcp provider polls its sockets): the floor under `tcp;ofi_rxm`.
// Counters: shm_us, socket_doorbell_us, eventfd_doorbell_us, tcp_us (one way, µs: half a round
// trip), socket_over_tcp and eventfd_over_tcp.
// Issue 15 asks the provider's 8 B one-way latency to be at most half of `tcp;ofi_rxm`'s.
// The Time column is one iteration: kRounds round trips of all four paths. Needs 2 CPUs.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string_view>
#include <thread>

#include <benchmark/benchmark.h>

#include "floor_bench.hpp"

namespace {

constexpr int kRounds = 200;  // round trips of each path per iteration

// One cache line: a sequence word and the 8 B message that travels with it.
struct alignas(64) Line {
  std::atomic<std::uint64_t> seq{0};
  std::uint64_t payload = 0;
};

// Shared by both ranks and the daemon (MAP_SHARED before fork). Index 0 is rank A (the
// benchmark's own thread), 1 is rank B (a child process).
struct Shared {
  Line mode;       // the path rank B serves: kStop, kShm, kSocket, kEventfd, kTcp
  Line direct[2];  // shared memory: the line each rank receives on
  Line sq[2];      // doorbell: each rank's submission slot
  Line ring[2];    // doorbell: each rank's receive ring, written by the daemon
};
enum Mode : std::uint64_t { kStop = 0, kShm = 1, kSocket = 2, kEventfd = 3, kTcp = 4 };

// One rank's doorbell: the connection to its session thread and an eventfd that thread polls.
struct Bell {
  int conn = -1;
  int efd = -1;
  // Rings as `m` says; false when the daemon's end is gone.
  bool ring(Mode m) const {
    if (m == kEventfd) {
      const std::uint64_t one = 1;
      return ::write(efd, &one, sizeof one) == static_cast<ssize_t>(sizeof one);
    }
    const char c = 1;
    return ::send(conn, &c, 1, MSG_NOSIGNAL) == 1;
  }
};

using npo_bench::pin;
using npo_bench::two_cpus;

// Empty polls before a waiting rank yields its CPU on every further poll, as the provider's CQ
// back-off does (drivers/libfabric/cq_eq.cpp, FI_NPO_POLL_BACKOFF=yield, the default). On the
// doorbell path the daemon's thread needs the waiting rank's CPU, and an EEVDF kernel (Linux
// 6.6 on) lets a spinner run out its slice before a woken thread gets the CPU.
constexpr unsigned kEmptyPollsBeforeYield = 64;

// Spins until `line` holds a sequence other than `last` (returned) or rank B's mode changed
// away from `mode` (returns `last`); yields after kEmptyPollsBeforeYield polls when `yield`.
std::uint64_t await(const Line& line, std::uint64_t last, const Line* mode, Mode m, bool yield) {
  for (unsigned polls = 0;; ++polls) {
    const std::uint64_t v = line.seq.load(std::memory_order_acquire);
    if (v != last) return v;
    if (mode != nullptr && mode->seq.load(std::memory_order_relaxed) != m) return last;
    if (yield && polls >= kEmptyPollsBeforeYield) ::sched_yield();
  }
}

// Reads exactly 8 bytes from a non-blocking socket, spinning; false on EOF or error.
// Rank B also gives up when its mode changes away from kTcp.
bool recv8(int fd, std::uint64_t* out, const Line* mode) {
  std::size_t got = 0;
  auto* p = reinterpret_cast<char*>(out);
  while (got < 8) {
    const ssize_t n = ::recv(fd, p + got, 8 - got, MSG_DONTWAIT);
    if (n > 0) {
      got += static_cast<std::size_t>(n);
    } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      return false;
    } else if (got == 0 && mode != nullptr && mode->seq.load(std::memory_order_relaxed) != kTcp) {
      return false;
    }
  }
  return true;
}

bool send_all(int fd, const void* p, std::size_t n) {
  return ::send(fd, p, n, MSG_NOSIGNAL) == static_cast<ssize_t>(n);
}

// The daemon: one session thread per rank, bound to that rank's CPU, woken by its doorbell on
// either the connection or the eventfd. A rank closing its connection ends its thread.
[[noreturn]] void daemon_main(Shared* sh, const Bell bell[2], const int cpu[2]) {
  auto session = [sh](int me, Bell b, int on_cpu) {
    pin(on_cpu);
    const int peer = 1 - me;
    for (;;) {
      pollfd p[2] = {{b.conn, POLLIN, 0}, {b.efd, POLLIN, 0}};
      if (::poll(p, 2, -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      bool rung = false;
      if (p[0].revents != 0) {
        char m[16];
        const ssize_t n = ::recv(b.conn, m, sizeof m, MSG_DONTWAIT);
        if (n == 0) return;  // the rank closed its end: stop
        rung = n > 0;
      }
      if (p[1].revents != 0) {
        std::uint64_t count = 0;
        rung = ::read(b.efd, &count, sizeof count) == static_cast<ssize_t>(sizeof count) || rung;
      }
      if (!rung) continue;
      const std::uint64_t seq = sh->sq[me].seq.load(std::memory_order_acquire);
      sh->ring[peer].payload = sh->sq[me].payload;
      sh->ring[peer].seq.store(seq, std::memory_order_release);
    }
  };
  std::thread t0(session, 0, bell[0], cpu[0]);
  std::thread t1(session, 1, bell[1], cpu[1]);
  t0.join();
  t1.join();
  ::_exit(0);
}

// Rank B: answers every message on the path `mode` names, until kStop.
[[noreturn]] void rank_b_main(Shared* sh, Bell bell, int tcp) {
  std::uint64_t last_direct = 0, last_ring = 0;
  for (;;) {
    const auto m = static_cast<Mode>(sh->mode.seq.load(std::memory_order_acquire));
    if (m == kStop) ::_exit(0);
    if (m == kShm) {
      const std::uint64_t v = await(sh->direct[1], last_direct, &sh->mode, kShm, false);
      if (v == last_direct) continue;
      last_direct = v;
      sh->direct[0].payload = sh->direct[1].payload;
      sh->direct[0].seq.store(v, std::memory_order_release);
    } else if (m == kSocket || m == kEventfd) {
      const std::uint64_t v = await(sh->ring[1], last_ring, &sh->mode, m, true);
      if (v == last_ring) continue;
      last_ring = v;
      sh->sq[1].payload = sh->ring[1].payload;
      sh->sq[1].seq.store(v, std::memory_order_release);
      if (!bell.ring(m)) ::_exit(1);
    } else {
      std::uint64_t msg = 0;
      if (!recv8(tcp, &msg, &sh->mode)) {
        if (sh->mode.seq.load() == kTcp) ::_exit(1);  // the socket failed, not a mode change
        continue;
      }
      if (!send_all(tcp, &msg, 8)) ::_exit(1);
    }
  }
}

// A connected loopback TCP pair with TCP_NODELAY, both non-blocking; false on failure.
bool tcp_pair(int out[2]) {
  const int ls = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in ad{};
  ad.sin_family = AF_INET;
  ad.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof ad;
  bool ok = ls >= 0 && ::bind(ls, reinterpret_cast<sockaddr*>(&ad), sizeof ad) == 0 &&
            ::getsockname(ls, reinterpret_cast<sockaddr*>(&ad), &len) == 0 && ::listen(ls, 1) == 0;
  out[0] = ok ? ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0) : -1;
  ok = ok && out[0] >= 0 && ::connect(out[0], reinterpret_cast<sockaddr*>(&ad), sizeof ad) == 0;
  out[1] = ok ? ::accept4(ls, nullptr, nullptr, SOCK_CLOEXEC) : -1;
  ok = ok && out[1] >= 0;
  if (ls >= 0) ::close(ls);
  const int one = 1;
  for (int i = 0; ok && i < 2; ++i) ok = ::setsockopt(out[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) == 0;
  return ok;
}

void BM_DoorbellFloor(benchmark::State& state) {
  const auto [cpu_a, cpu_b] = two_cpus();
  if (cpu_a < 0) {
    state.SkipWithError("needs 2 CPUs");
    return;
  }
  void* map = ::mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  int conn_a[2] = {-1, -1}, conn_b[2] = {-1, -1}, tcp[2] = {-1, -1};
  const int efd_a = ::eventfd(0, EFD_CLOEXEC), efd_b = ::eventfd(0, EFD_CLOEXEC);
  if (map == MAP_FAILED || efd_a < 0 || efd_b < 0 ||
      ::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, conn_a) != 0 ||
      ::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, conn_b) != 0 || !tcp_pair(tcp)) {
    state.SkipWithError("mmap, eventfd, socketpair or loopback TCP failed");
    return;
  }
  auto* sh = new (map) Shared{};
  sh->mode.seq.store(kShm);
  // Each process keeps only its own ends, so that a rank closing its connection is an EOF for
  // the daemon's session thread. Both sides of a doorbell share its eventfd.
  const Bell daemon_side[2] = {{conn_a[1], efd_a}, {conn_b[1], efd_b}};
  const Bell bell_a{conn_a[0], efd_a}, bell_b{conn_b[0], efd_b};
  const int cpus[2] = {cpu_a, cpu_b};
  const pid_t daemon = ::fork();
  if (daemon == 0) {
    for (int fd : {conn_a[0], conn_b[0], tcp[0], tcp[1]}) ::close(fd);
    daemon_main(sh, daemon_side, cpus);
  }
  const pid_t rank_b = ::fork();
  if (rank_b == 0) {
    for (int fd : {conn_a[0], conn_a[1], conn_b[1], tcp[0], efd_a}) ::close(fd);
    pin(cpu_b);
    rank_b_main(sh, bell_b, tcp[1]);
  }
  for (int fd : {conn_a[1], conn_b[1], conn_b[0], tcp[1], efd_b}) ::close(fd);
  cpu_set_t before;
  CPU_ZERO(&before);
  const bool restore = ::sched_getaffinity(0, sizeof before, &before) == 0;
  pin(cpu_a);
  using Clock = std::chrono::steady_clock;
  double shm_s = 0, socket_s = 0, eventfd_s = 0, tcp_s = 0;
  std::uint64_t seq = 0;
  bool ok = daemon > 0 && rank_b > 0;
  // One path's kRounds round trips; returns their time in seconds.
  auto doorbell_rounds = [&](Mode m) {
    sh->mode.seq.store(m, std::memory_order_release);
    const auto t0 = Clock::now();
    for (int i = 0; ok && i < kRounds; ++i) {
      sh->sq[0].payload = ++seq;
      sh->sq[0].seq.store(seq, std::memory_order_release);
      ok = bell_a.ring(m);
      if (ok) (void)await(sh->ring[0], seq - 1, nullptr, m, true);
    }
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  for (auto _ : state) {
    if (!ok) break;
    sh->mode.seq.store(kShm, std::memory_order_release);
    auto t0 = Clock::now();
    for (int i = 0; i < kRounds; ++i) {
      sh->direct[1].payload = ++seq;
      sh->direct[1].seq.store(seq, std::memory_order_release);
      while (sh->direct[0].seq.load(std::memory_order_acquire) != seq) {
      }
    }
    shm_s += std::chrono::duration<double>(Clock::now() - t0).count();
    socket_s += doorbell_rounds(kSocket);
    eventfd_s += doorbell_rounds(kEventfd);
    sh->mode.seq.store(kTcp, std::memory_order_release);
    t0 = Clock::now();
    for (int i = 0; ok && i < kRounds; ++i) {
      std::uint64_t msg = ++seq, back = 0;
      ok = send_all(tcp[0], &msg, 8) && recv8(tcp[0], &back, nullptr) && back == msg;
    }
    tcp_s += std::chrono::duration<double>(Clock::now() - t0).count();
  }
  sh->mode.seq.store(kStop, std::memory_order_release);
  ::close(conn_a[0]);  // the daemon's session threads see EOF
  ::close(tcp[0]);
  if (restore) (void)::sched_setaffinity(0, sizeof before, &before);
  int st_b = 0, st_d = 0;
  if (rank_b > 0) (void)::waitpid(rank_b, &st_b, 0);
  if (daemon > 0) (void)::waitpid(daemon, &st_d, 0);
  ::close(efd_a);
  if (!ok || rank_b <= 0 || daemon <= 0) {
    state.SkipWithError("a rank or the daemon failed (fork, socket or a wrong echo)");
  } else if (!WIFEXITED(st_b) || WEXITSTATUS(st_b) != 0 || !WIFEXITED(st_d) || WEXITSTATUS(st_d) != 0) {
    state.SkipWithError("rank B or the daemon exited with an error");
  } else {
    const double one_ways = 2.0 * kRounds * static_cast<double>(state.iterations());
    state.counters["shm_us"] = shm_s / one_ways * 1e6;
    state.counters["socket_doorbell_us"] = socket_s / one_ways * 1e6;
    state.counters["eventfd_doorbell_us"] = eventfd_s / one_ways * 1e6;
    state.counters["tcp_us"] = tcp_s / one_ways * 1e6;
    state.counters["socket_over_tcp"] = socket_s / tcp_s;
    state.counters["eventfd_over_tcp"] = eventfd_s / tcp_s;
  }
  ::munmap(map, sizeof(Shared));
}
BENCHMARK(BM_DoorbellFloor)->Unit(benchmark::kMicrosecond)->UseRealTime();

constexpr const char* kAbout =
    "npo-doorbell-floor-bench: the latency floor of an 8 B message between two processes on this host.\n"
    "Two ranks, one pinned on each of two CPUs, ping-pong 8 B four ways per iteration, interleaved:\n"
    "through a shared cache line (Open MPI's shared memory); through a doorbell that wakes a daemon\n"
    "thread on the sender's CPU, which copies the message into the receiver's ring (what npo-emud's\n"
    "session thread does before any engine work), rung with a 1-byte sendmsg (socket_) or an eventfd\n"
    "write (eventfd_); and over loopback TCP with spinning receivers (the floor under tcp;ofi_rxm).\n"
    "Counters: shm_us, socket_doorbell_us, eventfd_doorbell_us, tcp_us (one way, us), socket_over_tcp\n"
    "and eventfd_over_tcp. Time: one iteration (200 round trips of each path). Needs 2 CPUs (else the\n"
    "row says ERROR OCCURRED: needs 2 CPUs). README \"Open MPI over npo\".\n\n";

}  // namespace

int main(int argc, char** argv) { return npo_bench::bench_main(argc, argv, kAbout); }
