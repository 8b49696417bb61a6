#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# fi_pingpong (libfabric-bin, unmodified) between two processes on two cards of one npo-emud
# supernode, through libnpo-fi.so: starts its own daemon on a temp socket dir, runs server
# (card SRV_CARD) and client (card CLI_CARD) with bounded waits, stops everything it started.
# Usage: run-pingpong.sh NPO_EMUD PROVIDER_DIR TOPOLOGY SRV_CARD CLI_CARD -- fi_pingpong args...
set -euo pipefail
# shellcheck source=fi-script.sh
source "$(dirname "${BASH_SOURCE[0]}")/fi-script.sh"
emud="$1" provdir="$2" topo="$3" srv_card="$4" cli_card="$5"
shift 5
[[ "${1:-}" == "--" ]] && shift
if ! command -v fi_pingpong >/dev/null; then
  echo "SKIP: fi_pingpong not installed (package libfabric-bin)"
  exit 0
fi
fi_workdir npo-fi-pp

"${emud}" --topology "${topo}" --socket-dir "${dir}/sock" >"${dir}/emud.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 300); do
  [[ -S "${dir}/sock/card-${cli_card}.sock" && -S "${dir}/sock/card-${srv_card}.sock" ]] && break
  sleep 0.05
done
if [[ ! -S "${dir}/sock/card-${cli_card}.sock" ]]; then
  echo "npo-emud did not come up in 15 s"; cat "${dir}/emud.log"; exit 1
fi
export FI_PROVIDER_PATH="${provdir}" FI_NPO_BACKEND="emu-remote:${dir}/sock"
# a stall (no completion, no arrival for 5 s) logs the endpoint's ring state once: shown on failure
export FI_NPO_STALL_MS="${FI_NPO_STALL_MS:-5000}" FI_LOG_LEVEL="${FI_LOG_LEVEL:-warn}" FI_LOG_PROV="${FI_LOG_PROV:-npo}"
unset FI_NPO_CARD
# ofi_rxd layered over the DGRAM core is offered only on request (docs/libfabric.md "Layering")
if [[ "$*" == *ofi_rxd* ]]; then export FI_NPO_LAYERING=1; else unset FI_NPO_LAYERING; fi
port=$((20000 + ($$ % 20000)))
# 200 s: 46 sizes take 12-21 s on an idle 2-core VM and up to ~120 s while other builds load it.
timeout 200 fi_pingpong "$@" -d "npo${srv_card}" -B "${port}" >"${dir}/server.log" 2>&1 &
srv=$!
pids+=("${srv}")
wait_listen "${port}" "${srv}" || { echo "FAIL: the fi_pingpong server did not listen on port ${port} within 30 s"; cat "${dir}"/s*.log; exit 1; }
set +e
timeout 200 fi_pingpong "$@" -d "npo${cli_card}" -P "${port}" 127.0.0.1 >"${dir}/client.log" 2>&1
cli_rc=$?
wait "${srv}"
srv_rc=$?
set -e
echo "--- client (npo${cli_card})"; cat "${dir}/client.log"
echo "--- server (npo${srv_card})"; tail -n 3 "${dir}/server.log"
if [[ ${cli_rc} -ne 0 || ${srv_rc} -ne 0 ]]; then
  grep -h "npo: stall" "${dir}/client.log" "${dir}/server.log" | cut -c1-4000 || true
  echo "FAIL: fi_pingpong client rc=${cli_rc} server rc=${srv_rc}"; exit 1
fi
# every size ran and both sides checked the data (-c): a result line per size, at least 10
# for -S all, exactly 1 for -S SIZE
want=10
if [[ "$*" =~ -S[[:space:]]+[0-9]+ ]]; then want=1; fi
lines=$(grep -cE '^[0-9.]+[kmg]?[[:space:]]+[0-9]+[[:space:]]+=[0-9]+' "${dir}/client.log" || true)
if [[ ${lines} -lt ${want} ]]; then
  echo "FAIL: expected a result line per size (${want} or more), got ${lines}"; exit 1
fi
echo "PASS: ${lines} sizes"
