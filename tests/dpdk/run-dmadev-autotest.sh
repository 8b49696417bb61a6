#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs DPDK's own, unmodified dmadev conformance suite (`dpdk-test`, command dmadev_autotest)
# against the dma_npo driver DSO on an npo backend, and checks that every group of the suite
# ran on dma_npo0 (copy, burst capacity, error handling, fill) and passed.
# Usage: run-dmadev-autotest.sh <librte_dma_npo.so> [backend-uri] [card]
set -uo pipefail
pmd="$1"
uri="${2:-emu:mesh8}"
card="${3:-0}"
command -v dpdk-test >/dev/null 2>&1 || { echo "dpdk-test not found (package dpdk-dev)"; exit 1; }
log="$(mktemp "${TMPDIR:-/tmp}/npo-dmadev-autotest.XXXXXX.log")"
trap 'rm -f "${log}"' EXIT
# One EAL per process; a unique file prefix and no shared config, no huge pages.
DPDK_TEST=dmadev_autotest timeout --kill-after=10 240 dpdk-test --no-huge -m 256 --no-pci -l 0-1 --no-shconf \
  --file-prefix "npo-dmadev-$$" -d "${pmd}" --vdev "dma_npo0,backend=${uri},card=${card}" </dev/null >"${log}" 2>&1
rc=$?
# The suite prints progress with \r; make it line-oriented for the checks and the log.
tr '\r' '\n' <"${log}" | grep -v '^Ops submitted' | grep -v '^$'
fail=0
if ((rc != 0)); then
  echo "FAIL: dpdk-test exited with ${rc}"
  fail=1
fi
grep -q '^Test OK' "${log}" || { echo "FAIL: dmadev_autotest did not print 'Test OK'"; fail=1; }
# The groups of dma_npo0 (dev 0: the --vdev is probed before the suite creates dma_skeleton).
section="$(awk '/### Test dmadev instance .*\[dma_npo0\]/ {on = 1; print; next} /### Test dmadev instance/ {on = 0} on' "${log}" | tr '\r' '\n')"
for group in "Running copy Tests" "Running burst capacity Tests" "Running error handling Tests" "Running fill Tests"; do
  grep -q "${group}" <<<"${section}" || { echo "FAIL: group '${group}' did not run on dma_npo0"; fail=1; }
done
if grep -qi 'skipping' <<<"${section}"; then
  echo "FAIL: a group was skipped on dma_npo0"
  fail=1
fi
((fail == 0)) && echo "PASS: dmadev_autotest on dma_npo0 (${uri}, card ${card}): copy, burst capacity, error handling, fill"
exit "${fail}"
