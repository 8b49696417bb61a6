// SPDX-License-Identifier: Apache-2.0
// npo-mpi-test: the MPI program of issue 14 point 5. Runs MPI_Allreduce, MPI_Alltoall,
// MPI_Bcast and an MPI_Sendrecv ring for message sizes from 1 B to --max-bytes (default 1 MiB)
// and checks every byte of every result against what each rank computes on its own. Exit code
// 0 only when every check on every rank passed; 1 on any mismatch (each one reported as
// "npo-mpi-test: MISMATCH rank R op OP size N index I: got G want W", the first few per op and
// size); 2 on bad arguments. It knows nothing of npo: which transport carries it is mpirun's
// choice (tests/mpi/run-mpi.py runs it with `--mca mtl_ofi_provider_include npo`).
//
// Usage: npo-mpi-test [--max-bytes N] [--seconds S] [--verbose]
//   --max-bytes N  largest size (bytes, default 1048576); sizes are 1, 7, 64, 1000, 4096, 65537,
//                  262144 and 1048576 up to N, and N itself.
//   --seconds S    repeat the whole set of rounds until S seconds have passed (rank 0's clock;
//                  the fault tests keep a job running while they inject); default: one round.
//   --verbose      rank 0 prints a line after each operation (where a hanging job stopped).
//
// Message sizes per operation: Allreduce reduces N bytes (MPI_UNSIGNED_CHAR, MPI_BXOR)
// and N/8 64-bit integers (MPI_INT64_T, MPI_SUM); Alltoall sends max(1, N/P) bytes to each of
// the P ranks (N in total per rank); Bcast sends N bytes from a root that moves with the size
// and round; the ring sends N bytes to rank+1 and receives N from rank-1.
// The C API only: Open MPI's deprecated C++ bindings do not compile warning-free.
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

/// The byte rank `from` puts at index `i` for `peer` in round `round` (every rank computes it).
std::uint8_t pattern(int from, int peer, std::size_t i, int round) {
  const std::uint64_t v = static_cast<std::uint64_t>(from) * 131u + static_cast<std::uint64_t>(peer) * 29u + i * 7u +
                          (i >> 9) + static_cast<std::uint64_t>(round) * 17u;
  return static_cast<std::uint8_t>(v ^ (v >> 8));
}

struct Checker {
  int rank = 0;
  long long checks = 0;
  long long mismatches = 0;
  int reported = 0;

  /// Compares one result; reports the first 3 mismatching indices of this call.
  template <typename T>
  void expect(const char* op, std::size_t size, const std::vector<T>& got, std::size_t i, T want) {
    ++checks;
    if (got[i] == want) return;
    ++mismatches;
    if (reported++ < 3) {
      std::fprintf(stderr, "npo-mpi-test: MISMATCH rank %d op %s size %zu index %zu: got %lld want %lld\n", rank, op,
                   size, i, static_cast<long long>(got[i]), static_cast<long long>(want));
    }
  }
};

void allreduce(Checker& ck, int nprocs, std::size_t n, int round) {
  std::vector<std::uint8_t> in(n), out(n, 0);
  for (std::size_t i = 0; i < n; ++i) in[i] = pattern(ck.rank, 0, i, round);
  // BXOR, not SUM: Open MPI 4.1.4's AVX reduction (op/avx) adds unsigned chars of 64+
  // elements with saturation, a runtime bug unrelated to the transport.
  MPI_Allreduce(in.data(), out.data(), static_cast<int>(n), MPI_UNSIGNED_CHAR, MPI_BXOR, MPI_COMM_WORLD);
  ck.reported = 0;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint8_t x = 0;
    for (int r = 0; r < nprocs; ++r) x = static_cast<std::uint8_t>(x ^ pattern(r, 0, i, round));
    ck.expect("allreduce-u8", n, out, i, x);
  }
  const std::size_t m = n / 8;
  if (m == 0) return;
  std::vector<std::int64_t> a(m), b(m, 0);
  auto value = [&](int r, std::size_t i) {
    return static_cast<std::int64_t>(r + 1) * 1000003 - static_cast<std::int64_t>(i) * 7919 + round;
  };
  for (std::size_t i = 0; i < m; ++i) a[i] = value(ck.rank, i);
  MPI_Allreduce(a.data(), b.data(), static_cast<int>(m), MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  ck.reported = 0;
  for (std::size_t i = 0; i < m; ++i) {
    std::int64_t sum = 0;
    for (int r = 0; r < nprocs; ++r) sum += value(r, i);
    ck.expect("allreduce-i64", n, b, i, sum);
  }
}

void alltoall(Checker& ck, int nprocs, std::size_t n, int round) {
  const std::size_t block = n / static_cast<std::size_t>(nprocs) > 0 ? n / static_cast<std::size_t>(nprocs) : 1;
  const std::size_t total = block * static_cast<std::size_t>(nprocs);
  std::vector<std::uint8_t> in(total), out(total, 0);
  for (int p = 0; p < nprocs; ++p)
    for (std::size_t i = 0; i < block; ++i) in[static_cast<std::size_t>(p) * block + i] = pattern(ck.rank, p, i, round);
  MPI_Alltoall(in.data(), static_cast<int>(block), MPI_UNSIGNED_CHAR, out.data(), static_cast<int>(block),
               MPI_UNSIGNED_CHAR, MPI_COMM_WORLD);
  ck.reported = 0;
  for (int p = 0; p < nprocs; ++p)
    for (std::size_t i = 0; i < block; ++i)
      ck.expect("alltoall", n, out, static_cast<std::size_t>(p) * block + i, pattern(p, ck.rank, i, round));
}

void bcast(Checker& ck, int nprocs, std::size_t n, int round, int size_index) {
  const int root = (round + size_index) % nprocs;
  std::vector<std::uint8_t> buf(n, 0);
  if (ck.rank == root)
    for (std::size_t i = 0; i < n; ++i) buf[i] = pattern(root, 1000, i, round);
  MPI_Bcast(buf.data(), static_cast<int>(n), MPI_UNSIGNED_CHAR, root, MPI_COMM_WORLD);
  ck.reported = 0;
  for (std::size_t i = 0; i < n; ++i) ck.expect("bcast", n, buf, i, pattern(root, 1000, i, round));
}

void ring(Checker& ck, int nprocs, std::size_t n, int round, int size_index) {
  const int right = (ck.rank + 1) % nprocs;
  const int left = (ck.rank + nprocs - 1) % nprocs;
  std::vector<std::uint8_t> out(n), in(n, 0);
  for (std::size_t i = 0; i < n; ++i) out[i] = pattern(ck.rank, 2000, i, round);
  MPI_Sendrecv(out.data(), static_cast<int>(n), MPI_UNSIGNED_CHAR, right, size_index, in.data(), static_cast<int>(n),
               MPI_UNSIGNED_CHAR, left, size_index, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  ck.reported = 0;
  for (std::size_t i = 0; i < n; ++i) ck.expect("sendrecv-ring", n, in, i, pattern(left, 2000, i, round));
}

bool parse_size(const char* text, std::size_t* out) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (end == text || *end != '\0' || v == 0 || v > (1ull << 30)) return false;
  *out = static_cast<std::size_t>(v);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  Checker ck;
  int nprocs = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &ck.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nprocs);

  std::size_t max_bytes = 1u << 20;
  double seconds = 0;
  bool verbose = false;
  for (int a = 1; a < argc; ++a) {
    const std::string arg = argv[a];
    bool ok = a + 1 < argc;
    if (arg == "--verbose") {
      verbose = true;
      continue;
    }
    if (ok && arg == "--max-bytes") {
      ok = parse_size(argv[++a], &max_bytes);
    } else if (ok && arg == "--seconds") {
      char* end = nullptr;
      seconds = std::strtod(argv[++a], &end);
      ok = end != argv[a] && *end == '\0' && seconds >= 0;
    } else {
      ok = false;
    }
    if (!ok) {
      if (ck.rank == 0)
        std::fprintf(stderr, "npo-mpi-test: bad argument '%s' (usage: [--max-bytes N] [--seconds S] [--verbose])\n",
                     argv[a]);
      MPI_Finalize();
      return 2;
    }
  }
  std::vector<std::size_t> sizes;
  for (std::size_t s : {std::size_t{1}, std::size_t{7}, std::size_t{64}, std::size_t{1000}, std::size_t{4096},
                        std::size_t{65537}, std::size_t{262144}, std::size_t{1} << 20})
    if (s < max_bytes) sizes.push_back(s);
  sizes.push_back(max_bytes);

  const auto start = std::chrono::steady_clock::now();
  int round = 0;
  for (;;) {
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      const int idx = static_cast<int>(k);
      const auto step = [&](const char* what) {
        if (verbose && ck.rank == 0) {
          std::printf("npo-mpi-test: round %d size %zu %s done\n", round, sizes[k], what);
          std::fflush(stdout);
        }
      };
      allreduce(ck, nprocs, sizes[k], round);
      step("allreduce");
      alltoall(ck, nprocs, sizes[k], round);
      step("alltoall");
      bcast(ck, nprocs, sizes[k], round, idx);
      step("bcast");
      ring(ck, nprocs, sizes[k], round, idx);
      step("sendrecv-ring");
    }
    ++round;
    // Rank 0 decides whether another round runs, so every rank runs the same number.
    int more = 0;
    if (ck.rank == 0)
      more = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds ? 1 : 0;
    MPI_Bcast(&more, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (more == 0) break;
  }

  long long totals[2] = {ck.checks, ck.mismatches};
  long long sums[2] = {0, 0};
  MPI_Reduce(totals, sums, 2, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  long long bad = ck.mismatches;
  long long any_bad = 0;
  MPI_Allreduce(&bad, &any_bad, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (ck.rank == 0) {
    std::printf("npo-mpi-test: %d ranks, %d round(s), sizes 1..%zu B, %lld values checked, %lld mismatches: %s\n",
                nprocs, round, max_bytes, sums[0], sums[1], sums[1] == 0 ? "PASSED" : "FAILED");
    std::fflush(stdout);
  }
  MPI_Finalize();
  return any_bad == 0 ? 0 : 1;
}
