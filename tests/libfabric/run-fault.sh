#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A card removed under running traffic ends the processes that use the provider with an error
# naming the card, never a hang: fi_pingpong (dgram) between cards 0 and 1 of an npo-emud
# mesh8 with FI_NPO_FAULT=abort (the default inside an MPI job), then
# `npo-emu fault --kind surprise_removal --card 1`: the process on card 1 must end within 10 s
# with "npo: fatal: card 1 (npo1, fabric id 2) is gone". (Its peer only waits to receive: in an
# MPI job the launcher ends it when a rank exits; here the test stops it.) The message names
# the card once: not the System-local `[card=0]` of npo-hal's error context.
# With MODE daemon_killed (issue fix6p point 1) npo-emud itself is killed (SIGKILL) instead:
# both processes must end within 10 s saying "npo-emud at DIR is gone", never "card removed"
# or a bare timeout -- a dead daemon is not a removed card.
# Usage: run-fault.sh NPO_EMUD NPO_EMU PROVIDER_DIR [removal|daemon_killed]
set -euo pipefail
# shellcheck source=fi-script.sh
source "$(dirname "${BASH_SOURCE[0]}")/fi-script.sh"
emud="$1" emu="$2" provdir="$3" mode="${4:-removal}"
if ! command -v fi_pingpong >/dev/null; then
  echo "SKIP: fi_pingpong not installed (package libfabric-bin)"; exit 0
fi
fi_workdir npo-fi-fault
"${emud}" --topology emu:mesh8 --socket-dir "${dir}/sock" >"${dir}/emud.log" 2>&1 &
emud_pid=$!
pids+=("${emud_pid}")
for _ in $(seq 1 300); do [[ -S "${dir}/sock/card-1.sock" ]] && break; sleep 0.05; done
[[ -S "${dir}/sock/card-1.sock" ]] || { echo "npo-emud did not come up"; cat "${dir}/emud.log"; exit 1; }
export FI_PROVIDER_PATH="${provdir}" FI_NPO_BACKEND="emu-remote:${dir}/sock" FI_NPO_FAULT=abort
unset FI_NPO_CARD
port=$((20000 + ($$ % 20000)))
# enough iterations to outlast the test: the fault must end them
timeout 60 fi_pingpong -p npo -e dgram -S 64 -I 100000000 -d npo0 -B "${port}" >"${dir}/server.log" 2>&1 &
srv=$!
pids+=("${srv}")
wait_listen "${port}" "${srv}" || { echo "FAIL: the fi_pingpong server did not listen on port ${port} within 30 s"; cat "${dir}"/s*.log; exit 1; }
timeout 60 fi_pingpong -p npo -e dgram -S 64 -I 100000000 -d npo1 -P "${port}" 127.0.0.1 >"${dir}/client.log" 2>&1 &
cli=$!
pids+=("${cli}")
# Under traffic: the client's domain owns card 1 (npo-emud logs the owner's connect), plus 1 s
# of ping-pong. A fixed sleep could land the fault inside fi_domain on a loaded host (then
# fi_domain fails with -ENODATA and nothing runs).
for _ in $(seq 1 600); do grep -q 'connect card=1 pid=[0-9]* mode=owner' "${dir}/emud.log" && break; sleep 0.05; done
grep -q 'connect card=1 pid=[0-9]* mode=owner' "${dir}/emud.log" ||
  { echo "FAIL: the client did not open card 1 within 30 s"; cat "${dir}/client.log"; exit 1; }
sleep 1
kill -0 "${cli}" 2>/dev/null || { echo "FAIL: the client ended before the fault"; cat "${dir}/client.log"; exit 1; }
if [[ "${mode}" == daemon_killed ]]; then
  kill -KILL "${emud_pid}"
else
  "${emu}" fault --socket-dir "${dir}/sock" --kind surprise_removal --card 1
fi
t0=$(date +%s%N)
set +e
wait "${cli}"; cli_rc=$?
t1=$(date +%s%N)
set -e
# A dead daemon takes the server's card too: it must end by itself (below); after a removal of
# card 1 only, the server would wait forever.
[[ "${mode}" == daemon_killed ]] || kill "${srv}" 2>/dev/null || true
echo "--- client (npo1)"; tail -n 3 "${dir}/client.log"
cli_ms=$(( (t1 - t0) / 1000000 ))
echo "the process on the removed card ended ${cli_ms} ms after the fault (rc ${cli_rc})"
(( cli_rc != 0 && cli_rc != 124 )) || { echo "FAIL: it did not end with an error"; exit 1; }
(( cli_ms < 10000 )) || { echo "FAIL: not within 10 s"; exit 1; }
grep -q 'npo: fatal: .*card 1 (npo1, fabric id 2)' "${dir}/client.log" ||
  { echo "FAIL: the error does not name card 1"; exit 1; }
if grep -q '\[card=0\]' "${dir}/client.log"; then
  echo "FAIL: the message also names card 0 (npo-hal's System-local index)"; exit 1
fi
if [[ "${mode}" == daemon_killed ]]; then
  grep -q "npo: fatal: .*npo-emud at ${dir}/sock is gone" "${dir}/client.log" ||
    { echo "FAIL: the client does not say that npo-emud is gone"; exit 1; }
  if grep -q 'card removed' "${dir}/client.log"; then echo "FAIL: a dead daemon reported as a removed card"; exit 1; fi
  # the server (only waiting to receive) finds it too, by its heartbeat
  for _ in $(seq 1 200); do kill -0 "${srv}" 2>/dev/null || break; sleep 0.05; done
  kill -0 "${srv}" 2>/dev/null && { echo "FAIL: the server did not end within 10 s"; cat "${dir}/server.log"; exit 1; }
  echo "--- server (npo0)"; tail -n 3 "${dir}/server.log"
  grep -q "npo: fatal: card 0 (npo0, fabric id 1) is gone: .*npo-emud at ${dir}/sock is gone" "${dir}/server.log" ||
    { echo "FAIL: the server does not say that npo-emud is gone"; exit 1; }
else
  grep -q 'card removed' "${dir}/client.log" || { echo "FAIL: the removal is not called one"; exit 1; }
fi
echo PASS
