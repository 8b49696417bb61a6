// SPDX-License-Identifier: Apache-2.0
// npo-mpi-semantics: MPI point-to-point semantics a transport must keep (issue 15 point 3;
// tests/mpi/run-mpi.py runs it on 2..8 ranks over the npo provider, docs/mpi.md). Every rank
// takes part; the left/right neighbours are rank-1 and rank+1 (mod P). Each check prints one
// line on rank 0 ("npo-mpi-semantics: CHECK ok" or "... FAILED (n failures)"), each failure one
// line on the failing rank ("npo-mpi-semantics: MISMATCH rank R check C: what"):
//
//   iprobe      MPI_Iprobe sees the message from the left neighbour with its source, tag and
//               size (MPI_Get_count; 0 B, ~1 KB and ~1 MiB), a second probe still sees it (a
//               probe does not consume), and the MPI_Recv sized from the status gets every byte.
//   mprobe      MPI_Improbe (by source and tag) of the second of two messages, MPI_Mrecv of it
//               at once, then the first by MPI_Recv with MPI_ANY_TAG; then a blocking
//               MPI_Mprobe (MPI_ANY_SOURCE, MPI_ANY_TAG) + MPI_Mrecv of --mprobe-bytes (default
//               1 MiB): status and data.
//   mprobe-claim  MPI_Improbe claims the message of tag B that was sent before the message of
//               tag A; an MPI_Recv with MPI_ANY_TAG then gets A (the claimed B is out of the
//               matching), and only then MPI_Mrecv gets B with every byte (not lost).
//   ssend       MPI_Issend to the right neighbour, who does not post the receive before it
//               gets a "go" message that the sender sends only after it has tested the Issend
//               (MPI_Test, progress on both sides) --poll times: a completion before "go" is a
//               violation, whatever the timing. Then blocking MPI_Ssend: the receiver polls for
//               the sender's "returned" message --poll times before it posts the receive; that
//               message arriving first is a violation.
//   cancel      an MPI_Irecv that nothing matches is cancelled: MPI_Test_cancelled true, its
//               buffer untouched; the messages of that very tag and source sent afterwards are
//               received in order with every byte.
//   any         every rank in turn receives from all others with MPI_ANY_SOURCE + MPI_ANY_TAG:
//               source, tag and size from the status, data checked, and per source the
//               messages arrive in the order sent (MPI's non-overtaking rule).
//   large       a ring MPI_Sendrecv of 1 MiB, 4 MiB and 16 MiB (up to --max-bytes), every
//               byte checked.
//   rma         one-sided (when the MPI library can open a window: Open MPI's osc pt2pt runs
//               over any pml, also pml cm + mtl ofi): MPI_Put into the right neighbour's
//               window, MPI_Get from the left one's, MPI_Accumulate (MPI_SUM) of every rank into
//               rank 0's, between MPI_Win_fence calls; every element checked. Open MPI needs
//               `--mca osc pt2pt` with `--mca btl self` (osc rdma aborts the job without a btl).
//
// Exit code: 0 when every check passed on every rank, 1 otherwise, 2 on bad arguments or
// fewer than 2 ranks. A probe or wait that is not satisfied within --wait-seconds (default
// 120) fails the check instead of hanging.
//
// Usage: npo-mpi-semantics [--max-bytes N] [--mprobe-bytes N] [--poll N] [--wait-seconds S]
//                          [--only CHECK,...] [--skip CHECK,...]
//   --only runs the named checks alone, --skip all but them (each skipped one is printed as
//   "CHECK SKIPPED"): iprobe, mprobe, mprobe-claim, ssend, cancel, any, large, rma.
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Ctx {
  int rank = 0;
  int nprocs = 0;
  int left = 0;
  int right = 0;
  std::size_t max_bytes = std::size_t{16} << 20;
  std::size_t mprobe_bytes = std::size_t{1} << 20;  ///< the blocking MPI_Mprobe message
  int poll = 2000;
  double wait_seconds = 120;
  long long failures = 0;  ///< of the current check, this rank
};

/// The byte a rank `src` puts at index `i` of its message with tag `tag` (every rank computes it).
std::uint8_t pattern(int src, int tag, std::size_t i) {
  const std::uint64_t v =
      static_cast<std::uint64_t>(src) * 0x9e3779b1u + static_cast<std::uint64_t>(tag) * 131u + i * 7u + (i >> 10) * 13u;
  return static_cast<std::uint8_t>(v ^ (v >> 11));
}

std::vector<std::uint8_t> payload(int src, int tag, std::size_t n) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = pattern(src, tag, i);
  return v;
}

void fail(Ctx& c, const char* check, const std::string& what) {
  ++c.failures;
  if (c.failures <= 5) {
    std::fprintf(stderr, "npo-mpi-semantics: MISMATCH rank %d check %s: %s\n", c.rank, check, what.c_str());
    std::fflush(stderr);
  }
}

/// Compares `got` with the message of (src, tag) of size n; one failure line at the first bad byte.
void expect_payload(Ctx& c, const char* check, const std::uint8_t* got, std::size_t n, int src, int tag) {
  for (std::size_t i = 0; i < n; ++i) {
    if (got[i] != pattern(src, tag, i)) {
      fail(c, check,
           "message from " + std::to_string(src) + " tag " + std::to_string(tag) + " size " + std::to_string(n) +
               ": byte " + std::to_string(i) + " is " + std::to_string(got[i]) + ", want " +
               std::to_string(pattern(src, tag, i)));
      return;
    }
  }
}

void expect_status(Ctx& c, const char* check, const MPI_Status& st, int src, int tag, std::size_t n) {
  int count = -1;
  MPI_Get_count(&st, MPI_BYTE, &count);
  if (st.MPI_SOURCE != src || st.MPI_TAG != tag || count != static_cast<int>(n))
    fail(c, check,
         "status source " + std::to_string(st.MPI_SOURCE) + " tag " + std::to_string(st.MPI_TAG) + " count " +
             std::to_string(count) + ", want source " + std::to_string(src) + " tag " + std::to_string(tag) +
             " count " + std::to_string(n));
}

/// Waits for `req` with MPI_Test, at most c.wait_seconds; false (and a failure) on timeout.
bool wait_bounded(Ctx& c, const char* check, MPI_Request* req, MPI_Status* st, const char* what) {
  const double t0 = MPI_Wtime();
  int done = 0;
  while (MPI_Test(req, &done, st) == MPI_SUCCESS && done == 0) {
    if (MPI_Wtime() - t0 > c.wait_seconds) {
      fail(c, check, std::string("timed out waiting for ") + what);
      return false;
    }
  }
  return done != 0;
}

/// MPI_Iprobe until a message of (src, tag) is there, at most c.wait_seconds.
bool iprobe_bounded(Ctx& c, const char* check, int src, int tag, MPI_Status* st) {
  const double t0 = MPI_Wtime();
  int flag = 0;
  while (MPI_Iprobe(src, tag, MPI_COMM_WORLD, &flag, st) == MPI_SUCCESS && flag == 0) {
    if (MPI_Wtime() - t0 > c.wait_seconds) {
      fail(c, check, "timed out probing for a message from " + std::to_string(src) + " tag " + std::to_string(tag));
      return false;
    }
  }
  return flag != 0;
}

// ---------------------------------------------------------------------------------------------

void check_iprobe(Ctx& c) {
  const char* k = "iprobe";
  const std::size_t sizes[] = {0, 1000 + 37 * static_cast<std::size_t>(c.rank), (std::size_t{1} << 20) + 3};
  int tag = 100;
  for (const std::size_t n : sizes) {
    ++tag;
    const std::size_t max_n = (std::size_t{1} << 20) + 1000;
    const std::vector<std::uint8_t> out = payload(c.rank, tag, n);
    MPI_Request req;
    MPI_Isend(out.data(), static_cast<int>(n), MPI_BYTE, c.right, tag, MPI_COMM_WORLD, &req);
    // The left neighbour's size for this tag: probe with MPI_ANY_TAG and read everything from
    // the status.
    const std::size_t want = n == 0 || n > 100000 ? n : 1000 + 37 * static_cast<std::size_t>(c.left);
    MPI_Status st;
    if (iprobe_bounded(c, k, c.left, MPI_ANY_TAG, &st)) {
      expect_status(c, k, st, c.left, tag, want);
      // A second probe (by tag this time) must see the same message: a probe does not consume.
      MPI_Status st2;
      int flag = 0;
      MPI_Iprobe(c.left, tag, MPI_COMM_WORLD, &flag, &st2);
      if (flag == 0)
        fail(c, k, "a second MPI_Iprobe no longer sees the message (size " + std::to_string(want) + ")");
      else
        expect_status(c, k, st2, c.left, tag, want);
      int count = 0;
      MPI_Get_count(&st, MPI_BYTE, &count);
      if (count < 0 || static_cast<std::size_t>(count) > max_n) count = 0;
      std::vector<std::uint8_t> in(static_cast<std::size_t>(count) + 1, 0xee);
      MPI_Status rs;
      MPI_Recv(in.data(), count, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, &rs);
      expect_status(c, k, rs, c.left, tag, want);
      expect_payload(c, k, in.data(), static_cast<std::size_t>(count), c.left, tag);
      if (in[static_cast<std::size_t>(count)] != 0xee) fail(c, k, "the receive wrote past the probed size");
    }
    wait_bounded(c, k, &req, MPI_STATUS_IGNORE, "the MPI_Isend");
  }
}

void check_mprobe_claim(Ctx& c) {
  const char* k = "mprobe-claim";
  const int tag_a = 201, tag_b = 202;
  const std::size_t na = 300 + static_cast<std::size_t>(c.rank), nb = 70000 + static_cast<std::size_t>(c.rank);
  const std::size_t want_a = 300 + static_cast<std::size_t>(c.left), want_b = 70000 + static_cast<std::size_t>(c.left);
  const std::vector<std::uint8_t> a = payload(c.rank, tag_a, na), b = payload(c.rank, tag_b, nb);
  // B first, then A: without the claim, an MPI_ANY_TAG receive would match B (non-overtaking).
  MPI_Request reqs[2];
  MPI_Isend(b.data(), static_cast<int>(nb), MPI_BYTE, c.right, tag_b, MPI_COMM_WORLD, &reqs[0]);
  MPI_Isend(a.data(), static_cast<int>(na), MPI_BYTE, c.right, tag_a, MPI_COMM_WORLD, &reqs[1]);
  MPI_Message msg = MPI_MESSAGE_NULL;
  MPI_Status st;
  int flag = 0;
  const double t0 = MPI_Wtime();
  while (MPI_Improbe(MPI_ANY_SOURCE, tag_b, MPI_COMM_WORLD, &flag, &msg, &st) == MPI_SUCCESS && flag == 0) {
    if (MPI_Wtime() - t0 > c.wait_seconds) break;
  }
  if (flag == 0) {
    fail(c, k, "timed out in MPI_Improbe for tag " + std::to_string(tag_b));
  } else {
    expect_status(c, k, st, c.left, tag_b, want_b);
    // The claimed message is out of the matching: a probe and an MPI_ANY_TAG receive see A.
    MPI_Status ps;
    if (iprobe_bounded(c, k, c.left, MPI_ANY_TAG, &ps)) expect_status(c, k, ps, c.left, tag_a, want_a);
    std::vector<std::uint8_t> in(want_b > want_a ? want_b : want_a, 0);
    MPI_Status rs;
    MPI_Recv(in.data(), static_cast<int>(in.size()), MPI_BYTE, c.left, MPI_ANY_TAG, MPI_COMM_WORLD, &rs);
    expect_status(c, k, rs, c.left, tag_a, want_a);
    expect_payload(c, k, in.data(), want_a, c.left, tag_a);
    std::vector<std::uint8_t> inb(want_b, 0);
    MPI_Mrecv(inb.data(), static_cast<int>(want_b), MPI_BYTE, &msg, &rs);
    if (msg != MPI_MESSAGE_NULL) fail(c, k, "MPI_Mrecv left the message handle set");
    expect_status(c, k, rs, c.left, tag_b, want_b);
    expect_payload(c, k, inb.data(), want_b, c.left, tag_b);
  }
  MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE);
}

void check_mprobe(Ctx& c) {
  const char* k = "mprobe";
  // MPI_Improbe for the second of two messages, MPI_Mrecv at once, then the first by MPI_Recv.
  const int tag_a = 211, tag_b = 212;
  const std::size_t na = 500 + static_cast<std::size_t>(c.rank), nb = 9000 + static_cast<std::size_t>(c.rank);
  const std::size_t want_a = 500 + static_cast<std::size_t>(c.left), want_b = 9000 + static_cast<std::size_t>(c.left);
  const std::vector<std::uint8_t> a = payload(c.rank, tag_a, na), b = payload(c.rank, tag_b, nb);
  MPI_Request reqs[2];
  MPI_Isend(a.data(), static_cast<int>(na), MPI_BYTE, c.right, tag_a, MPI_COMM_WORLD, &reqs[0]);
  MPI_Isend(b.data(), static_cast<int>(nb), MPI_BYTE, c.right, tag_b, MPI_COMM_WORLD, &reqs[1]);
  MPI_Message msg = MPI_MESSAGE_NULL;
  MPI_Status st;
  int flag = 0;
  const double t0 = MPI_Wtime();
  while (MPI_Improbe(c.left, tag_b, MPI_COMM_WORLD, &flag, &msg, &st) == MPI_SUCCESS && flag == 0) {
    if (MPI_Wtime() - t0 > c.wait_seconds) break;
  }
  if (flag == 0) {
    fail(c, k, "timed out in MPI_Improbe for tag " + std::to_string(tag_b));
  } else {
    expect_status(c, k, st, c.left, tag_b, want_b);
    std::vector<std::uint8_t> in(want_b, 0);
    MPI_Status rs;
    MPI_Mrecv(in.data(), static_cast<int>(want_b), MPI_BYTE, &msg, &rs);
    expect_status(c, k, rs, c.left, tag_b, want_b);
    expect_payload(c, k, in.data(), want_b, c.left, tag_b);
    in.assign(want_a, 0);
    MPI_Recv(in.data(), static_cast<int>(want_a), MPI_BYTE, c.left, MPI_ANY_TAG, MPI_COMM_WORLD, &rs);
    expect_status(c, k, rs, c.left, tag_a, want_a);
    expect_payload(c, k, in.data(), want_a, c.left, tag_a);
  }
  MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE);

  // Blocking MPI_Mprobe with MPI_ANY_SOURCE / MPI_ANY_TAG, --mprobe-bytes (1 MiB): the status
  // names the sender.
  const int tag_c = 203;
  const std::size_t nc = c.mprobe_bytes + static_cast<std::size_t>(c.rank);
  const std::size_t want_c = c.mprobe_bytes + static_cast<std::size_t>(c.left);
  const std::vector<std::uint8_t> cm = payload(c.rank, tag_c, nc);
  MPI_Request rq;
  MPI_Isend(cm.data(), static_cast<int>(nc), MPI_BYTE, c.right, tag_c, MPI_COMM_WORLD, &rq);
  MPI_Mprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &msg, &st);
  expect_status(c, k, st, c.left, tag_c, want_c);
  int count = 0;
  MPI_Get_count(&st, MPI_BYTE, &count);
  std::vector<std::uint8_t> in(static_cast<std::size_t>(count < 0 ? 0 : count), 0);
  MPI_Mrecv(in.data(), count, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
  expect_payload(c, k, in.data(), in.size(), st.MPI_SOURCE, st.MPI_TAG);
  MPI_Wait(&rq, MPI_STATUS_IGNORE);
}

void check_ssend(Ctx& c) {
  const char* k = "ssend";
  const int tag = 301, tag_go = 302, tag_returned = 303;
  // Small (eager-sized on any transport) and large messages: both must wait for the receive.
  for (const std::size_t n : {std::size_t{8}, std::size_t{200000}}) {
    const std::vector<std::uint8_t> out = payload(c.rank, tag, n);
    std::vector<std::uint8_t> in(n, 0);
    // Non-blocking synchronous send: the receiver cannot post before our "go".
    MPI_Request sreq, goreq;
    MPI_Issend(out.data(), static_cast<int>(n), MPI_BYTE, c.right, tag, MPI_COMM_WORLD, &sreq);
    int early = 0;
    for (int i = 0; i < c.poll && early == 0; ++i) MPI_Test(&sreq, &early, MPI_STATUS_IGNORE);
    if (early != 0)
      fail(c, k, "MPI_Issend of " + std::to_string(n) + " B completed before the receiver could post its receive");
    char go = 'g', got_go = 0;
    MPI_Isend(&go, 1, MPI_CHAR, c.right, tag_go, MPI_COMM_WORLD, &goreq);
    // Receiver side (for the left neighbour): keep progressing (our own Issend test above did),
    // then post only after "go".
    MPI_Recv(&got_go, 1, MPI_CHAR, c.left, tag_go, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Status rs;
    MPI_Recv(in.data(), static_cast<int>(n), MPI_BYTE, c.left, tag, MPI_COMM_WORLD, &rs);
    expect_status(c, k, rs, c.left, tag, n);
    expect_payload(c, k, in.data(), n, c.left, tag);
    if (early == 0) wait_bounded(c, k, &sreq, MPI_STATUS_IGNORE, "the MPI_Issend after the receive was posted");
    MPI_Wait(&goreq, MPI_STATUS_IGNORE);
    MPI_Barrier(MPI_COMM_WORLD);

    // Blocking MPI_Ssend, even ranks first so that every send has a waiting receiver: the
    // receiver polls for the sender's "returned" message before it posts the receive.
    for (int phase = 0; phase < 2; ++phase) {
      const bool sender = (c.rank % 2 == phase) && !(c.nprocs % 2 == 1 && c.rank == c.nprocs - 1 && phase == 0);
      const bool receiver = (c.left % 2 == phase) && !(c.nprocs % 2 == 1 && c.left == c.nprocs - 1 && phase == 0);
      if (sender) {
        MPI_Ssend(out.data(), static_cast<int>(n), MPI_BYTE, c.right, tag, MPI_COMM_WORLD);
        char r = 'r';
        MPI_Send(&r, 1, MPI_CHAR, c.right, tag_returned, MPI_COMM_WORLD);
      }
      if (receiver) {
        char r = 0;
        MPI_Request rr;
        MPI_Irecv(&r, 1, MPI_CHAR, c.left, tag_returned, MPI_COMM_WORLD, &rr);
        int returned = 0;
        for (int i = 0; i < c.poll && returned == 0; ++i) MPI_Test(&rr, &returned, MPI_STATUS_IGNORE);
        if (returned != 0)
          fail(c, k, "MPI_Ssend of " + std::to_string(n) + " B returned before the receive was posted");
        std::fill(in.begin(), in.end(), std::uint8_t{0});
        MPI_Recv(in.data(), static_cast<int>(n), MPI_BYTE, c.left, tag, MPI_COMM_WORLD, &rs);
        expect_payload(c, k, in.data(), n, c.left, tag);
        if (returned == 0) MPI_Wait(&rr, MPI_STATUS_IGNORE);
      }
      MPI_Barrier(MPI_COMM_WORLD);
    }
    // The odd rank count leaves the last rank's (phase-0-skipped) pair: it sends in a third
    // step so that every rank's Ssend ran once.
    if (c.nprocs % 2 == 1) {
      if (c.rank == c.nprocs - 1) {
        MPI_Ssend(out.data(), static_cast<int>(n), MPI_BYTE, c.right, tag, MPI_COMM_WORLD);
      } else if (c.left == c.nprocs - 1) {
        MPI_Recv(in.data(), static_cast<int>(n), MPI_BYTE, c.left, tag, MPI_COMM_WORLD, &rs);
        expect_payload(c, k, in.data(), n, c.left, tag);
      }
      MPI_Barrier(MPI_COMM_WORLD);
    }
  }
}

void check_cancel(Ctx& c) {
  const char* k = "cancel";
  const int tag = 401;
  const std::size_t n = 5000;
  std::vector<std::uint8_t> in(n, 0xab);
  MPI_Request req;
  MPI_Irecv(in.data(), static_cast<int>(n), MPI_BYTE, c.left, tag, MPI_COMM_WORLD, &req);
  MPI_Cancel(&req);
  MPI_Status st;
  if (wait_bounded(c, k, &req, &st, "the cancelled MPI_Irecv")) {
    int cancelled = 0;
    MPI_Test_cancelled(&st, &cancelled);
    if (cancelled == 0) fail(c, k, "MPI_Test_cancelled is false for a cancelled receive that nothing matched");
  }
  for (std::size_t i = 0; i < n; ++i)
    if (in[i] != 0xab) {
      fail(c, k, "the cancelled receive's buffer was written at byte " + std::to_string(i));
      break;
    }
  // Nobody sends before every cancel is done: then two messages of the same tag, both received.
  MPI_Barrier(MPI_COMM_WORLD);
  const std::vector<std::uint8_t> m1 = payload(c.rank, tag, n), m2 = payload(c.rank, tag + 1, n / 2);
  MPI_Request sreq[2];
  MPI_Isend(m1.data(), static_cast<int>(n), MPI_BYTE, c.right, tag, MPI_COMM_WORLD, &sreq[0]);
  MPI_Isend(m2.data(), static_cast<int>(n / 2), MPI_BYTE, c.right, tag, MPI_COMM_WORLD, &sreq[1]);
  std::vector<std::uint8_t> r1(n, 0), r2(n, 0);
  MPI_Recv(r1.data(), static_cast<int>(n), MPI_BYTE, c.left, tag, MPI_COMM_WORLD, &st);
  expect_status(c, k, st, c.left, tag, n);
  expect_payload(c, k, r1.data(), n, c.left, tag);
  MPI_Recv(r2.data(), static_cast<int>(n), MPI_BYTE, c.left, tag, MPI_COMM_WORLD, &st);
  expect_status(c, k, st, c.left, tag, n / 2);
  expect_payload(c, k, r2.data(), n / 2, c.left, tag + 1);
  MPI_Waitall(2, sreq, MPI_STATUSES_IGNORE);
}

void check_any(Ctx& c) {
  const char* k = "any";
  constexpr int kPerSource = 4;
  auto size_of = [](int src, int j) { return static_cast<std::size_t>(src * 97 + j * 1031 + (j == 2 ? 90000 : 0)); };
  for (int root = 0; root < c.nprocs; ++root) {
    if (c.rank != root) {
      std::vector<std::vector<std::uint8_t>> out;
      std::vector<MPI_Request> reqs(kPerSource);
      for (int j = 0; j < kPerSource; ++j) out.push_back(payload(c.rank, 500 + c.rank * 10 + j, size_of(c.rank, j)));
      for (int j = 0; j < kPerSource; ++j)
        MPI_Isend(out[static_cast<std::size_t>(j)].data(), static_cast<int>(out[static_cast<std::size_t>(j)].size()),
                  MPI_BYTE, root, 500 + c.rank * 10 + j, MPI_COMM_WORLD, &reqs[static_cast<std::size_t>(j)]);
      MPI_Waitall(kPerSource, reqs.data(), MPI_STATUSES_IGNORE);
    } else {
      std::vector<int> next(static_cast<std::size_t>(c.nprocs), 0);
      std::vector<std::uint8_t> in(size_of(c.nprocs, 2), 0);  // the largest message (j = 2) of any source
      for (int m = 0; m < (c.nprocs - 1) * kPerSource; ++m) {
        MPI_Status st;
        MPI_Recv(in.data(), static_cast<int>(in.size()), MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
        const int src = st.MPI_SOURCE;
        if (src < 0 || src >= c.nprocs || src == root) {
          fail(c, k, "status names source " + std::to_string(src));
          continue;
        }
        const int j = next[static_cast<std::size_t>(src)]++;
        expect_status(c, k, st, src, 500 + src * 10 + j, size_of(src, j));
        expect_payload(c, k, in.data(), size_of(src, j), src, 500 + src * 10 + j);
      }
      for (int s = 0; s < c.nprocs; ++s)
        if (s != root && next[static_cast<std::size_t>(s)] != kPerSource)
          fail(c, k,
               "got " + std::to_string(next[static_cast<std::size_t>(s)]) + " messages from " + std::to_string(s));
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

void check_large(Ctx& c) {
  const char* k = "large";
  int tag = 600;
  for (const std::size_t n : {std::size_t{1} << 20, std::size_t{4} << 20, std::size_t{16} << 20}) {
    if (n > c.max_bytes) break;
    ++tag;
    const std::vector<std::uint8_t> out = payload(c.rank, tag, n);
    std::vector<std::uint8_t> in(n, 0);
    MPI_Status st;
    const double t0 = MPI_Wtime();
    MPI_Sendrecv(out.data(), static_cast<int>(n), MPI_BYTE, c.right, tag, in.data(), static_cast<int>(n), MPI_BYTE,
                 c.left, tag, MPI_COMM_WORLD, &st);
    const double dt = MPI_Wtime() - t0;
    expect_status(c, k, st, c.left, tag, n);
    expect_payload(c, k, in.data(), n, c.left, tag);
    if (c.rank == 0) {
      std::printf("npo-mpi-semantics: large ring of %zu B took %.2f s\n", n, dt);
      std::fflush(stdout);
    }
  }
}

void check_rma(Ctx& c) {
  const char* k = "rma";
  constexpr int kSlots = 1024;  // 64-bit elements per region
  // Window: [0, kSlots) written by MPI_Put of the left neighbour; [kSlots, 2 kSlots) the target
  // of every rank's MPI_Accumulate (on rank 0); the own data read by the right neighbour's Get.
  std::vector<std::int64_t> win_mem(3 * kSlots, 0);
  auto value = [](int r, int i, int what) { return static_cast<std::int64_t>(r + 1) * 100003 + i * 7 + what * 31; };
  for (int i = 0; i < kSlots; ++i) win_mem[static_cast<std::size_t>(2 * kSlots + i)] = value(c.rank, i, 2);
  MPI_Win win;
  MPI_Win_create(win_mem.data(), static_cast<MPI_Aint>(win_mem.size() * sizeof(std::int64_t)), sizeof(std::int64_t),
                 MPI_INFO_NULL, MPI_COMM_WORLD, &win);
  std::vector<std::int64_t> put(kSlots), acc(kSlots), got(kSlots, 0);
  for (int i = 0; i < kSlots; ++i) {
    put[static_cast<std::size_t>(i)] = value(c.rank, i, 0);
    acc[static_cast<std::size_t>(i)] = value(c.rank, i, 1);
  }
  MPI_Win_fence(0, win);
  MPI_Put(put.data(), kSlots, MPI_INT64_T, c.right, 0, kSlots, MPI_INT64_T, win);
  MPI_Get(got.data(), kSlots, MPI_INT64_T, c.left, 2 * kSlots, kSlots, MPI_INT64_T, win);
  MPI_Accumulate(acc.data(), kSlots, MPI_INT64_T, 0, kSlots, kSlots, MPI_INT64_T, MPI_SUM, win);
  MPI_Win_fence(0, win);
  for (int i = 0; i < kSlots; ++i) {
    const auto at = static_cast<std::size_t>(i);
    if (win_mem[at] != value(c.left, i, 0)) {
      fail(c, k,
           "MPI_Put from rank " + std::to_string(c.left) + ": element " + std::to_string(i) + " is " +
               std::to_string(win_mem[at]));
      break;
    }
    if (got[at] != value(c.left, i, 2)) {
      fail(c, k,
           "MPI_Get from rank " + std::to_string(c.left) + ": element " + std::to_string(i) + " is " +
               std::to_string(got[at]));
      break;
    }
    std::int64_t sum = 0;
    for (int r = 0; r < c.nprocs; ++r) sum += value(r, i, 1);
    if (c.rank == 0 && win_mem[kSlots + at] != sum) {
      fail(c, k,
           "MPI_Accumulate: element " + std::to_string(i) + " is " + std::to_string(win_mem[kSlots + at]) + ", want " +
               std::to_string(sum));
      break;
    }
  }
  MPI_Win_free(&win);
}

bool parse_count(const char* text, unsigned long long max, unsigned long long* out) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (end == text || *end != '\0' || v == 0 || v > max) return false;
  *out = v;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  Ctx c;
  MPI_Comm_rank(MPI_COMM_WORLD, &c.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &c.nprocs);
  bool ok = c.nprocs >= 2;
  std::string only;  // comma-separated check names; empty: all
  std::string skip;  // comma-separated check names not to run
  for (int a = 1; a < argc && ok; ++a) {
    const std::string arg = argv[a];
    unsigned long long v = 0;
    if (arg == "--skip" && a + 1 < argc) {
      skip = argv[++a];
    } else if (arg == "--only" && a + 1 < argc) {
      only = argv[++a];
    } else if (arg == "--max-bytes" && a + 1 < argc && parse_count(argv[a + 1], 1ull << 30, &v)) {
      c.max_bytes = static_cast<std::size_t>(v);
      ++a;
    } else if (arg == "--mprobe-bytes" && a + 1 < argc && parse_count(argv[a + 1], 1ull << 30, &v)) {
      c.mprobe_bytes = static_cast<std::size_t>(v);
      ++a;
    } else if (arg == "--poll" && a + 1 < argc && parse_count(argv[a + 1], 100000000, &v)) {
      c.poll = static_cast<int>(v);
      ++a;
    } else if (arg == "--wait-seconds" && a + 1 < argc) {
      char* end = nullptr;
      c.wait_seconds = std::strtod(argv[++a], &end);
      ok = end != argv[a] && *end == '\0' && c.wait_seconds > 0;
    } else {
      ok = false;
    }
  }
  if (!ok) {
    if (c.rank == 0)
      std::fprintf(stderr,
                   "npo-mpi-semantics: needs >= 2 ranks; usage: [--max-bytes N] [--mprobe-bytes N] [--poll N] "
                   "[--wait-seconds S] "
                   "[--only CHECK,...] [--skip CHECK,...]\n");
    MPI_Finalize();
    return 2;
  }
  c.left = (c.rank + c.nprocs - 1) % c.nprocs;
  c.right = (c.rank + 1) % c.nprocs;

  struct Check {
    const char* name;
    void (*run)(Ctx&);
  };
  const Check checks[] = {{"iprobe", check_iprobe}, {"mprobe", check_mprobe}, {"mprobe-claim", check_mprobe_claim},
                          {"ssend", check_ssend},   {"cancel", check_cancel}, {"any", check_any},
                          {"large", check_large},   {"rma", check_rma}};
  long long total = 0;
  for (const Check& ch : checks) {
    if (!only.empty() && ("," + only + ",").find("," + std::string(ch.name) + ",") == std::string::npos) continue;
    if (("," + skip + ",").find("," + std::string(ch.name) + ",") != std::string::npos) {
      if (c.rank == 0) std::printf("npo-mpi-semantics: %s SKIPPED (--skip)\n", ch.name);
      continue;
    }
    c.failures = 0;
    const double t0 = MPI_Wtime();
    ch.run(c);
    long long sum = 0;
    MPI_Allreduce(&c.failures, &sum, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    total += sum;
    if (c.rank == 0) {
      if (sum == 0)
        std::printf("npo-mpi-semantics: %s ok (%.2f s)\n", ch.name, MPI_Wtime() - t0);
      else
        std::printf("npo-mpi-semantics: %s FAILED (%lld failures)\n", ch.name, sum);
      std::fflush(stdout);
    }
  }
  if (c.rank == 0) {
    std::printf("npo-mpi-semantics: %d ranks: %s\n", c.nprocs, total == 0 ? "PASSED" : "FAILED");
    std::fflush(stdout);
  }
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
