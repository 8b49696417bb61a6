#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Runs an unmodified Open MPI job on a private npo-emud (issue 14 points 5 and 6).

Starts `npo-emud --topology TOPO --socket-dir DIR` in a fresh temporary directory, waits (bounded)
for its "ready" line, runs

    mpirun --allow-run-as-root --oversubscribe --mca plm isolated -np N \\
           --mca pml cm --mca mtl ofi --mca btl self --mca mtl_ofi_provider_include PROVIDER PROGRAM...

with FI_PROVIDER_PATH=<provider dir> and FI_NPO_BACKEND=emu-remote:DIR (inside a job the
provider offers only the card of the rank's local rank: rank i on card i), then stops the
daemon and reads the per-card
DMA traffic it logged for each owner session (`disconnect card=K ... dma_ops=O dma_bytes=B`,
docs/spec/emud-protocol.md §6). Fails unless the job passed and every one of the N cards moved
at least --min-bytes (nothing fell back to shared memory or TCP: `--mca btl self` forbids both).

--provider PROVIDER is what mtl_ofi_provider_include gets (default "npo;ofi_rxd": the npo
datagram core under libfabric's ofi_rxd; "npo" once the native FI_EP_RDM provider exists). Open
MPI matches it as a case-insensitive prefix of the provider name, so "npo" would also accept
"npo;ofi_rxd": --expect-provider NAME runs the job with `--mca mtl_ofi_verbose 1` and fails
unless every rank's mtl ofi reported (`mtl:ofi:prov: NAME`) that it selected exactly NAME.
A provider whose first component is not npo (e.g. tcp, "udp;ofi_rxd": the same layering as
npo;ofi_rxd) runs the same line over another libfabric provider (FI_PROVIDER set too), without
the traffic check: how the harness is debugged apart from the npo provider. (--transport is the
older spelling of --provider.)

Fault mode (--fault KIND --card K [--port P --lane L]): once all N cards are owned by the ranks
and the job has run --fault-after seconds, injects the fault with `npo-emu fault`. With
--expect error the job must end non-zero within --within seconds of the injection and one line
of its output must name the card ("card K" or "npoK") and, for a port fault, the port ("port P")
-- of either end of the link (with --npo-link the neighbour is looked up before the fault);
with --expect pass it must complete and pass (--check-port-up CARD:PORT: and that link is still
up afterwards, read by `npo-link show` as an observer).

Several faults (--inject T:OPTIONS, repeatable): T seconds after all N cards are owned, runs
`npo-emu fault --socket-dir DIR OPTIONS` (e.g. --inject="5:--kind ber_ramp --card 1 --port 0
--value 1e-4 --duration-ms 3000"); the job must then pass as with --expect pass. A fault whose
time comes after the job ended is a failure (the run did not cover it).

--trace FILE (issue 17 point 4): the ranks run with the provider's FI_NPO_TRACE and npo-emud with
--trace; afterwards their files are merged into one Chrome trace-event JSON FILE (pid = rank,
npo-emud pid 1000; trace_merge.py, docs/observability.md "Traces"), with the per-card DMA
traffic npo-emud counted in otherData.daemon_traffic. Written whether the job passed or not.

Exit codes: 0 passed, 1 failed (the reason is printed), 77 skipped (reason printed: ctest
SKIP_RETURN_CODE).
"""
import argparse
import collections
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trace_merge import merge_traces  # noqa: E402

SKIP = 77


def log(msg):
    print(f"run-mpi: {msg}", flush=True)


class Collected:
    """A background process whose output (stdout and stderr) a thread collects line by line."""

    def __init__(self, cmd, **popen):
        self.lines = []
        self.lock = threading.Lock()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            with self.lock:
                self.lines.append(line.rstrip("\n"))

    def text(self):
        with self.lock:
            return "\n".join(self.lines)

    def find(self, pattern):
        rx = re.compile(pattern)
        with self.lock:
            return [m for m in (rx.search(l) for l in self.lines) if m]

    def wait_for(self, pattern, timeout):
        """True once a line matches `pattern`; False after `timeout` s or when the process ended."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.find(pattern):
                return True
            if self.proc.poll() is not None:
                return bool(self.find(pattern))
            time.sleep(0.05)
        return False

    def stop(self):
        """SIGTERM, then SIGKILL after 10 s; returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.reader.join(timeout=5)
        return self.proc.returncode


class Daemon(Collected):
    """npo-emud in its own temporary socket directory; its output collected by a thread."""

    def __init__(self, emud, topology, ready_timeout, extra_args=()):
        self.dir = tempfile.mkdtemp(prefix="npo-mpi-emud-")
        super().__init__([emud, "--topology", topology, "--socket-dir", self.dir, *extra_args])
        if self.wait_for(r"npo-emud: ready ", ready_timeout):
            return
        out = self.text()
        self.stop()
        raise RuntimeError(f"npo-emud did not print 'ready' within {ready_timeout} s:\n{out}")

    def owned_cards(self):
        """Cards whose owner is connected now (connect lines minus disconnect lines)."""
        owned = {}
        for m in self.find(r"\b(connect|disconnect) card=(\d+) pid=\d+ mode=owner"):
            card = int(m.group(2))
            owned[card] = owned.get(card, 0) + (1 if m.group(1) == "connect" else -1)
        return {c for c, n in owned.items() if n > 0}

    def traffic(self):
        """Per card: (sessions, dma_ops, dma_bytes) summed over the logged owner sessions."""
        per = {}
        for m in self.find(r"disconnect card=(\d+) pid=\d+ mode=owner .*dma_ops=(\d+) dma_bytes=(\d+)"):
            s, o, b = per.get(int(m.group(1)), (0, 0, 0))
            per[int(m.group(1))] = (s + 1, o + int(m.group(2)), b + int(m.group(3)))
        return per

    def stop(self):
        rc = super().stop()
        shutil.rmtree(self.dir, ignore_errors=True)
        return rc


class Job:
    """mpirun in its own process group (so a timeout ends every rank); output collected."""

    def __init__(self, cmd, env):
        self.out = []
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.out.append(line)

    def wait(self, timeout):
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            rc = None
        self.reader.join(timeout=5)
        return rc

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=10)

    def text(self):
        return "".join(self.out)


def link_far_end(npo_link, sockdir, card, port):
    """(card, port) at the other end of card:port, from `npo-link show` on every card (observer)."""
    show = subprocess.run([npo_link, "show", "--backend", f"emu-remote:{sockdir}", "--json"], capture_output=True,
                          text=True, timeout=30)
    for p in json.loads(show.stdout)["ports"]:
        n = p.get("neighbor") or {}
        if p["card"] == card and p["port"] == port and n.get("card") is not None:
            log(f"card {card} port {port} is linked to card {n['card']} port {n['port']}")
            return (int(n["card"]), int(n["port"]))
    return None


def naming_line(out, ends):
    """The first output line naming one of `ends` ((card, port or None)), or None."""
    for line in out.splitlines():
        for card, port in ends:
            if not re.search(rf"card[ =]{card}\b|\bnpo{card}\b", line):
                continue
            if port is None or re.search(rf"port[ =]{port}\b", line):
                return line
    return None


def is_npo(provider):
    """True when libfabric provider PROVIDER ("npo", "npo;ofi_rxd") runs on the npo core."""
    return provider.split(";")[0].lower() == "npo"


# mtl ofi's verbose lines (opal_common_ofi verbose >= 1, mtl_ofi_component.c in 4.1.4): every
# candidate it skips, and the one it selected.
SKIPPED_RX = re.compile(r"mtl:ofi: \".*\" (not )?in (include|exclude) list")
# Any line of mtl ofi's verbose mode (two or more per rank): summarised, not printed, so a
# failure's reason stays within the lines a CI log keeps.
VERBOSE_RX = re.compile(r"mtl_ofi_component\.c:\d+: ")
SELECTED_RX = re.compile(r"mtl:ofi:prov: (\S+)")


def selected_providers(out):
    """The provider names mtl ofi reported as selected, one per rank that got that far."""
    return [m.group(1) for m in (SELECTED_RX.search(l) for l in out.splitlines()) if m]


# The provider's per-domain line when FI_NPO_STATS is set (drivers/libfabric/provider.cpp).
STATS_RX = re.compile(r"npo: stats pid (\d+) domain npo(\d+) \(fabric id \d+\): started rma_write=(\d+) "
                      r"rma_read=(\d+) atomic=(\d+); executed as target rma_write=(\d+) rma_read=(\d+) atomic=(\d+)")


def check_one_sided(out, np):
    """--expect-one-sided: proves Open MPI's osc rdma moved the one-sided traffic through btl ofi
    on npo. Returns a failure reason or None, and logs what the counters showed.

    - osc rdma ran every window: its "rdma component destroying window" line on every rank
      (opal_output_verbose 1, --mca osc_base_verbose 1; Open MPI's release build compiles out
      its "selected btl" line);
    - btl ofi initialised on every rank ("select: init of component ofi returned success",
      --mca btl_base_verbose 1) and is the only btl besides self (which has no atomics);
    - the provider's op counters (FI_NPO_STATS=1): every rank has two npo domains on its card,
      mtl ofi's, which started and executed no RMA and no atomic (two-sided traffic moves none),
      and btl ofi's, which did; over the job every RMA write, RMA read and atomic started was
      executed by a target, and there was at least one of each."""
    windows = len(re.findall(r"rdma component destroying window with id", out))
    btl_ok = len(re.findall(r"select: init of component ofi returned success", out))
    if windows < np:
        return f"osc rdma destroyed {windows} windows, expected one per rank ({np})"
    if btl_ok < np:
        return f"btl ofi initialised on {btl_ok} of {np} ranks"
    doms = [tuple(int(x) for x in m.groups()) for m in STATS_RX.finditer(out)]
    by_pid = collections.defaultdict(list)
    for d in doms:
        by_pid[d[0]].append(d)
    if len(by_pid) != np or any(len(v) != 2 for v in by_pid.values()):
        return f"expected two npo domains per rank (mtl ofi's and btl ofi's) on {np} ranks, got " \
               f"{ {p: len(v) for p, v in by_pid.items()} }"
    for pid, (a, b) in by_pid.items():
        if a[1] != b[1]:
            return f"rank pid {pid} opened its two domains on different cards (npo{a[1]}, npo{b[1]})"
        quiet = [d for d in (a, b) if sum(d[2:]) == 0]
        if len(quiet) != 1:
            return f"rank pid {pid}: expected exactly one domain without one-sided ops (mtl ofi's): {a[2:]}, {b[2:]}"
    tot = [sum(d[i] for d in doms) for i in range(2, 8)]
    log(f"npo one-sided op counters over {len(doms)} domains: started rma_write={tot[0]} rma_read={tot[1]} "
        f"atomic={tot[2]}; executed as target rma_write={tot[3]} rma_read={tot[4]} atomic={tot[5]}")
    if tot[0:3] != tot[3:6]:
        return "the operations started and executed as target differ"
    if min(tot[0:3]) == 0:
        return "no RMA write, RMA read or atomic went through npo"
    return None


def mpirun_line(args):
    cmd = [args.mpirun, "--allow-run-as-root", "--oversubscribe", "--mca", "plm", "isolated", "-np", str(args.np),
           "--mca", "pml", "cm", "--mca", "mtl", "ofi", "--mca", "btl", args.btl,
           "--mca", "mtl_ofi_provider_include", args.provider,
           # PMIx 4.2.2's PMIx_Finalize waits at most 2 s (a fixed timer) for mpirun to take a
           # rank's finalize notice, then lets the rank exit. 32 oversubscribed ranks on 2 loaded
           # cores can starve mpirun past that, and ORTE then reports a rank that finalized and
           # exited 0 as "exiting improperly" (open-mpi/ompi#9389). Accept a zero exit without
           # that notice: a crash (signal) or a non-zero exit still fails the job, and every
           # program here prints its verdict only after a collective all ranks reached.
           "--mca", "orte_allowed_exit_without_sync", "1"]
    if args.expect_provider:
        cmd += ["--mca", "mtl_ofi_verbose", "1"]
    for kv in args.mca:
        name, _, value = kv.partition("=")
        cmd += ["--mca", name, value]
    if args.pin_card:
        # Each rank names its card itself (FI_NPO_CARD = Open MPI's local rank): for a provider
        # that lists every card and leaves the choice to mtl ofi.
        return cmd + ["sh", "-c", 'FI_NPO_CARD=$OMPI_COMM_WORLD_LOCAL_RANK exec "$@"', "sh"] + args.program
    return cmd + args.program


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--emud", required=True, help="npo-emud binary")
    ap.add_argument("--emu", required=True, help="npo-emu binary (topology generation, faults)")
    ap.add_argument("--provider-dir", required=True, help="folder holding libnpo-fi.so (FI_PROVIDER_PATH)")
    ap.add_argument("--topology", default="emu:mesh8",
                    help="daemon topology URI, or gen:KIND:CARDS (generated by npo-emu topo generate)")
    ap.add_argument("--np", type=int, required=True, help="ranks (= cards that must carry traffic)")
    ap.add_argument("--provider", "--transport", dest="provider", default="npo",
                    help="libfabric provider for mtl_ofi_provider_include (default 'npo', the native RDM endpoint; e.g. 'npo;ofi_rxd', tcp, "
                    "'udp;ofi_rxd')")
    ap.add_argument("--expect-provider", metavar="NAME",
                    help="fail unless mtl ofi of every rank selected exactly this provider (mtl_ofi_verbose)")
    ap.add_argument("--inject", action="append", default=[], metavar="T:OPTIONS",
                    help="T s after all cards are owned run `npo-emu fault --socket-dir DIR OPTIONS` (repeatable)")
    ap.add_argument("--min-bytes", type=int, default=1 << 20, help="DMA bytes each card must have moved")
    ap.add_argument("--timeout", type=float, default=120, help="bound on the mpirun run, s")
    ap.add_argument("--expect-text", default="", help="regex the job output must contain")
    ap.add_argument("--fault", help="fault kind for npo-emu fault, or daemon_kill (SIGKILL npo-emud)")
    ap.add_argument("--card", type=int, default=0)
    ap.add_argument("--port", type=int)
    ap.add_argument("--lane", type=int)
    ap.add_argument("--duration-ms", type=float, help="fault duration (npo-emu fault --duration-ms)")
    ap.add_argument("--npo-link", help="npo-link binary (for --check-port-up)")
    ap.add_argument("--check-port-up", action="append", default=[], metavar="CARD:PORT[:LANES]",
                    help="a link that must still be up after the job (carrying LANES lanes); repeatable")
    ap.add_argument("--check-lanes", type=int, help="lanes the first --check-port-up link must carry after the job")
    ap.add_argument("--emud-arg", action="append", default=[], help="extra npo-emud argument (e.g. --manage-links)")
    ap.add_argument("--fault-after", type=float, default=1.0, help="s after all cards are owned")
    ap.add_argument("--expect", choices=["pass", "error"], default="pass")
    ap.add_argument("--within", type=float, default=10.0, help="--expect error: s from fault to job end")
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--btl", default="self",
                    help="--mca btl LIST (default self: nothing falls back to shared memory or TCP)")
    ap.add_argument("--mca", action="append", default=[], metavar="NAME=VALUE", help="extra --mca NAME VALUE")
    ap.add_argument("--expect-one-sided", action="store_true",
                    help="the job ran MPI one-sided through osc rdma over btl ofi on npo: see check_one_sided()")
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                    help="extra environment for mpirun and its ranks")
    ap.add_argument("--pin-card", action="store_true",
                    help="wrap each rank so that it sets FI_NPO_CARD to its local rank")
    ap.add_argument("--trace", metavar="FILE",
                    help="write one Chrome/Perfetto trace-event JSON file of the ranks (FI_NPO_TRACE) and npo-emud")
    ap.add_argument("program", nargs=argparse.REMAINDER, help="-- PROGRAM ARGS...")
    args = ap.parse_args()
    if args.program and args.program[0] == "--":
        args.program = args.program[1:]
    if not args.program:
        ap.error("no program")

    if shutil.which(args.mpirun) is None:
        log(f"SKIP: {args.mpirun} not found (Open MPI: apt-get install openmpi-bin libopenmpi-dev, "
            "tools/setup-debian.sh)")
        return SKIP
    if shutil.which(args.program[0]) is None and not os.access(args.program[0], os.X_OK):
        log(f"SKIP: {args.program[0]} not found")
        return SKIP
    provider = os.path.join(args.provider_dir, "libnpo-fi.so")
    npo = is_npo(args.provider)
    injects = []
    for spec in args.inject:
        t, sep, opts = spec.partition(":")
        try:
            injects.append((float(t), opts.split()))
        except ValueError:
            sep = ""
        if not sep or not opts.split():
            ap.error(f"--inject {spec!r}: want SECONDS:NPO-EMU-FAULT-OPTIONS")
    if injects and args.expect == "error":
        ap.error("--inject runs faults the job must survive (--expect pass)")
    if npo and not os.path.exists(provider):
        log(f"FAIL: {provider} not built")
        return 1

    work = tempfile.mkdtemp(prefix="npo-mpi-")
    daemon = None
    trace_dir = os.path.join(work, "trace") if args.trace else None
    daemon_trace = os.path.join(work, "npo-emud.trace") if args.trace else None
    try:
        topology = args.topology
        if topology.startswith("gen:"):
            _, kind, cards = topology.split(":")
            topology = os.path.join(work, f"{kind}{cards}.yaml")
            subprocess.run([args.emu, "topo", "generate", kind, "--cards", cards, "--hbm", "64M", "-o", topology],
                           check=True, timeout=60, stdout=subprocess.DEVNULL)
        t0 = time.monotonic()
        if trace_dir:
            os.mkdir(trace_dir)
        daemon = Daemon(args.emud, topology, ready_timeout=60,
                        extra_args=args.emud_arg + (["--trace", daemon_trace] if daemon_trace else []))
        log(f"daemon ready in {time.monotonic() - t0:.1f} s: {daemon.find(r'npo-emud: ready .*')[0].group(0)}")

        env = dict(os.environ)
        env["FI_PROVIDER_PATH"] = args.provider_dir
        env["FI_NPO_BACKEND"] = f"emu-remote:{daemon.dir}"
        # ofi_rxd layers over the npo DGRAM core only on request (docs/libfabric.md "Layering")
        if "ofi_rxd" in args.provider:
            env["FI_NPO_LAYERING"] = "1"
        if not npo:
            env["FI_PROVIDER"] = args.provider
        for kv in args.env:
            name, _, value = kv.partition("=")
            env[name] = value
        if trace_dir:
            env["FI_NPO_TRACE"] = os.path.join(trace_dir, "job.%p.json")
        # Ranks run oversubscribed on few cores: yield instead of spinning while they wait.
        env["OMPI_MCA_mpi_yield_when_idle"] = "1"
        cmd = mpirun_line(args)
        log("running: " + " ".join(cmd))
        t0 = time.monotonic()
        job = Job(cmd, env)
        fault_at = None
        far = None
        # (seconds after all cards are owned, npo-emu fault options, is the --fault of --expect)
        plan = [(t, opts, False) for t, opts in injects]
        if args.fault:
            opts = ["--kind", args.fault, "--card", str(args.card)]
            if args.port is not None:
                opts += ["--port", str(args.port)]
            if args.lane is not None:
                opts += ["--lane", str(args.lane)]
            if args.duration_ms is not None:
                opts += ["--duration-ms", str(args.duration_ms)]
            plan.append((args.fault_after, opts, True))
        plan.sort(key=lambda p: p[0])
        if plan:
            deadline = t0 + args.timeout
            while time.monotonic() < deadline and job.proc.poll() is None:
                if len(daemon.owned_cards()) >= args.np or not npo:
                    break  # another transport owns no card: inject after --fault-after
                time.sleep(0.02)
            if job.proc.poll() is not None:
                log(f"FAIL: the job ended (exit {job.proc.returncode}) before the fault:\n{job.text()}")
                return 1
            if len(daemon.owned_cards()) < args.np and npo:
                job.kill()
                log(f"FAIL: only cards {sorted(daemon.owned_cards())} owned after {args.timeout} s")
                return 1
            owned_at = time.monotonic()
            log(f"all {args.np} cards owned {owned_at - t0:.1f} s after mpirun started")
            if args.fault and args.port is not None and args.npo_link:
                far = link_far_end(args.npo_link, daemon.dir, args.card, args.port)
            for at, opts, main_fault in plan:
                time.sleep(max(0.0, owned_at + at - time.monotonic()))
                if job.proc.poll() is not None:
                    log(f"FAIL: the job ended (exit {job.proc.returncode}) before the fault at {at} s "
                        f"({' '.join(opts)}); make it run longer:\n{job.text()}")
                    return 1
                if main_fault and args.fault == "daemon_kill":
                    # npo-emud itself dies (SIGKILL): a dead daemon, not a removed card
                    log(f"killing npo-emud (pid {daemon.proc.pid}) at {time.monotonic() - owned_at:.1f} s")
                    fault_at = time.monotonic()
                    daemon.proc.kill()
                    continue
                fcmd = [args.emu, "fault", "--socket-dir", daemon.dir] + opts
                log(f"injecting at {time.monotonic() - owned_at:.1f} s: " + " ".join(fcmd))
                if main_fault:
                    fault_at = time.monotonic()
                subprocess.run(fcmd, check=True, timeout=30)
        limit = args.timeout - (time.monotonic() - t0)
        if fault_at is not None and args.expect == "error":
            limit = args.within + 5  # bounded: a hang is reported, not waited out
        rc = job.wait(timeout=max(limit, 1))
        elapsed = time.monotonic() - t0
        out = job.text()
        # mtl ofi's verbose mode lists every provider it skipped, for every rank: left out.
        sys.stdout.write("".join(l for l in out.splitlines(keepends=True)
                                 if not SKIPPED_RX.search(l) and not VERBOSE_RX.search(l)))
        if args.expect_provider:
            chosen = selected_providers(out)
            log(f"mtl ofi verbose: {sum(1 for l in out.splitlines() if VERBOSE_RX.search(l))} lines left out; "
                f"selected {dict(collections.Counter(chosen))} on {len(chosen)} rank(s)")
        if rc is None:
            log(f"FAIL: mpirun did not end within {limit:.0f} s (killed)")
            return 1
        log(f"mpirun exit {rc} after {elapsed:.1f} s")

        if args.expect == "error":
            took = time.monotonic() - fault_at
            if rc == 0:
                log("FAIL: the job completed with exit 0 although the fault should have ended it")
                return 1
            if took > args.within:
                log(f"FAIL: the job ended {took:.1f} s after the fault (bound {args.within} s)")
                return 1
            if args.fault == "daemon_kill":
                # every fatal line says the daemon is gone; none calls it a removed card
                gone = [l for l in out.splitlines() if re.search(r"npo: fatal: .*npo-emud at " +
                                                                 re.escape(daemon.dir) + r" is gone", l)]
                wrong = [l for l in out.splitlines() if "npo: fatal:" in l and "npo-emud at" not in l]
                if not gone or wrong:
                    log("FAIL: the ranks do not say that npo-emud is gone" +
                        (f" (e.g. {wrong[0].strip()})" if wrong else ""))
                    return 1
                line = gone[0]
            elif args.port is None:
                line = naming_line(out, [(args.card, None)])
                if line is None:
                    log(f"FAIL: no message names card {args.card} ('card {args.card}' or 'npo{args.card}')")
                    return 1
            else:
                # A link fault may be reported from either end of the link: card:port or the
                # neighbour's card:port (npo-link show, read before the fault), on one line.
                ends = [(args.card, args.port)] + ([far] if far else [])
                line = naming_line(out, ends)
                if line is None:
                    log("FAIL: no message names " + " or ".join(f"card {c} with port {p}" for c, p in ends))
                    return 1
            log(f"PASS: the job ended with exit {rc} {took:.2f} s after the fault; named in: {line.strip()}")
            return 0

        if rc != 0:
            log("FAIL: mpirun exit status non-zero")
            return 1
        if args.expect_provider:
            chosen = selected_providers(out)
            wrong = sorted({p for p in chosen if p != args.expect_provider})
            if len(chosen) != args.np or wrong:
                log(f"FAIL: mtl ofi selected {chosen} on {len(chosen)} of {args.np} ranks, expected exactly "
                    f"'{args.expect_provider}' on every rank")
                return 1
            log(f"mtl ofi selected provider '{args.expect_provider}' on all {args.np} ranks")
        if args.expect_one_sided:
            why = check_one_sided(out, args.np)
            if why:
                log(f"FAIL: {why}")
                return 1
            log(f"osc rdma ran the windows over btl ofi on npo on all {args.np} ranks")
        if args.expect_text and not re.search(args.expect_text, out):
            log(f"FAIL: output lacks /{args.expect_text}/")
            return 1
        bad = [l for l in out.splitlines() if re.search(r"MISMATCH|[Ii]ntegrity check failed", l)]
        if bad:
            log("FAIL: " + bad[0])
            return 1
        for n, spec in enumerate(args.check_port_up):
            fields = [int(x) for x in spec.split(":")]
            card, port = fields[0], fields[1]
            lanes = fields[2] if len(fields) > 2 else (args.check_lanes if n == 0 else None)
            # the link manager may still be retraining when a short job ends: wait for it, bounded
            until = time.monotonic() + 30
            while True:
                show = subprocess.run([args.npo_link, "show", "--backend", f"emu-remote:{daemon.dir}?card={card}",
                                       "--json"], capture_output=True, text=True, timeout=30)
                ports = [p for p in json.loads(show.stdout)["ports"] if p["port"] == port]
                if (ports and ports[0]["link_up"]) or time.monotonic() > until:
                    break
                time.sleep(0.5)
            if not ports or not ports[0]["link_up"]:
                log(f"FAIL: card {card} port {port} is not up after the job: {ports[0]['reason'] if ports else show.stdout}")
                return 1
            log(f"card {card} port {port} after the job: {ports[0]['state']}, {ports[0]['reason']}")
            if lanes is not None and ports[0]["lane_count"] != lanes:
                log(f"FAIL: card {card} port {port} carries {ports[0]['lane_count']} lanes, expected {lanes}")
                return 1
            retrained = daemon.find(rf"npo-emud: link card {card} port {port} retrained: .*")
            if retrained:
                log(retrained[0].group(0))
        if not npo:
            log(f"PASS (provider {args.provider}: no per-card traffic check)")
            return 0
        daemon.stop()
        traffic = daemon.traffic()
        short = []
        for card in range(args.np):
            s, o, b = traffic.get(card, (0, 0, 0))
            log(f"card {card}: {s} owner session(s), {o} DMA ops, {b} bytes")
            if b < args.min_bytes:
                short.append(card)
        if short:
            log(f"FAIL: cards {short} moved fewer than {args.min_bytes} DMA bytes (traffic not on the cards)")
            return 1
        log(f"PASS: {args.np} ranks, every card moved >= {args.min_bytes} DMA bytes")
        return 0
    except (RuntimeError, subprocess.SubprocessError, OSError) as e:
        log(f"FAIL: {e}")
        return 1
    finally:
        if daemon is not None:
            daemon.stop()
            if trace_dir:
                traffic = {str(c): {"sessions": s, "dma_ops": o, "dma_bytes": b}
                           for c, (s, o, b) in daemon.traffic().items()}
                what = f"{os.path.basename(args.program[0])} over {args.provider}"
                try:
                    log("trace: " + merge_traces(trace_dir, [("job", what)], daemon_trace, traffic, args.trace,
                                                 "run-mpi"))
                except (OSError, ValueError, KeyError) as e:
                    log(f"trace not written: {e}")
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
