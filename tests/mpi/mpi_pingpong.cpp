// SPDX-License-Identifier: Apache-2.0
// npo-mpi-pingpong: the two-rank ping-pong of the MPI benchmark (issue 14 point 7;
// tests/mpi/mpi-bench.py runs it over three transports). Rank 0 sends N bytes, rank 1 returns
// them; one line per size:
//   pingpong size=N iters=I half_rtt_us=T mbytes_per_s=B
// with T = half the mean round trip (µs) and B = N / T (10^6 bytes/s). Every returned message
// is checked (first and last byte, one in the middle) so a broken transport cannot look fast;
// exit 1 on a mismatch, 2 on bad arguments or a rank count other than 2.
//
// Usage: npo-mpi-pingpong [--seconds S] [SIZE...]   (default: 0.5 s per size; 8 65536 1048576)
//        npo-mpi-pingpong --allreduce N [--seconds S]   (any number of ranks)
//
// --allreduce N times MPI_Allreduce of N bytes (N/4 floats, MPI_SUM, in place like nccl-tests'
// default) on all ranks for about S seconds and prints, as nccl-tests reports it,
//   allreduce bytes=N ranks=P iters=I time_us=T algbw_gbs=A busbw_gbs=B
// with T the mean time per call (rank 0's clock), A = N / T and B = A * 2 (P - 1) / P (10^9
// bytes/s). Every result is checked (small integers summed exactly in float); exit 1 on a
// wrong one.
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

/// Runs `iters` round trips of `n` bytes; false on a corrupted reply (rank 0 checks).
bool round_trips(int rank, std::vector<std::uint8_t>& buf, std::size_t n, int iters) {
  const int count = static_cast<int>(n);
  for (int i = 0; i < iters; ++i) {
    if (rank == 0) {
      const auto stamp = static_cast<std::uint8_t>(i * 7 + 1);
      buf[0] = stamp;
      buf[n / 2] = static_cast<std::uint8_t>(stamp + 1);
      buf[n - 1] = static_cast<std::uint8_t>(stamp + 2);
      MPI_Send(buf.data(), count, MPI_UNSIGNED_CHAR, 1, 1, MPI_COMM_WORLD);
      buf[0] = buf[n / 2] = buf[n - 1] = 0;
      MPI_Recv(buf.data(), count, MPI_UNSIGNED_CHAR, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      if (buf[0] != stamp || buf[n - 1] != static_cast<std::uint8_t>(stamp + 2) ||
          (n > 2 && buf[n / 2] != static_cast<std::uint8_t>(stamp + 1)))
        return false;
    } else {
      MPI_Recv(buf.data(), count, MPI_UNSIGNED_CHAR, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(buf.data(), count, MPI_UNSIGNED_CHAR, 0, 2, MPI_COMM_WORLD);
    }
  }
  return true;
}

/// The --allreduce mode; returns the exit code.
int allreduce_bench(int rank, int nprocs, std::size_t n, double seconds) {
  const std::size_t count = n / sizeof(float) > 0 ? n / sizeof(float) : 1;
  std::vector<float> buf(count);
  int failed = 0;
  auto fill = [&](int iter) {
    for (std::size_t i = 0; i < count; ++i)
      buf[i] = static_cast<float>((rank + 1 + static_cast<int>(i % 7) + iter) % 16);
  };
  auto check = [&](int iter) {
    for (std::size_t i = 0; i < count; i += 1 + count / 64) {
      float want = 0;
      for (int r = 0; r < nprocs; ++r) want += static_cast<float>((r + 1 + static_cast<int>(i % 7) + iter) % 16);
      if (buf[i] != want) failed = 1;
    }
  };
  auto run = [&](int iters, int base) {
    for (int it = 0; it < iters; ++it) {
      fill(base + it);
      MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      check(base + it);
    }
  };
  run(3, 0);  // warm-up
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  run(5, 3);
  int batch = static_cast<int>(0.05 / ((MPI_Wtime() - t0) / 5));
  batch = batch < 1 ? 1 : (batch > 10000 ? 10000 : batch);
  MPI_Bcast(&batch, 1, MPI_INT, 0, MPI_COMM_WORLD);
  double timed = 0;
  long long iters = 0;
  for (int more = 1; more != 0;) {
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    run(batch, static_cast<int>(iters % 1000));
    timed += MPI_Wtime() - t0;
    iters += batch;
    more = timed < seconds ? 1 : 0;
    MPI_Bcast(&more, 1, MPI_INT, 0, MPI_COMM_WORLD);
  }
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) {
    const double t = timed / static_cast<double>(iters);
    const double bytes = static_cast<double>(count * sizeof(float));
    const double algbw = bytes / t / 1e9;
    std::printf("allreduce bytes=%zu ranks=%d iters=%lld time_us=%.1f algbw_gbs=%.3f busbw_gbs=%.3f\n",
                count * sizeof(float), nprocs, iters, t * 1e6, algbw, algbw * 2.0 * (nprocs - 1) / nprocs);
    if (failed != 0) std::fprintf(stderr, "npo-mpi-pingpong: an MPI_Allreduce result was wrong\n");
    std::fflush(stdout);
  }
  return failed;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, nprocs = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
  double seconds = 0.5;
  std::vector<std::size_t> sizes;
  std::size_t allreduce = 0;
  for (int a = 1; a < argc; ++a) {
    const std::string arg = argv[a];
    char* end = nullptr;
    if (arg == "--allreduce" && a + 1 < argc) {
      const unsigned long long v = std::strtoull(argv[++a], &end, 10);
      if (end == argv[a] || *end != '\0' || v == 0 || v > (1ull << 30)) nprocs = -1;
      allreduce = static_cast<std::size_t>(v);
    } else if (arg == "--seconds" && a + 1 < argc) {
      seconds = std::strtod(argv[++a], &end);
      if (end == argv[a] || *end != '\0' || seconds <= 0) nprocs = -1;
    } else {
      const unsigned long long v = std::strtoull(argv[a], &end, 10);
      if (end == argv[a] || *end != '\0' || v == 0 || v > (1ull << 30)) nprocs = -1;
      sizes.push_back(static_cast<std::size_t>(v));
    }
  }
  if (allreduce != 0 && nprocs > 0 && sizes.empty()) {
    const int rc = allreduce_bench(rank, nprocs, allreduce, seconds);
    MPI_Finalize();
    return rc;
  }
  if (nprocs != 2) {
    if (rank == 0) std::fprintf(stderr, "npo-mpi-pingpong: needs 2 ranks and [--seconds S] [SIZE...]\n");
    MPI_Finalize();
    return 2;
  }
  if (sizes.empty()) sizes = {8, 65536, 1u << 20};
  int failed = 0;
  for (const std::size_t n : sizes) {
    std::vector<std::uint8_t> buf(n, 0x5a);
    // Warm-up (connections, registration caches), then a short run to size a batch of about
    // 10 ms; batches run until `seconds` of round trips have been timed (rank 0 decides).
    if (!round_trips(rank, buf, n, 10)) failed = 1;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    if (!round_trips(rank, buf, n, 20)) failed = 1;
    int batch = static_cast<int>(0.01 / ((MPI_Wtime() - t0) / 20));
    batch = batch < 1 ? 1 : (batch > 100000 ? 100000 : batch);
    MPI_Bcast(&batch, 1, MPI_INT, 0, MPI_COMM_WORLD);
    double timed = 0;
    long long iters = 0;
    for (int more = 1; more != 0;) {
      t0 = MPI_Wtime();
      if (!round_trips(rank, buf, n, batch)) failed = 1;
      timed += MPI_Wtime() - t0;
      iters += batch;
      more = timed < seconds ? 1 : 0;
      MPI_Bcast(&more, 1, MPI_INT, 0, MPI_COMM_WORLD);
    }
    const double half_rtt = timed / static_cast<double>(iters) / 2;
    if (rank == 0) {
      std::printf("pingpong size=%zu iters=%lld half_rtt_us=%.3f mbytes_per_s=%.1f\n", n, iters, half_rtt * 1e6,
                  static_cast<double>(n) / half_rtt / 1e6);
      std::fflush(stdout);
    }
  }
  MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (rank == 0 && failed != 0) std::fprintf(stderr, "npo-mpi-pingpong: a reply came back corrupted\n");
  MPI_Finalize();
  return failed;
}
