// SPDX-License-Identifier: Apache-2.0
// npo-mpi-onesided: MPI one-sided communication on MPI_Win_create windows, every value checked
// (issue 15 point 3; tests/mpi/CMakeLists.txt runs it with --mca osc rdma --mca btl ofi,self).
//
// Each rank's window holds kSlots 64-bit integers per area:
//   put   [0, K)        rank r-1 writes r-1's pattern with MPI_Put      (fence epoch)
//   sum   [K, 2K)       every rank adds its values with MPI_Accumulate(MPI_SUM)   (fence)
//   repl  [2K, 3K)      rank r+1 writes with MPI_Accumulate(MPI_REPLACE)          (fence)
//   src   [3K, 4K)      a pattern the owner wrote; rank r-1 reads it with MPI_Get  (fence)
//   lput  [4K, 5K)      rank r-1 writes it under MPI_Win_lock(EXCLUSIVE) / unlock (passive)
//   ctr   5K            MPI_Fetch_and_op(MPI_SUM) of 1, kFops times by every rank, on rank 0's,
//                       under MPI_Win_lock(SHARED); every old value comes back exactly once
//   cas   5K + 1        MPI_Compare_and_swap(-1 -> rank) on rank 0's by ranks 1..N-1: one wins
// Then passive MPI_Get under MPI_Win_lock(SHARED) of the right neighbour's lput area.
// Prints "onesided: PASS ..." from rank 0, or "MISMATCH ..." lines (run-mpi.py fails on them)
// and exits 1.
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

namespace {

constexpr int kSlots = 64;  // K
constexpr int kFops = 50;   // fetch-and-ops per rank

std::int64_t pat(int rank, int i, int salt) { return (std::int64_t{rank} + 1) * 1000003 + i * 7919 + salt; }

int g_bad = 0;
void expect(bool ok, const char* what, int rank, int i, long long got, long long want) {
  if (ok) return;
  if (++g_bad <= 10) std::printf("MISMATCH rank %d %s element %d: got %lld, want %lld\n", rank, what, i, got, want);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int right = (rank + 1) % size, left = (rank + size - 1) % size;
  constexpr int K = kSlots;
  std::vector<std::int64_t> mem(5 * K + 2, 0);
  for (int i = 0; i < K; ++i) mem[3 * K + i] = pat(rank, i, 3);
  mem[5 * K] = 0;
  mem[5 * K + 1] = -1;
  MPI_Win win;
  MPI_Win_create(mem.data(), static_cast<MPI_Aint>(mem.size() * sizeof(std::int64_t)), sizeof(std::int64_t),
                 MPI_INFO_NULL, MPI_COMM_WORLD, &win);

  // ---- active target (fence) ----
  std::vector<std::int64_t> put(K), add(K), repl(K), got(K, 0);
  for (int i = 0; i < K; ++i) {
    put[i] = pat(rank, i, 0);
    add[i] = pat(rank, i, 1);
    repl[i] = pat(rank, i, 2);
  }
  MPI_Win_fence(0, win);
  MPI_Put(put.data(), K, MPI_INT64_T, right, 0, K, MPI_INT64_T, win);
  for (int t = 0; t < size; ++t) MPI_Accumulate(add.data(), K, MPI_INT64_T, t, K, K, MPI_INT64_T, MPI_SUM, win);
  MPI_Accumulate(repl.data(), K, MPI_INT64_T, left, 2 * K, K, MPI_INT64_T, MPI_REPLACE, win);
  MPI_Get(got.data(), K, MPI_INT64_T, right, 3 * K, K, MPI_INT64_T, win);
  MPI_Win_fence(0, win);
  for (int i = 0; i < K; ++i) {
    std::int64_t sum = 0;
    for (int r = 0; r < size; ++r) sum += pat(r, i, 1);
    expect(mem[i] == pat(left, i, 0), "MPI_Put", rank, i, mem[i], pat(left, i, 0));
    expect(mem[K + i] == sum, "MPI_Accumulate(MPI_SUM)", rank, i, mem[K + i], sum);
    expect(mem[2 * K + i] == pat(right, i, 2), "MPI_Accumulate(MPI_REPLACE)", rank, i, mem[2 * K + i],
           pat(right, i, 2));
    expect(got[i] == pat(right, i, 3), "MPI_Get", rank, i, got[i], pat(right, i, 3));
  }
  MPI_Win_fence(0, win);

  // ---- passive target (lock / unlock) ----
  std::vector<std::int64_t> lput(K);
  for (int i = 0; i < K; ++i) lput[i] = pat(rank, i, 4);
  MPI_Win_lock(MPI_LOCK_EXCLUSIVE, right, 0, win);
  MPI_Put(lput.data(), K, MPI_INT64_T, right, 4 * K, K, MPI_INT64_T, win);
  MPI_Win_unlock(right, win);

  std::vector<std::int64_t> olds(kFops, -7);
  const std::int64_t one = 1;
  MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
  for (int k = 0; k < kFops; ++k) {
    MPI_Fetch_and_op(&one, &olds[k], MPI_INT64_T, 0, 5 * K, MPI_SUM, win);
    MPI_Win_flush(0, win);
  }
  // (not from rank 0 itself: Open MPI 4.1.4's osc rdma tries the btl's compare-and-swap before
  // its local path, with no registration handle for its own window, and btl ofi dereferences
  // it: osc_rdma_accumulate.c:821 before :832, btl_ofi_atomics.c:164 -- a crash, not npo's)
  const std::int64_t minus_one = -1, me = rank;
  std::int64_t cas_old = -9;
  if (rank != 0 || size == 1) MPI_Compare_and_swap(&me, &minus_one, &cas_old, MPI_INT64_T, 0, 5 * K + 1, win);
  MPI_Win_unlock(0, win);
  MPI_Barrier(MPI_COMM_WORLD);

  // the passive put landed; read it back through a passive get of the right neighbour too
  for (int i = 0; i < K; ++i)
    expect(mem[4 * K + i] == pat(left, i, 4), "MPI_Put (lock)", rank, i, mem[4 * K + i], pat(left, i, 4));
  std::vector<std::int64_t> back(K, 0);
  MPI_Win_lock(MPI_LOCK_SHARED, right, 0, win);
  MPI_Get(back.data(), K, MPI_INT64_T, right, 4 * K, K, MPI_INT64_T, win);
  MPI_Win_unlock(right, win);
  for (int i = 0; i < K; ++i) expect(back[i] == pat(rank, i, 4), "MPI_Get (lock)", rank, i, back[i], pat(rank, i, 4));

  // every fetched old value 0 .. size*kFops-1 exactly once; one CAS winner
  std::vector<std::int64_t> all(static_cast<std::size_t>(size) * kFops);
  MPI_Gather(olds.data(), kFops, MPI_INT64_T, all.data(), kFops, MPI_INT64_T, 0, MPI_COMM_WORLD);
  const int won = cas_old == -1 ? 1 : 0;
  int winners = 0;
  MPI_Reduce(&won, &winners, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  int winner_rank = won ? rank : -1, winner = -1;
  MPI_Reduce(&winner_rank, &winner, 1, MPI_INT, MPI_MAX, 0, MPI_COMM_WORLD);
  if (!won && (rank != 0 || size == 1))
    expect(cas_old >= 1 && cas_old < size, "MPI_Compare_and_swap old value", rank, 0, cas_old, -1);
  if (rank == 0) {
    std::sort(all.begin(), all.end());
    for (std::size_t i = 0; i < all.size(); ++i)
      expect(all[i] == static_cast<std::int64_t>(i), "MPI_Fetch_and_op old values", 0, static_cast<int>(i), all[i],
             static_cast<long long>(i));
    MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
    const std::int64_t ctr = mem[5 * K], cas = mem[5 * K + 1];
    MPI_Win_unlock(0, win);
    expect(ctr == std::int64_t{size} * kFops, "MPI_Fetch_and_op counter", 0, 0, ctr, std::int64_t{size} * kFops);
    expect(winners == 1, "MPI_Compare_and_swap winners", 0, 0, winners, 1);
    expect(cas == winner, "MPI_Compare_and_swap word", 0, 0, cas, winner);
  }
  MPI_Win_free(&win);
  int bad = 0;
  MPI_Allreduce(&g_bad, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0 && bad == 0)
    std::printf(
        "onesided: PASS %d ranks: put/get/accumulate(sum, replace) under fence, put/get under lock, "
        "%d fetch-and-ops, compare-and-swap\n",
        size, size * kFops);
  std::fflush(stdout);
  MPI_Finalize();
  return bad == 0 ? 0 : 1;
}
