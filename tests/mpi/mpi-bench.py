#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""MPI benchmark: npo against the peers a user would pick on the same machine (issue 14 point 7,
issue 15 point 5; docs/mpi.md "Benchmark"). Not a test: prints figures.

In one run, over each transport:
  - 2-rank ping-pong (npo-mpi-pingpong): latency = half the mean round trip of 8 B; bandwidth
    at 64 KiB and 1 MiB = size / half round trip (replies checked);
  - an --allreduce-ranks (default 8) rank MPI_Allreduce of --allreduce-bytes (default 1 MiB,
    floats, MPI_SUM, in place; `npo-mpi-pingpong --allreduce`): time per call, algorithm
    bandwidth algbw = bytes / time and bus bandwidth busbw = algbw * 2 (n - 1) / n, as
    nccl-tests report them (results checked).

Transports:
  npo PROVIDER  mpirun --mca pml cm --mca mtl ofi --mca btl self --mca mtl_ofi_provider_include
                PROVIDER, ranks on the cards of a private `npo-emud --topology emu:mesh8`
                (FI_PROVIDER_PATH, FI_NPO_BACKEND); --provider (default "npo"; repeat it
                to compare e.g. "npo" with "npo;ofi_rxd"). mtl ofi's verbose line must name
                exactly PROVIDER on every rank, or the row is reported failed.
  shm           mpirun --mca pml ob1 --mca btl self,vader (Open MPI's own shared memory)
  tcp;ofi_rxm   mpirun --mca pml cm --mca mtl ofi --mca btl self --mca mtl_ofi_provider_include
                "tcp;ofi_rxm" (FI_PROVIDER="tcp;ofi_rxm")

Output: the raw lines, then Markdown tables (for README.md, with the CPU model and the date):
ping-pong per transport, allreduce per transport, and the ratios of the first npo provider to
each peer (latency: npo/peer, lower is better; bandwidths: npo/peer, higher is better). A
transport that fails is reported as such and the others still run; exit 1 if any failed.

Trace (--trace FILE, issue 17 point 4; docs/observability.md "Traces"): the ranks of the npo
jobs run with FI_NPO_TRACE (the provider records every DMA op of its endpoint's queue, every
send and receive from post to completion, faults; docs/libfabric.md "Traces"), npo-emud with
--trace (training, link changes, faults, clients); afterwards the per-rank files and the
daemon's are merged into ONE Chrome trace-event JSON FILE on the ranks' CLOCK_MONOTONIC time
line: pid = rank for the first job (the ping-pong), 100 x job + rank for the next ones (the
allreduce, further providers), process names "rank R (card K) JOB"; the daemon is pid 1000.
otherData lists the jobs' files (ranks, cards, dropped events) and the DMA traffic the daemon
counted per card over the owner sessions ("daemon_traffic": card -> dma_ops, dma_bytes).

Usage: mpi-bench.py --emud NPO-EMUD --provider-dir DIR --pingpong NPO-MPI-PINGPONG
                    [--provider P]... [--seconds S] [--allreduce-bytes N] [--allreduce-ranks N]
                    [--rounds N] [--skip-peers] [--trace FILE] [--emud-arg ARG]...

With --rounds N every transport is measured N times, the order rotated each round, and the
tables give the medians; a last table gives the ratios of the first npo provider to each peer
round by round (both sides of a ratio from the same round).
"""
import argparse
import datetime
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trace_merge import daemon_traffic, merge_traces  # noqa: E402

SIZES = [8, 65536, 1 << 20]
BASE = ["--allow-run-as-root", "--oversubscribe", "--mca", "plm", "isolated"]
PINGPONG_RX = re.compile(r"pingpong size=(\d+) iters=\d+ half_rtt_us=([\d.]+) mbytes_per_s=([\d.]+)")
ALLREDUCE_RX = re.compile(r"allreduce bytes=(\d+) ranks=(\d+) iters=(\d+) time_us=([\d.]+) algbw_gbs=([\d.]+) "
                          r"busbw_gbs=([\d.]+)")
SELECTED_RX = re.compile(r"mtl:ofi:prov: (\S+)")
SKIPPED_RX = re.compile(r"mtl:ofi: \".*\" (not )?in (include|exclude) list|mtl_ofi_component\.c:\d+: (mtl:ofi:provider_|fi_getinfo)")


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def run_job(mpirun, np, mca, env, prog, timeout, pin=False):
    """Runs one mpirun; (output, None) or (output, error text)."""
    if pin:  # each rank names its card (FI_NPO_CARD = local rank), see run-mpi.py --pin-card
        prog = ["sh", "-c", 'FI_NPO_CARD=$OMPI_COMM_WORLD_LOCAL_RANK exec "$@"', "sh"] + prog
    cmd = [mpirun] + BASE + ["-np", str(np)] + mca + prog
    print("mpi-bench: " + " ".join(cmd), flush=True)
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        return out, f"timed out after {timeout:.0f} s"
    if p.returncode != 0:
        return out, f"exit {p.returncode}"
    return out, None


class Transport:
    def __init__(self, key, label, mca, env, expect_provider=None, pin=False, trace_dir=None, index=0):
        self.key, self.label, self.mca, self.env = key, label, mca, env
        self.expect_provider = expect_provider
        self.pin = pin
        self.trace_dir, self.index = trace_dir, index  # --trace: the ranks' FI_NPO_TRACE files go there
        self.pingpong = None  # {size: (half_rtt_us, MB/s)}: the median over the rounds
        self.allreduce = None  # (bytes, ranks, time_us, algbw GB/s, busbw GB/s): the median over the rounds
        self.pp_rounds = []  # one {size: (half_rtt_us, MB/s)} per round
        self.ar_rounds = []  # one allreduce tuple per round
        self.errors = []

    def run(self, args, prog, np, timeout, job):
        mca = list(self.mca)
        if self.expect_provider:
            mca += ["--mca", "mtl_ofi_verbose", "1"]
        env = self.env
        if self.trace_dir:
            env = dict(env, FI_NPO_TRACE=os.path.join(self.trace_dir, f"{self.index}-{job}.%p.json"))
        out, err = run_job(args.mpirun, np, mca, env, prog, timeout, self.pin)
        for line in out.splitlines():
            if not SKIPPED_RX.search(line) and not SELECTED_RX.search(line):
                print("  " + line)
        if err is None and self.expect_provider:
            chosen = [m.group(1) for m in SELECTED_RX.finditer(out)]
            if len(chosen) != np or any(c != self.expect_provider for c in chosen):
                err = f"mtl ofi selected {sorted(set(chosen))} on {len(chosen)} of {np} ranks, not {self.expect_provider}"
        if err:
            self.errors.append(err)
            print(f"mpi-bench: {self.key}: {err}", flush=True)
        return out if err is None else None

    def measure(self, args):
        timeout = 120 + 10 * args.seconds * len(SIZES)
        out = self.run(args, [args.pingpong, "--seconds", str(args.seconds)] + [str(s) for s in SIZES], 2, timeout,
                       "pingpong")
        if out is not None:
            got = {int(m.group(1)): (float(m.group(2)), float(m.group(3))) for m in PINGPONG_RX.finditer(out)}
            if all(s in got for s in SIZES):
                self.pp_rounds.append(got)
            else:
                self.errors.append("ping-pong printed no figures")
        out = self.run(args, [args.pingpong, "--allreduce", str(args.allreduce_bytes), "--seconds", str(args.seconds)],
                       args.allreduce_ranks, 120 + 20 * args.seconds, "allreduce")
        if out is not None:
            m = ALLREDUCE_RX.search(out)
            if m:
                self.ar_rounds.append((int(m.group(1)), int(m.group(2)), float(m.group(4)), float(m.group(5)),
                                       float(m.group(6))))
            else:
                self.errors.append("allreduce printed no figures")

    def finish(self, rounds):
        """The medians over the rounds; a transport that failed in any round has no figures."""
        if len(self.pp_rounds) == rounds:
            self.pingpong = {s: (statistics.median(r[s][0] for r in self.pp_rounds),
                                 statistics.median(r[s][1] for r in self.pp_rounds)) for s in SIZES}
        if len(self.ar_rounds) == rounds:
            first = self.ar_rounds[0]
            self.allreduce = (first[0], first[1]) + tuple(statistics.median(r[i] for r in self.ar_rounds)
                                                          for i in (2, 3, 4))

    def failed(self):
        return self.pingpong is None or self.allreduce is None


def start_daemon(emud, sockdir, trace=None, extra=()):
    log = open(os.path.join(sockdir, "npo-emud.log"), "w+")  # a file: the daemon never blocks on a pipe
    proc = subprocess.Popen([emud, "--topology", "emu:mesh8", "--socket-dir", os.path.join(sockdir, "s")] +
                            (["--trace", trace] if trace else []) + list(extra), stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        with open(log.name) as f:
            if "npo-emud: ready " in f.read():
                return proc, log
        time.sleep(0.05)
    return proc, None


def stop_daemon(proc):
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def ratio(a, b):
    return f"{a / b:.3g}" if a is not None and b else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--emud", required=True)
    ap.add_argument("--provider-dir", required=True)
    ap.add_argument("--pingpong", required=True, help="npo-mpi-pingpong binary")
    ap.add_argument("--provider", action="append", default=[],
                    help="npo provider for mtl_ofi_provider_include (default 'npo'), optionally with ?doorbell=socket "
                    "(the cards' emu-remote option); repeatable, the first one is compared with the peers")
    ap.add_argument("--seconds", type=float, default=1.0, help="timed round trips per size / allreduce calls, s")
    ap.add_argument("--allreduce-bytes", type=int, default=1 << 20)
    ap.add_argument("--allreduce-ranks", type=int, default=8)
    ap.add_argument("--skip-peers", action="store_true", help="measure only the npo provider(s)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="measure every transport this many times, the order rotated each round, and report the "
                    "medians (a shared VM changes speed between jobs: rounds put every transport in each phase)")
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--emud-arg", action="append", default=[], metavar="ARG",
                    help="one more npo-emud argument (repeat it), e.g. --emud-arg=--doorbell-poll-us=200")
    ap.add_argument("--pin-card", action="store_true", help="npo: each rank sets FI_NPO_CARD to its local rank")
    ap.add_argument("--trace", metavar="FILE",
                    help="write one Chrome/Perfetto trace-event JSON file of the npo jobs' ranks (FI_NPO_TRACE) and "
                    "the daemon (npo-emud --trace)")
    args = ap.parse_args()
    providers = args.provider or ["npo"]
    if shutil.which(args.mpirun) is None:
        print("mpi-bench: mpirun not found (apt-get install openmpi-bin libopenmpi-dev)")
        return 1
    env = dict(os.environ)
    env["OMPI_MCA_mpi_yield_when_idle"] = "1"
    # A finalized rank may exit before a starved mpirun takes its notice (PMIx's 2 s finalize
    # timer, open-mpi/ompi#9389); see run-mpi.py. Crashes and non-zero exits still fail a run.
    env["OMPI_MCA_orte_allowed_exit_without_sync"] = "1"
    ofi = ["--mca", "pml", "cm", "--mca", "mtl", "ofi", "--mca", "btl", "self"]

    sockdir = tempfile.mkdtemp(prefix="npo-mpi-bench-")
    trace_dir = os.path.join(sockdir, "trace") if args.trace else None
    if trace_dir:
        os.mkdir(trace_dir)
    npo_env = dict(env, FI_PROVIDER_PATH=args.provider_dir, FI_NPO_BACKEND=f"emu-remote:{sockdir}/s")
    emud_desc = " ".join(["npo-emud"] + args.emud_arg)
    def npo_transport(i, spec):
        # "P?doorbell=socket": provider P with that emu-remote option on every card it opens
        p, _, query = spec.partition("?")
        e = dict(npo_env, FI_NPO_LAYERING="1") if "ofi_rxd" in p else dict(npo_env)
        if query:
            e["FI_NPO_BACKEND"] += "?" + query
        label = f"`{p}` on {emud_desc}" + (f" ({query})" if query else "") + " (mtl ofi)"
        return Transport(spec, label, ofi + ["--mca", "mtl_ofi_provider_include", p], e, expect_provider=p,
                         pin=args.pin_card, trace_dir=trace_dir, index=i)
    transports = [npo_transport(i, p) for i, p in enumerate(providers)]
    peers = []
    if not args.skip_peers:
        peers = [Transport("shm", "Open MPI shared memory (ob1, vader)", ["--mca", "pml", "ob1", "--mca", "btl",
                                                                          "self,vader"], env),
                 Transport("tcp;ofi_rxm", "libfabric `tcp;ofi_rxm` (mtl ofi)",
                           ofi + ["--mca", "mtl_ofi_provider_include", "tcp;ofi_rxm"],
                           dict(env, FI_PROVIDER="tcp;ofi_rxm"))]
    if args.rounds < 1:
        ap.error("--rounds must be >= 1")
    daemon_trace = os.path.join(trace_dir, "npo-emud.trace") if trace_dir else None
    daemon, log = start_daemon(args.emud, sockdir, daemon_trace, args.emud_arg)
    trace_failed = None
    try:
        order = peers + transports
        for rnd in range(args.rounds):
            if args.rounds > 1:
                print(f"mpi-bench: round {rnd + 1} of {args.rounds}", flush=True)
            for t in order[rnd % len(order):] + order[:rnd % len(order)]:
                if log is None and t in transports:
                    t.errors.append("npo-emud did not get ready")
                    continue
                if rnd > 0:
                    t.trace_dir = None  # --trace records the first round only
                t.measure(args)
        for t in order:
            t.finish(args.rounds)
    finally:
        stop_daemon(daemon)
        if log is not None:
            log.close()
            if trace_dir:
                try:
                    with open(log.name) as f:
                        traffic = daemon_traffic(f.read())
                    jobs = [(f"{t.index}-{job}", f"{job} over {t.key}") for t in transports
                            for job in ("pingpong", "allreduce")]
                    print("mpi-bench: trace: " + merge_traces(trace_dir, jobs, daemon_trace, traffic, args.trace,
                                                              "mpi-bench"), flush=True)
                except (OSError, ValueError, KeyError) as e:
                    trace_failed = f"trace not written: {e}"
                    print(f"mpi-bench: failed: {trace_failed}", flush=True)
        shutil.rmtree(sockdir, ignore_errors=True)

    everything = transports + peers
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print()
    rounds = f", median of {args.rounds} rounds" if args.rounds > 1 else ""
    print(f"CPU: {cpu_name()} ({os.cpu_count()} cores), {date}, {args.seconds} s per figure{rounds}, "
          f"load average {load}")
    print()
    print("| transport (2 ranks) | latency 8 B (us) | bandwidth 64 KiB (MB/s) | bandwidth 1 MiB (MB/s) |")
    print("|---|---|---|---|")
    for t in everything:
        if t.pingpong is None:
            print(f"| {t.label} | failed: {'; '.join(t.errors) or 'no figures'} | | |")
            continue
        print(f"| {t.label} | {t.pingpong[8][0]:.2f} | {t.pingpong[65536][1]:.0f} | {t.pingpong[1 << 20][1]:.0f} |")
    print()
    nranks = args.allreduce_ranks
    print(f"| transport ({nranks} ranks) | MPI_Allreduce {args.allreduce_bytes} B: time (us) | algbw (GB/s) | "
          "busbw (GB/s) |")
    print("|---|---|---|---|")
    for t in everything:
        if t.allreduce is None:
            print(f"| {t.label} | failed: {'; '.join(t.errors) or 'no figures'} | | |")
            continue
        print(f"| {t.label} | {t.allreduce[2]:.0f} | {t.allreduce[3]:.3f} | {t.allreduce[4]:.3f} |")
    print()
    main_t = transports[0]
    others = transports[1:] + peers
    if others:
        print(f"| {main_t.key} / peer | latency 8 B (lower is better) | bandwidth 1 MiB | allreduce busbw |")
        print("|---|---|---|---|")
        for t in others:
            lat = ratio(main_t.pingpong[8][0] if main_t.pingpong else None, t.pingpong[8][0] if t.pingpong else None)
            bw = ratio(main_t.pingpong[1 << 20][1] if main_t.pingpong else None,
                       t.pingpong[1 << 20][1] if t.pingpong else None)
            bus = ratio(main_t.allreduce[4] if main_t.allreduce else None, t.allreduce[4] if t.allreduce else None)
            print(f"| vs {t.label} | {lat} | {bw} | {bus} |")
        if args.rounds > 1 and main_t.pp_rounds:
            # The same ratios round by round (each side measured in that round): their spread.
            print()
            print(f"| {main_t.key} / peer, round by round | latency 8 B | bandwidth 1 MiB | allreduce busbw |")
            print("|---|---|---|---|")
            for t in others:
                pairs = list(zip(main_t.pp_rounds, t.pp_rounds))
                lat = ", ".join(ratio(a[8][0], b[8][0]) for a, b in pairs)
                bw = ", ".join(ratio(a[1 << 20][1], b[1 << 20][1]) for a, b in pairs)
                bus = ", ".join(ratio(a[4], b[4]) for a, b in zip(main_t.ar_rounds, t.ar_rounds))
                print(f"| vs {t.label} | {lat} | {bw} | {bus} |")
    return 1 if any(t.failed() for t in everything) or trace_failed else 0


if __name__ == "__main__":
    sys.exit(main())
