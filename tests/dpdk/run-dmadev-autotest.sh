#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs DPDK's own, unmodified dmadev conformance suite (`dpdk-test`, command dmadev_autotest)
# against the dma_npo driver DSO, one or more dma_npo devices at once, and checks that on
# every one of them each group of the suite ran (copy, burst capacity, error handling, fill),
# none was skipped, and the suite passed.
# Usage: run-dmadev-autotest.sh <librte_dma_npo.so> <vdev>...
#   e.g. run-dmadev-autotest.sh build/lib/dpdk/librte_dma_npo.so dma_npo0,backend=emu:mesh8,card=0
set -uo pipefail
pmd="$1"
shift
(($# > 0)) || { echo "usage: $0 <librte_dma_npo.so> <vdev>..."; exit 2; }
command -v dpdk-test >/dev/null 2>&1 || { echo "dpdk-test not found (package dpdk-dev)"; exit 1; }
vdev_args=()
names=()
for v in "$@"; do
  vdev_args+=(--vdev "${v}")
  names+=("${v%%,*}")
done
log="$(mktemp "${TMPDIR:-/tmp}/npo-dmadev-autotest.XXXXXX.log")"
# A DSO under a world-writable directory (a build tree in /tmp) is loaded from a private copy.
{ read -r pmd; read -r plugin_dir; } < <(bash "$(dirname "${BASH_SOURCE[0]}")/plugin-path.sh" "${pmd}")
trap 'rm -f "${log}"; [[ -z "${plugin_dir}" ]] || rm -rf "${plugin_dir}"' EXIT
# One EAL per process; a unique file prefix, no shared config, no huge pages; bounded run.
DPDK_TEST=dmadev_autotest timeout --kill-after=10 240 dpdk-test --no-huge -m 256 --no-pci -l 0-1 --no-shconf \
  --file-prefix "npo-dmadev-$$" -d "${pmd}" "${vdev_args[@]}" </dev/null >"${log}" 2>&1
rc=$?
# The suite prints progress with \r; make it line-oriented for the checks and the log.
tr '\r' '\n' <"${log}" | grep -v '^Ops submitted' | grep -v '^$'
fail=0
if ((rc != 0)); then
  echo "FAIL: dpdk-test exited with ${rc}"
  fail=1
fi
grep -q '^Test OK' "${log}" || { echo "FAIL: dmadev_autotest did not print 'Test OK'"; fail=1; }
for name in "${names[@]}"; do
  section="$(tr '\r' '\n' <"${log}" |
    awk -v dev="[${name}]" 'index($0, "### Test dmadev instance") {on = index($0, dev) > 0} on')"
  [[ -n "${section}" ]] || { echo "FAIL: the suite did not test ${name}"; fail=1; continue; }
  for group in "Running copy Tests" "Running burst capacity Tests" "Running error handling Tests" "Running fill Tests"; do
    grep -q "${group}" <<<"${section}" || { echo "FAIL: group '${group}' did not run on ${name}"; fail=1; }
  done
  if grep -qi 'skipping' <<<"${section}"; then
    echo "FAIL: a group was skipped on ${name}"
    fail=1
  fi
done
((fail == 0)) && echo "PASS: dmadev_autotest on ${names[*]}: copy, burst capacity, error handling, fill"
exit "${fail}"
