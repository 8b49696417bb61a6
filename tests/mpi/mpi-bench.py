#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""MPI ping-pong benchmark (issue 14 point 7; docs/mpi.md). Not a test: prints figures.

In one run, measures 2-rank ping-pong latency (8 B, half round trip) and bandwidth (64 KiB,
1 MiB) with npo-mpi-pingpong over three transports and prints them as ratios to Open MPI's
own shared-memory path:

  shm          mpirun --mca pml ob1 --mca btl self,vader
  tcp;ofi_rxm  mpirun --mca pml cm --mca mtl ofi --mca btl self --mca mtl_ofi_provider_include tcp;ofi_rxm
  npo;ofi_rxd  the same with mtl_ofi_provider_include npo, ranks on cards 0 and 1 of a private
               `npo-emud --topology emu:mesh8` (FI_PROVIDER_PATH, NPO_FI_BACKEND)

Ratios: latency = transport / shm (x slower); bandwidth = transport / shm. The last lines are a
Markdown table for README.md, with the CPU model and the date. A transport that fails is
reported as such and the others still run; exit 1 if any failed.

Usage: mpi-bench.py --emud NPO-EMUD --provider-dir DIR --pingpong NPO-MPI-PINGPONG [--seconds S]
"""
import argparse
import datetime
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SIZES = [8, 65536, 1 << 20]
BASE = ["--allow-run-as-root", "--oversubscribe", "--mca", "plm", "isolated", "-np", "2"]


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def run_pingpong(mpirun, mca, env, pingpong, seconds, timeout, pin=False):
    prog = [pingpong, "--seconds", str(seconds)] + [str(s) for s in SIZES]
    if pin:  # each rank names its card (FI_NPO_CARD = local rank), see run-mpi.py --pin-card
        prog = ["sh", "-c", 'FI_NPO_CARD=$OMPI_COMM_WORLD_LOCAL_RANK exec "$@"', "sh"] + prog
    cmd = [mpirun] + BASE + mca + prog
    print("mpi-bench: " + " ".join(cmd), flush=True)
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        print(out, end="")
        return None, f"timed out after {timeout} s"
    got = {int(m.group(1)): (float(m.group(2)), float(m.group(3)))
           for m in re.finditer(r"pingpong size=(\d+) iters=\d+ half_rtt_us=([\d.]+) mbytes_per_s=([\d.]+)", out)}
    if p.returncode != 0 or any(s not in got for s in SIZES):
        print(out, end="")
        return None, f"exit {p.returncode}"
    for line in out.splitlines():
        if line.startswith("pingpong "):
            print("  " + line)
    return got, None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--emud", required=True)
    ap.add_argument("--provider-dir", required=True)
    ap.add_argument("--pingpong", required=True)
    ap.add_argument("--seconds", type=float, default=1.0, help="timed round trips per size, s")
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--pin-card", action="store_true", help="npo: each rank sets FI_NPO_CARD to its local rank")
    args = ap.parse_args()
    if shutil.which(args.mpirun) is None:
        print("mpi-bench: mpirun not found (apt-get install openmpi-bin libopenmpi-dev)")
        return 1
    timeout = 120 + 10 * args.seconds * len(SIZES)
    env = dict(os.environ)
    env["OMPI_MCA_mpi_yield_when_idle"] = "1"
    results = {}
    errors = {}

    results["shm"], errors["shm"] = run_pingpong(args.mpirun, ["--mca", "pml", "ob1", "--mca", "btl", "self,vader"],
                                                 env, args.pingpong, args.seconds, timeout)
    tcp_env = dict(env, FI_PROVIDER="tcp;ofi_rxm")
    results["tcp;ofi_rxm"], errors["tcp;ofi_rxm"] = run_pingpong(
        args.mpirun, ["--mca", "pml", "cm", "--mca", "mtl", "ofi", "--mca", "btl", "self",
                      "--mca", "mtl_ofi_provider_include", "tcp;ofi_rxm"], tcp_env, args.pingpong, args.seconds,
        timeout)

    sockdir = tempfile.mkdtemp(prefix="npo-mpi-bench-")
    daemon_log = open(os.path.join(sockdir, "npo-emud.log"), "w+")  # a file: the daemon never blocks on a pipe
    daemon = subprocess.Popen([args.emud, "--topology", "emu:mesh8", "--socket-dir", os.path.join(sockdir, "s")],
                              stdout=daemon_log, stderr=subprocess.STDOUT)
    try:
        ready = False
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and daemon.poll() is None:
            with open(daemon_log.name) as f:
                if "npo-emud: ready " in f.read():
                    ready = True
                    break
            time.sleep(0.05)
        if not ready:
            results["npo;ofi_rxd"], errors["npo;ofi_rxd"] = None, "npo-emud did not get ready"
        else:
            npo_env = dict(env, FI_PROVIDER_PATH=args.provider_dir, NPO_FI_BACKEND=f"emu-remote:{sockdir}/s")
            results["npo;ofi_rxd"], errors["npo;ofi_rxd"] = run_pingpong(
                args.mpirun, ["--mca", "pml", "cm", "--mca", "mtl", "ofi", "--mca", "btl", "self",
                              "--mca", "mtl_ofi_provider_include", "npo"], npo_env, args.pingpong, args.seconds,
                timeout, args.pin_card)
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=10)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
        daemon_log.close()
        shutil.rmtree(sockdir, ignore_errors=True)

    shm = results["shm"]
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    print()
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"CPU: {cpu_name()} ({os.cpu_count()} cores), {date}, 2 ranks, {args.seconds} s per size, "
          f"load average {load}")
    print()
    print("| transport | latency 8 B (us) | vs shm | bandwidth 64 KiB (MB/s) | vs shm | bandwidth 1 MiB (MB/s) | vs shm |")
    print("|---|---|---|---|---|---|---|")
    for name in ["shm", "tcp;ofi_rxm", "npo;ofi_rxd"]:
        r = results[name]
        label = {"shm": "Open MPI shared memory (ob1, vader)", "tcp;ofi_rxm": "libfabric `tcp;ofi_rxm` (mtl ofi)",
                 "npo;ofi_rxd": "libfabric `npo;ofi_rxd` on npo-emud (mtl ofi)"}[name]
        if r is None:
            print(f"| {label} | failed: {errors[name]} | | | | | |")
            continue
        cells = []
        for i, s in enumerate(SIZES):
            lat, bw = r[s]
            if i == 0:
                cells.append(f"{lat:.1f}")
                cells.append(f"{lat / shm[s][0]:.2f}x" if shm else "-")
            else:
                cells.append(f"{bw:.0f}")
                cells.append(f"{bw / shm[s][1]:.2g}" if shm else "-")
        print(f"| {label} | " + " | ".join(cells) + " |")
    return 0 if all(r is not None for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
