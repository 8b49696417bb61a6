// SPDX-License-Identifier: Apache-2.0
// npo-mpi-stress: random point-to-point traffic with every message accounted for (issue 15
// point 4; tests/mpi/run-mpi.py runs it on 8 ranks over the npo provider, with and without
// injected faults; docs/mpi.md "Stress").
//
// The run is a sequence of rounds until --seconds have passed (rank 0's clock decides, so every
// rank runs the same rounds). In a round every rank sends --per-round messages, each to a random
// other rank, with a random tag (0..7, so much traffic shares a tag) and a random size drawn
// log-uniformly from 0 B to --max-bytes. The plan of a round is a pure function of (--seed,
// round, sender): every rank recomputes every sender's plan, so a receiver knows exactly which
// messages are due to it, from whom, in which order, with which tag and size. Message k from
// rank s to rank d carries bytes derived from (s, d, k, index), k counting per (s, d) pair over
// the whole run (its sequence number).
//
// A receiver posts one receive per due message before it sends: for each source a random part
// of them directed (source s, MPI_ANY_TAG), the rest with MPI_ANY_SOURCE + MPI_ANY_TAG (posted
// after the directed ones, so no directed receive can starve). MPI's non-overtaking rule then
// fixes which message each receive gets per source: taken in posting order, the messages from
// each source must have the sequence numbers next..next+n-1 in order, with the planned tag
// (status), size (MPI_Get_count) and every byte. A lost message leaves a receive pending (the
// run hangs: the harness's timeout fails it), a duplicate or a reordering is a sequence
// mismatch, a corruption a byte mismatch. The round ends with an MPI_Allreduce (which no rank
// leaves before every rank finished the round, so rounds never mix). At the end the per-pair
// counts of messages sent (MPI_Alltoall to the receivers) must equal those received, and the
// totals (MPI_Allreduce) of messages and bytes sent and received must agree.
//
// Output (rank 0): a progress line every --progress seconds and a final line
//   npo-mpi-stress: P ranks, R rounds, M messages, B bytes, C checks, F failures: PASSED|FAILED
// Each failure is printed by its rank: "npo-mpi-stress: MISMATCH rank R round N from S: ...".
// Exit 0 when every check passed, 1 otherwise, 2 on bad arguments or fewer than 2 ranks.
//
// Usage: npo-mpi-stress [--seconds S] [--max-bytes N] [--per-round K] [--seed X] [--progress S]
//   defaults: 10 s, 4194304 B, 8 messages per rank and round, seed 1, progress every 10 s.
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

/// splitmix64: a small deterministic generator every rank runs identically.
struct Rng {
  std::uint64_t s;
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double unit() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }
};

struct Msg {
  int dst = 0;
  int tag = 0;
  std::size_t size = 0;
};

struct Config {
  double seconds = 10;
  std::size_t max_bytes = std::size_t{4} << 20;
  int per_round = 8;
  std::uint64_t seed = 1;
  double progress = 10;
};

/// The messages rank `src` sends in `round`, in send order.
std::vector<Msg> plan(const Config& cfg, int nprocs, int round, int src) {
  Rng rng{cfg.seed * 0x100000001b3ull + static_cast<std::uint64_t>(round) * 1000003u + static_cast<std::uint64_t>(src)};
  for (int i = 0; i < 3; ++i) rng.next();
  std::vector<Msg> out(static_cast<std::size_t>(cfg.per_round));
  const double top = std::log2(static_cast<double>(cfg.max_bytes) + 1.0);
  for (Msg& m : out) {
    m.dst = static_cast<int>(rng.next() % static_cast<std::uint64_t>(nprocs - 1));
    if (m.dst >= src) ++m.dst;  // anyone but the sender
    m.tag = static_cast<int>(rng.next() % 8);
    // Log-uniform over [1, max+1), minus one: 0 B .. max bytes, as many 1-2 B as 1-2 MiB messages.
    const double sz = std::exp2(rng.unit() * top) - 1.0;
    m.size = static_cast<std::size_t>(sz);
    if (m.size > cfg.max_bytes) m.size = cfg.max_bytes;
  }
  return out;
}

/// The byte at `i` of message `seq` from `src` to `dst`.
inline std::uint8_t pattern(int src, int dst, std::uint64_t seq, std::size_t i) {
  std::uint64_t v = (static_cast<std::uint64_t>(src) << 56) ^ (static_cast<std::uint64_t>(dst) << 48) ^
                    (seq * 0x9e3779b97f4a7c15ull) ^ (static_cast<std::uint64_t>(i >> 3) * 0xff51afd7ed558ccdull);
  v ^= v >> 29;
  return static_cast<std::uint8_t>(v >> ((i & 7u) * 8));
}

bool parse_double(const char* text, double* out) {
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(v >= 0)) return false;
  *out = v;
  return true;
}

bool parse_u64(const char* text, std::uint64_t max, std::uint64_t* out) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (end == text || *end != '\0' || v > max) return false;
  *out = v;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, nprocs = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
  Config cfg;
  bool ok = nprocs >= 2;
  for (int a = 1; a < argc && ok; ++a) {
    const std::string arg = argv[a];
    std::uint64_t v = 0;
    ok = a + 1 < argc;
    if (!ok) break;
    const char* val = argv[++a];
    if (arg == "--seconds") {
      ok = parse_double(val, &cfg.seconds);
    } else if (arg == "--progress") {
      ok = parse_double(val, &cfg.progress);
    } else if (arg == "--max-bytes") {
      ok = parse_u64(val, std::uint64_t{1} << 30, &v);
      cfg.max_bytes = static_cast<std::size_t>(v);
    } else if (arg == "--per-round") {
      ok = parse_u64(val, 10000, &v) && v > 0;
      cfg.per_round = static_cast<int>(v);
    } else if (arg == "--seed") {
      ok = parse_u64(val, ~std::uint64_t{0}, &cfg.seed);
    } else {
      ok = false;
    }
  }
  if (!ok) {
    if (rank == 0)
      std::fprintf(stderr,
                   "npo-mpi-stress: needs >= 2 ranks; usage: [--seconds S] [--max-bytes N] [--per-round K] "
                   "[--seed X] [--progress S]\n");
    MPI_Finalize();
    return 2;
  }

  const auto np = static_cast<std::size_t>(nprocs);
  std::vector<std::uint64_t> sent_to(np, 0), recv_from(np, 0);  // per pair: messages = next seq
  long long checks = 0, failures = 0, msgs_sent = 0, msgs_recv = 0;
  long long bytes_sent = 0, bytes_recv = 0;
  auto fail = [&](int round, int src, const std::string& what) {
    if (++failures <= 10) {
      std::fprintf(stderr, "npo-mpi-stress: MISMATCH rank %d round %d from %d: %s\n", rank, round, src, what.c_str());
      std::fflush(stderr);
    }
  };

  const double t0 = MPI_Wtime();
  double next_progress = cfg.progress;
  int round = 0;
  Rng pick{cfg.seed ^ (0xabcdefull * static_cast<std::uint64_t>(rank + 1))};  // receive kinds: this rank only
  for (int more = 1; more != 0; ++round) {
    // Every sender's plan of this round; what is due to me, per source, in send order.
    std::vector<std::vector<Msg>> plans(np);
    for (int s = 0; s < nprocs; ++s) plans[static_cast<std::size_t>(s)] = plan(cfg, nprocs, round, s);
    std::vector<std::vector<const Msg*>> due(np);
    std::size_t biggest = 0;
    for (int s = 0; s < nprocs; ++s)
      for (const Msg& m : plans[static_cast<std::size_t>(s)])
        if (m.dst == rank) {
          due[static_cast<std::size_t>(s)].push_back(&m);
          if (m.size > biggest) biggest = m.size;
        }

    // Receives: directed ones first (a random part per source), then MPI_ANY_SOURCE ones.
    std::vector<int> directed_src;  // per posted receive: its source, or -1 for ANY_SOURCE
    int any_count = 0;
    for (int s = 0; s < nprocs; ++s) {
      for (std::size_t j = 0; j < due[static_cast<std::size_t>(s)].size(); ++j) {
        if (pick.next() % 2 == 0)
          directed_src.push_back(s);
        else
          ++any_count;
      }
    }
    for (int i = 0; i < any_count; ++i) directed_src.push_back(-1);
    const std::size_t nrecv = directed_src.size();
    std::vector<std::vector<std::uint8_t>> rbuf(nrecv);
    std::vector<MPI_Request> reqs(nrecv + static_cast<std::size_t>(cfg.per_round), MPI_REQUEST_NULL);
    for (std::size_t r = 0; r < nrecv; ++r) {
      std::size_t cap = biggest;
      if (directed_src[r] >= 0) {
        cap = 0;
        for (const Msg* m : due[static_cast<std::size_t>(directed_src[r])]) cap = m->size > cap ? m->size : cap;
      }
      rbuf[r].assign(cap + 1, 0);  // +1: a receive longer than planned is truncated, not hidden
      MPI_Irecv(rbuf[r].data(), static_cast<int>(cap + 1), MPI_BYTE,
                directed_src[r] >= 0 ? directed_src[r] : MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &reqs[r]);
    }

    // Sends, in plan order (so per destination in sequence-number order).
    const std::vector<Msg>& mine = plans[static_cast<std::size_t>(rank)];
    std::vector<std::vector<std::uint8_t>> sbuf(mine.size());
    for (std::size_t k = 0; k < mine.size(); ++k) {
      const Msg& m = mine[k];
      const std::uint64_t seq = sent_to[static_cast<std::size_t>(m.dst)]++;
      sbuf[k].resize(m.size);
      for (std::size_t i = 0; i < m.size; ++i) sbuf[k][i] = pattern(rank, m.dst, seq, i);
      MPI_Isend(sbuf[k].data(), static_cast<int>(m.size), MPI_BYTE, m.dst, m.tag, MPI_COMM_WORLD, &reqs[nrecv + k]);
      ++msgs_sent;
      bytes_sent += static_cast<long long>(m.size);
    }
    std::vector<MPI_Status> st(reqs.size());
    MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), st.data());

    // In posting order: per source the next planned message, sequence numbers in order.
    std::vector<std::size_t> taken(np, 0);
    for (std::size_t r = 0; r < nrecv; ++r) {
      const int src = st[r].MPI_SOURCE;
      int count = -1;
      MPI_Get_count(&st[r], MPI_BYTE, &count);
      ++checks;
      if (src < 0 || src >= nprocs || src == rank) {
        fail(round, src, "status names no valid source");
        continue;
      }
      if (directed_src[r] >= 0 && src != directed_src[r]) {
        fail(round, src, "a receive directed to " + std::to_string(directed_src[r]) + " got this message");
        continue;
      }
      const auto su = static_cast<std::size_t>(src);
      if (taken[su] >= due[su].size()) {
        fail(round, src, "one message more than the " + std::to_string(due[su].size()) + " sent (duplicate)");
        continue;
      }
      const Msg& m = *due[su][taken[su]++];
      const std::uint64_t seq = recv_from[su]++;
      ++msgs_recv;
      bytes_recv += count > 0 ? count : 0;
      if (st[r].MPI_TAG != m.tag || count != static_cast<int>(m.size)) {
        fail(round, src,
             "message seq " + std::to_string(seq) + ": tag " + std::to_string(st[r].MPI_TAG) + " size " +
                 std::to_string(count) + ", want tag " + std::to_string(m.tag) + " size " + std::to_string(m.size) +
                 " (lost, duplicated or out of order)");
        continue;
      }
      for (std::size_t i = 0; i < m.size; ++i) {
        if (rbuf[r][i] != pattern(src, rank, seq, i)) {
          fail(round, src,
               "message seq " + std::to_string(seq) + " size " + std::to_string(m.size) + ": byte " +
                   std::to_string(i) + " is " + std::to_string(rbuf[r][i]) + ", want " +
                   std::to_string(pattern(src, rank, seq, i)) + " (corrupt, or another sequence number)");
          break;
        }
      }
    }
    for (int s = 0; s < nprocs; ++s)
      if (taken[static_cast<std::size_t>(s)] != due[static_cast<std::size_t>(s)].size())
        fail(round, s,
             "got " + std::to_string(taken[static_cast<std::size_t>(s)]) + " of " +
                 std::to_string(due[static_cast<std::size_t>(s)].size()) + " messages");

    // Rank 0's clock decides whether another round runs; nobody leaves before all finished.
    const double elapsed = MPI_Wtime() - t0;
    more = rank == 0 && elapsed < cfg.seconds ? 1 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &more, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0 && cfg.progress > 0 && elapsed >= next_progress) {
      std::printf("npo-mpi-stress: %.0f s: %d rounds, rank 0 sent %lld messages (%lld bytes), %lld failures\n", elapsed,
                  round + 1, msgs_sent, bytes_sent, failures);
      std::fflush(stdout);
      next_progress += cfg.progress;
    }
  }

  // Per pair: what each sender sent to me must be what I received from it.
  std::vector<std::uint64_t> claimed(np, 0);
  MPI_Alltoall(sent_to.data(), 1, MPI_UINT64_T, claimed.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
  for (int s = 0; s < nprocs; ++s) {
    const auto su = static_cast<std::size_t>(s);
    if (claimed[su] != recv_from[su])
      fail(round, s,
           "rank " + std::to_string(s) + " sent " + std::to_string(claimed[su]) + " messages here, " +
               std::to_string(recv_from[su]) + " received");
  }
  long long mine[6] = {msgs_sent, msgs_recv, bytes_sent, bytes_recv, checks, failures};
  long long sum[6] = {0, 0, 0, 0, 0, 0};
  MPI_Allreduce(mine, sum, 6, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  bool passed = sum[5] == 0 && sum[0] == sum[1] && sum[2] == sum[3];
  if (rank == 0) {
    if (sum[0] != sum[1] || sum[2] != sum[3])
      std::fprintf(stderr, "npo-mpi-stress: MISMATCH totals: %lld messages / %lld bytes sent, %lld / %lld received\n",
                   sum[0], sum[2], sum[1], sum[3]);
    std::printf(
        "npo-mpi-stress: %d ranks, %d rounds in %.1f s, %lld messages, %lld bytes, %lld checks, %lld failures: "
        "%s\n",
        nprocs, round, MPI_Wtime() - t0, sum[0], sum[2], sum[4], sum[5], passed ? "PASSED" : "FAILED");
    std::fflush(stdout);
  }
  MPI_Finalize();
  return passed ? 0 : 1;
}
