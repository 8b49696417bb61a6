#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# dmadev_autotest (run-dmadev-autotest.sh) against dma_npo on the emu-remote backend: starts
# its own npo-emud (mesh8) in a temporary socket directory, runs the suite on one card of it
# (DPDK's --no-huge memory is an unsealable memfd: the daemon maps it SIGBUS-guarded, protocol
# §5.2), checks the daemon served the driver as the card's owner, and stops the daemon.
# Usage: run-dmadev-autotest-emud.sh <npo-emud> <librte_dma_npo.so>
set -uo pipefail
emud="$1"
pmd="$2"
here="$(cd "$(dirname "$0")" && pwd)"
dir="$(mktemp -d "${TMPDIR:-/tmp}/npo-dmadev-emud.XXXXXX")"
log="${dir}.log"
pid=""
cleanup() {
  if [[ -n "${pid}" ]] && kill -0 "${pid}" 2>/dev/null; then
    kill -TERM "${pid}" 2>/dev/null
    for _ in $(seq 50); do kill -0 "${pid}" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "${pid}" 2>/dev/null
    wait "${pid}" 2>/dev/null
  fi
  rm -rf "${dir}" "${log}"
}
trap cleanup EXIT
"${emud}" --topology emu:mesh8 --socket-dir "${dir}" >"${log}" 2>&1 &
pid=$!
for _ in $(seq 100); do
  grep -q 'ready' "${log}" && break
  kill -0 "${pid}" 2>/dev/null || break
  sleep 0.1
done
grep -q 'ready' "${log}" || { echo "FAIL: npo-emud did not get ready within 10 s"; cat "${log}"; exit 1; }
bash "${here}/run-dmadev-autotest.sh" "${pmd}" "dma_npo0,backend=emu-remote:${dir}?card=2,card=0"
rc=$?
grep -q 'connect card=2 pid=[0-9]* mode=owner' "${log}" || { echo "FAIL: the driver never owned card 2"; rc=1; }
kill -TERM "${pid}"
for _ in $(seq 50); do kill -0 "${pid}" 2>/dev/null || break; sleep 0.1; done
wait "${pid}"
drc=$?
pid=""
echo "--- npo-emud"
cat "${log}"
((drc == 0)) || { echo "FAIL: npo-emud exited with ${drc}"; rc=1; }
exit "${rc}"
