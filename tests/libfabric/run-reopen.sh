#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Endpoints that replace each other next to a peer that stays up, across processes on one
# npo-emud (docs/libfabric.md "Data path"): fi-reopen-peer's `peer` holds card 1 for the whole
# test; ROUNDS `endpoint` processes open card 0 one after another, each with the card,
# endpoint number and window slot of the one before. Each round exchanges 20 eager messages
# and a 256 KiB rendezvous both ways, data checked. Before 2026-12-02 the second process's
# messages never arrived (its sequence restarted at 1 in the peer's ring) and the peer's went
# to the first process's ring state. The daemon's log must show every endpoint process as the
# owner of card 0 in turn (the exchanges went through the cards, not around them).
# Usage: run-reopen.sh NPO_EMUD FI_REOPEN_PEER PROVIDER_DIR [ROUNDS]
set -euo pipefail
# shellcheck source=fi-script.sh
source "$(dirname "${BASH_SOURCE[0]}")/fi-script.sh"
emud="$1" prog="$2" provdir="$3" rounds="${4:-3}"
fi_workdir npo-fi-reopen
"${emud}" --topology emu:mesh8 --socket-dir "${dir}/sock" >"${dir}/emud.log" 2>&1 &
pids+=("$!")
for _ in $(seq 1 600); do grep -q '^npo-emud: ready' "${dir}/emud.log" && break; sleep 0.05; done
grep -q '^npo-emud: ready' "${dir}/emud.log" || { echo "npo-emud did not come up"; cat "${dir}/emud.log"; exit 1; }
export FI_PROVIDER_PATH="${provdir}" FI_NPO_BACKEND="emu-remote:${dir}/sock"
unset FI_NPO_CARD
mkdir -p "${dir}/x"
timeout 120 "${prog}" peer "${dir}/x" "${rounds}" >"${dir}/peer.log" 2>&1 &
peer=$!
pids+=("${peer}")
fail=0
for ((r = 0; r < rounds; r++)); do
  if ! timeout 60 "${prog}" endpoint "${dir}/x" "${r}" >"${dir}/endpoint${r}.log" 2>&1; then
    echo "FAIL: endpoint process ${r}"; cat "${dir}/endpoint${r}.log"; fail=1; break
  fi
  cat "${dir}/endpoint${r}.log"
done
set +e
wait "${peer}"; peer_rc=$?
set -e
cat "${dir}/peer.log"
[[ ${peer_rc} -eq 0 ]] || { echo "FAIL: the peer exited ${peer_rc}"; fail=1; }
owners=$(grep -c 'connect card=0 pid=[0-9]* mode=owner' "${dir}/emud.log" || true)
if [[ ${fail} -eq 0 && ${owners} -lt ${rounds} ]]; then
  echo "FAIL: npo-emud saw ${owners} owners of card 0, expected ${rounds}"; cat "${dir}/emud.log"; fail=1
fi
[[ ${fail} -eq 0 ]] && echo "PASS: ${rounds} endpoint processes in turn on card 0, each exchanged both ways with the peer on card 1"
exit "${fail}"
