#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Issue 17 point 4 for the provider benchmark: runs mpi-bench.py with --trace FILE and checks
the merged trace (docs/observability.md "Traces", docs/libfabric.md "Traces").

Usage: check-bench-trace.py [--timeout S] -- PYTHON mpi-bench.py ARGS...   (--trace is added)

Checks, failing with the reason printed:
  - the JSON Object Format: an object with traceEvents (a list) and displayTimeUnit; every
    event ph X, i or M; integer pid and tid; X and i with a numeric ts >= 0, a category and an
    args object; X with a numeric dur >= 0; i with scope "t"; M naming a process or a track;
  - every DMA op span (category dma) of the ranks: args submit_ns <= the span's start and its
    end <= complete_ns, both on CLOCK_MONOTONIC like ts (compared exactly, in nanoseconds);
    status and bytes present;
  - nesting: a DMA op that belongs to a send (args.msg) lies inside that message's span
    (fi_tsend..., from post to completion) in the same rank; one that belongs to a receive (its
    CTS grants) was submitted inside the fi_trecv span (its completion may be reaped after the
    receive completed: the receive ends at the last FIN, which proves the grant landed);
  - per queue (its track and the overlap layers of it, tid mod 1e6), spans do not go backwards
    (starts and ends in the order recorded); on every track the spans nest (one stack each);
  - eager writes and rendezvous chunks were traced, a 1 MiB message among the sends;
  - per card, the DMA ops with status ok of all the ranks on that card add up to the ops and
    bytes npo-emud counted for that card's owner sessions (otherData.daemon_traffic): tracing
    that silently recorded nothing, or missed ops, fails here;
  - no dropped events or unfinished ops; the daemon's training and link events are present.
Exit 0 pass, 1 fail, 77 skip (mpirun missing).
"""
import argparse
import collections
import decimal
import json
import os
import shutil
import subprocess
import sys
import tempfile

SKIP = 77
NS = decimal.Decimal(1000)
LAYER_TID = 1000000  # the provider puts a span that overlaps without nesting on tid + k x this
META = {"process_name", "process_sort_index", "thread_name", "thread_sort_index"}


def ns(v):
    """A microsecond value of the JSON (parsed as Decimal, exact) in nanoseconds."""
    return int((v * NS).to_integral_value())


def check(t):
    """Returns a list of problems (empty: the trace passes) and a summary."""
    bad = []

    def fail(msg):
        if len(bad) < 20:
            bad.append(msg)

    if not isinstance(t, dict) or not isinstance(t.get("traceEvents"), list):
        return ["not a JSON object with a traceEvents list"], ""
    if t.get("displayTimeUnit") != "ns":
        fail("displayTimeUnit is not ns")
    other = t.get("otherData", {})
    daemon_pid = other.get("daemon_pid")
    ops, msgs, tracks = [], {}, collections.defaultdict(list)
    per_tid = collections.defaultdict(list)
    names = collections.Counter()
    for e in t["traceEvents"]:
        ph = e.get("ph")
        if ph not in ("X", "i", "M") or not isinstance(e.get("name"), str):
            fail(f"bad ph or name: {e}")
            continue
        if not isinstance(e.get("pid"), int) or not isinstance(e.get("tid"), int):
            fail(f"pid/tid not integers: {e}")
            continue
        if ph == "M":
            if e["name"] not in META or not isinstance(e.get("args"), dict):
                fail(f"bad metadata event: {e}")
            continue
        ts, dur = e.get("ts"), e.get("dur")
        ts = decimal.Decimal(ts) if isinstance(ts, int) and not isinstance(ts, bool) else ts
        dur = decimal.Decimal(dur) if isinstance(dur, int) and not isinstance(dur, bool) else dur
        if not isinstance(ts, decimal.Decimal) or ts < 0 or not isinstance(e.get("cat"), str) or \
                not isinstance(e.get("args"), dict):
            fail(f"bad ts, cat or args: {e}")
            continue
        if ph == "i":
            if e.get("s") != "t":
                fail(f"instant without thread scope: {e}")
            names[(e["pid"] == daemon_pid, e["name"])] += 1
            continue
        if not isinstance(dur, decimal.Decimal) or dur < 0:
            fail(f"bad dur: {e}")
            continue
        names[(e["pid"] == daemon_pid, e["cat"])] += 1
        start, end = ns(ts), ns(ts + dur)
        per_tid[(e["pid"], e["tid"])].append((start, end))
        if e["pid"] == daemon_pid:
            continue
        a = e["args"]
        if e["cat"].startswith("dma"):
            for k in ("submit_ns", "complete_ns", "bytes", "status", "card", "handle"):
                if k not in a:
                    fail(f"DMA op without args.{k}: {e}")
            if not all(k in a for k in ("submit_ns", "complete_ns", "bytes", "status", "card")):
                continue
            if not a["submit_ns"] <= start or not end <= a["complete_ns"] or a["submit_ns"] > a["complete_ns"]:
                fail(f"DMA op span [{start}, {end}] ns outside its submit {a['submit_ns']} .. complete "
                     f"{a['complete_ns']}: {e}")
            ops.append((e, start, end))
            tracks[(e["pid"], e["tid"] % LAYER_TID)].append((start, end))
        elif e["cat"] in ("send", "recv"):
            if "msg" not in a:
                fail(f"message span without args.msg: {e}")
                continue
            if (e["pid"], a["msg"]) in msgs:
                fail(f"message {a['msg']} twice in pid {e['pid']}")
            msgs[(e["pid"], a["msg"])] = (e, start, end)
    # nesting: a message's DMA ops lie inside its span
    nested = recv_ops = 0
    for e, start, end in ops:
        m = e["args"].get("msg")
        if m is None:
            continue
        me = msgs.get((e["pid"], m))
        if me is None:
            fail(f"DMA op of message {m}, which has no span in pid {e['pid']}: {e}")
            continue
        if me[0]["cat"] == "send":
            if not (me[1] <= start and end <= me[2]):
                fail(f"DMA op [{start}, {end}] ns not inside its send's span [{me[1]}, {me[2]}]: {e} in {me[0]}")
            nested += 1
        else:
            # A receive's own writes are its CTS grants: submitted inside the receive, but the
            # receive completes when the last FIN arrives, and the grant's completion (it
            # landed, or the sender could not have answered) may be reaped by a later poll.
            if not (me[1] <= start <= me[2]):
                fail(f"CTS op submitted at {start} ns outside its receive's span [{me[1]}, {me[2]}]: {e} in {me[0]}")
            recv_ops += 1
    # per queue: spans in order
    for key, spans in tracks.items():
        for (s0, e0), (s1, e1) in zip(spans, spans[1:]):
            if s1 < s0 or e1 < e0:
                fail(f"queue track {key} goes backwards: [{s0}, {e0}] then [{s1}, {e1}]")
                break
    # every track's spans nest (what a viewer draws as one stack): sorted by start, each span ends
    # before the enclosing open one does
    for key, spans in sorted(per_tid.items()):
        stack = []
        for s0, e0 in sorted(spans, key=lambda x: (x[0], -x[1])):
            while stack and stack[-1] <= s0:
                stack.pop()
            if stack and e0 > stack[-1]:
                fail(f"track {key}: span [{s0}, {e0}] overlaps the enclosing one ending at {stack[-1]} without nesting")
                break
            stack.append(e0)
    kinds = collections.Counter(e["name"] for e, _, _ in ops)
    for kind in ("eager write", "rendezvous chunk", "ring header"):
        if kinds[kind] == 0:
            fail(f"no '{kind}' DMA op traced")
    big = sum(1 for e, _, _ in msgs.values() if e["cat"] == "send" and e["args"].get("bytes") == 1 << 20)
    if big == 0:
        fail("no 1 MiB send traced")
    if nested == 0:
        fail("no DMA op attributed to a message")
    # the daemon's count per card
    traced = collections.defaultdict(lambda: [0, 0])
    for e, _, _ in ops:
        if e["args"]["status"] == "ok":
            traced[str(e["args"]["card"])][0] += 1
            traced[str(e["args"]["card"])][1] += e["args"]["bytes"]
    traffic = other.get("daemon_traffic", {})
    if not traffic:
        fail("otherData.daemon_traffic is empty")
    for card in sorted(set(traffic) | set(traced)):
        d = traffic.get(card, {"dma_ops": 0, "dma_bytes": 0})
        got = traced.get(card, [0, 0])
        if got[0] != d["dma_ops"] or got[1] != d["dma_bytes"]:
            fail(f"card {card}: the trace holds {got[0]} ok DMA ops of {got[1]} bytes, npo-emud counted "
                 f"{d['dma_ops']} ops of {d['dma_bytes']} bytes")
    for r in other.get("ranks", []):
        if r.get("dropped_events") or r.get("unfinished_ops"):
            fail(f"rank file with dropped events or unfinished ops: {r}")
    if len(other.get("ranks", [])) < 2:
        fail(f"fewer than 2 rank files merged: {other.get('ranks')}")
    if names[(True, "link up")] == 0 or names[(True, "training")] == 0:
        fail("the daemon's training spans and link-up instants are missing")
    summary = (f"{len(ops)} DMA op spans ({dict(kinds)}), {len(msgs)} message spans, {nested} ops nested in "
               f"their send, {recv_ops} CTS ops started inside their receive, {len(tracks)} queue tracks; per card ok ops/bytes "
               + ", ".join(f"card {c}: {v[0]} / {v[1]} (daemon {traffic.get(c, {}).get('dma_ops')} / "
                           f"{traffic.get(c, {}).get('dma_bytes')})" for c, v in sorted(traced.items()))
               + f"; daemon: {names[(True, 'link up')]} link up, {names[(True, 'training')]} training spans")
    return bad, summary


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--timeout", type=float, default=240)
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("bench", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    bench = args.bench[1:] if args.bench and args.bench[0] == "--" else args.bench
    if not bench:
        ap.error("no mpi-bench command")
    if shutil.which(args.mpirun) is None:
        print(f"check-bench-trace: SKIP: {args.mpirun} not found (apt-get install openmpi-bin libopenmpi-dev)")
        return SKIP
    work = tempfile.mkdtemp(prefix="npo-bench-trace-")
    try:
        path = os.path.join(work, "bench-trace.json")
        cmd = bench + ["--trace", path]
        print("check-bench-trace: " + " ".join(cmd), flush=True)
        try:
            p = subprocess.run(cmd, timeout=args.timeout, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        except subprocess.TimeoutExpired:
            print(f"check-bench-trace: FAIL: mpi-bench did not end within {args.timeout:.0f} s")
            return 1
        sys.stdout.write(p.stdout)
        if p.returncode != 0:
            print(f"check-bench-trace: FAIL: mpi-bench exit {p.returncode}")
            return 1
        with open(path) as f:
            t = json.load(f, parse_float=decimal.Decimal)
        bad, summary = check(t)
        for b in bad:
            print(f"check-bench-trace: FAIL: {b}")
        if bad:
            return 1
        print(f"check-bench-trace: PASS: {summary}")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
