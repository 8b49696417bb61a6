# SPDX-License-Identifier: Apache-2.0
"""Merges the libfabric provider's per-process trace files (FI_NPO_TRACE, docs/libfabric.md
"Traces") of MPI jobs and npo-emud's --trace file into one Chrome trace-event JSON file
(issue 17 point 4; used by mpi-bench.py and run-mpi.py --trace; docs/observability.md "Traces").

The ranks' files are named PREFIX.PID.json in one folder (FI_NPO_TRACE=DIR/PREFIX.%p.json), one
PREFIX per job. In the merged file job number j's rank r is pid 100 j + r (the first job: pid =
rank), named "rank R (card K) DESCRIPTION"; npo-emud is pid 1000, its time stamps moved onto the
ranks' CLOCK_MONOTONIC time line by its otherData.steady_origin_ns.
"""
import glob
import json
import os
import re

DAEMON_PID = 1000
_TRAFFIC_RX = re.compile(r"disconnect card=(\d+) pid=\d+ mode=owner .*dma_ops=(\d+) dma_bytes=(\d+)")


def daemon_traffic(log_text):
    """Per card (a string): sessions, dma_ops, dma_bytes of the owner sessions npo-emud logged at
    each disconnect (docs/spec/emud-protocol.md section 6)."""
    per = {}
    for m in _TRAFFIC_RX.finditer(log_text):
        t = per.setdefault(m.group(1), {"sessions": 0, "dma_ops": 0, "dma_bytes": 0})
        t["sessions"] += 1
        t["dma_ops"] += int(m.group(2))
        t["dma_bytes"] += int(m.group(3))
    return per


def merge_traces(trace_dir, jobs, daemon_trace, traffic, out_path, tool):
    """jobs: [(PREFIX, DESCRIPTION)] in job order. Writes out_path; returns a one-line summary."""
    events, files = [], []
    number = {prefix: j for j, (prefix, _) in enumerate(jobs)}
    label = dict(jobs)
    fname = re.compile(r"^(.+)\.(\d+)\.json$")
    for path in sorted(glob.glob(os.path.join(trace_dir, "*.json"))):
        m = fname.match(os.path.basename(path))
        if not m or m.group(1) not in number:
            continue
        with open(path) as f:
            t = json.load(f)
        other = t.get("otherData", {})
        prefix = m.group(1)
        rank = other.get("rank")
        rank = int(rank) if rank is not None else sum(1 for x in files if x["job"] == prefix)
        cards = sorted({e["card"] for e in other.get("endpoints", [])})
        pid = 100 * number[prefix] + rank
        files.append({"pid": pid, "rank": rank, "cards": cards, "job": prefix, "what": label[prefix],
                      "os_pid": int(m.group(2)), "events": other.get("events"),
                      "dropped_events": other.get("dropped_events"), "unfinished_ops": other.get("unfinished_ops"),
                      "unfinished_messages": other.get("unfinished_messages")})
        name = f"rank {rank} (card {','.join(map(str, cards)) or '-'}) {label[prefix]}"
        events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": pid}})
        for e in t["traceEvents"]:
            if e.get("ph") == "M" and e.get("name") == "process_name":
                continue
            e["pid"] = pid
            events.append(e)
    daemon = False
    if daemon_trace and os.path.exists(daemon_trace):
        with open(daemon_trace) as f:
            t = json.load(f)
        origin_us = t.get("otherData", {}).get("steady_origin_ns", 0) / 1000.0
        for e in t["traceEvents"]:
            e["pid"] = DAEMON_PID
            if e.get("ph") == "M" and e.get("name") == "process_name":
                e["args"] = {"name": "npo-emud"}
            if "ts" in e:
                e["ts"] = round(e["ts"] + origin_us, 3)  # onto the ranks' CLOCK_MONOTONIC time line
            events.append(e)
        daemon = True
    merged = {"displayTimeUnit": "ns",
              "otherData": {"tool": tool, "clock": "CLOCK_MONOTONIC", "ranks": files,
                            "daemon_pid": DAEMON_PID if daemon else None, "daemon_traffic": traffic},
              "traceEvents": events}
    with open(out_path, "w") as f:
        json.dump(merged, f, separators=(",", ":"))
    return (f"{len(files)} rank trace(s) and {'the' if daemon else 'no'} daemon trace, {len(events)} events, "
            f"written to {out_path}")
