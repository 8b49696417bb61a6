#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Queries the /npo/ telemetry commands of a running DPDK process from another process with
DPDK's own client, dpdk-telemetry.py, and checks the answers against the emulated fabric.

The DPDK process is dpdk-test (interactive, stdin from a pipe) with the dma_npo driver DSO
and one device on emu:mesh8 with bring_up=1 (links trained, neighbours discovered). The test
starts and stops it itself, with bounded waits.
Usage: telemetry_test.py <librte_dma_npo.so>
"""
import json
import os
import shutil
import subprocess
import sys
import time

# A DSO under a world-writable directory (a build tree in /tmp) is loaded from a private copy
# (plugin-path.sh: DPDK refuses such a directory).
pmd, plugin_dir = subprocess.run(
    ["bash", os.path.join(os.path.dirname(os.path.abspath(__file__)), "plugin-path.sh"), sys.argv[1]],
    check=True, capture_output=True, text=True).stdout.split("\n")[:2]
prefix = f"npo-tel-{os.getpid()}"
runtime = "/var/run/dpdk" if os.getuid() == 0 else os.path.join(os.environ.get("XDG_RUNTIME_DIR", "/tmp"), "dpdk")
sock = os.path.join(runtime, prefix, "dpdk_telemetry.v2")

app = subprocess.Popen(
    ["dpdk-test", "--no-huge", "-m", "256", "--no-pci", "-l", "0-1", "--file-prefix", prefix, "-d", pmd,
     "--vdev", "dma_npo0,backend=emu:mesh8,card=0,bring_up=1"],
    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


try:
    deadline = time.monotonic() + 60
    while not os.path.exists(sock) and time.monotonic() < deadline and app.poll() is None:
        time.sleep(0.1)
    if not os.path.exists(sock):
        app.kill()
        print(app.communicate(timeout=10)[0])
        sys.exit("FAIL: no telemetry socket " + sock)
    # The socket appears at EAL init; the vdev probe (bring-up) may still be running: wait
    # until /npo/cards reports the device.
    cmds = ["/npo/cards", "/npo/links", "/npo/lane,0,0", "/npo/lane,0,7", "/npo/lane,99,0", "/npo/links,abc",
            "/npo/links,3"]
    answers = {}
    while time.monotonic() < deadline:
        out = subprocess.run([sys.executable, "/usr/bin/dpdk-telemetry.py", "-f", prefix],
                             input="\n".join(cmds) + "\n", capture_output=True, text=True, timeout=60)
        lines = [json.loads(x) for x in out.stdout.splitlines() if x.startswith("{")]
        # One reply per command, in order, keyed by the command without its parameters.
        answers = {c: line.get(c.split(",")[0], "missing") for c, line in zip(cmds, lines)}
        cards = answers.get("/npo/cards")
        if cards and cards.get("count", 0) > 0:
            break
        time.sleep(0.2)
    for c in cmds:
        print(c, "->", json.dumps(answers.get(c))[:300])

    cards = answers.get("/npo/cards") or {}
    check(cards.get("count") == 8, "/npo/cards: 8 cards")
    check(len(set(cards.get("fabric_id", []))) == 8, "/npo/cards: 8 distinct fabric ids")
    check(cards.get("dmadev", [""])[0] == "dma_npo0", "/npo/cards: card 0 is driven by dma_npo0")
    check(all(b == "emu:mesh8" for b in cards.get("backend", [])), "/npo/cards: backend emu:mesh8")
    # Power (mailbox POWER_READ): idle 60 W plus modules and lanes, under the default 700 W limit.
    check(len(cards.get("power_mw", [])) == 8 and all(60000 <= w < 700000 for w in cards["power_mw"]),
          f"/npo/cards: power_mw of every card ({cards.get('power_mw')})")
    check(all(l == 700000 for l in cards.get("power_limit_mw", [])), "/npo/cards: default power limit 700 W")
    check(all(t == 0 for t in cards.get("throttled", [1])), "/npo/cards: no card throttled")
    check(all(e > 0 for e in cards.get("energy_mj", [0])), "/npo/cards: energy counts")

    links = answers.get("/npo/links") or {}
    n = links.get("rows", 0)
    check(n == sum(cards.get("ports", [])) and n > 0, f"/npo/links: one row per port ({n})")
    up = [i for i in range(n) if links["link_up"][i] == 1]
    # Full mesh of 8: ports 0..6 of every card cabled and trained, port 7 empty.
    check(len(up) == 56, f"/npo/links: 56 ports up after bring-up ({len(up)})")
    # every up port has its module: CMIS power class 8 (max 16 W), out of low power (more than
    # its 1.5 W low-power draw, at most the 16 W maximum), a temperature
    mods = [(links["module_power_class"][i], links["module_draw_mw"][i], links["module_temp_c"][i]) for i in up]
    check(all(c == 8 and 1500 < w <= 16000 and t != "" for c, w, t in mods),
          f"/npo/links: the modules of the up ports (class, mW, C): {mods[:3]} ...")
    fid = cards.get("fabric_id", [])
    ok_nb = all(links["neighbor_fabric_id"][i] in fid and links["neighbor_fabric_id"][i] != fid[links["card"][i]]
                for i in up)
    check(ok_nb, "/npo/links: every up port names another card as its neighbour")

    lane = answers.get("/npo/lane,0,0") or {}
    check(lane.get("lanes") == 8 and lane.get("state") == "up", "/npo/lane,0,0: 8 lanes, state up")
    check(all(x == 1 for x in lane.get("cdr_lock", [])), "/npo/lane,0,0: every lane has CDR lock")
    check(all(float(s) > 10 for s in lane.get("snr_db", ["0"])), "/npo/lane,0,0: SNR > 10 dB on every lane")
    lane7 = answers.get("/npo/lane,0,7") or {}
    check(lane7.get("state") != "up" and lane7.get("fec_lock") == 0, "/npo/lane,0,7: empty port is not up")
    check(answers.get("/npo/lane,99,0", "missing") is None, "/npo/lane,99,0: bad card -> null (-EINVAL)")
    check(answers.get("/npo/links,abc", "missing") is None, "/npo/links,abc: bad parameter -> null")
    l3 = answers.get("/npo/links,3") or {}
    check(l3.get("rows") == 8 and set(l3.get("card", [])) == {3}, "/npo/links,3: the 8 ports of card 3")
finally:
    if app.poll() is None:
        try:
            app.communicate("quit\n", timeout=30)
        except subprocess.TimeoutExpired:
            app.kill()
            app.communicate(timeout=10)
    shutil.rmtree(os.path.join(runtime, prefix), ignore_errors=True)
    if plugin_dir:
        shutil.rmtree(plugin_dir, ignore_errors=True)
print("PASS" if not failures else f"FAIL: {len(failures)} checks")
sys.exit(1 if failures else 0)
