#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Checks the systemd unit templates (tools/*/*.service.in) with `systemd-analyze verify`: each
# is written with ExecStart pointing at the build's binaries, as the install writes it with the
# prefix's bindir. Skips (exit 77) where systemd-analyze is missing.
# Usage: check-units.sh <bindir> <template>...
set -euo pipefail
bindir="$1"
shift
if ! command -v systemd-analyze >/dev/null; then
  echo "SKIP: systemd-analyze not found"
  exit 77
fi
work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT
for template in "$@"; do
  unit="${work}/$(basename "${template}" .in)"
  sed "s|@NPO_UNIT_BINDIR@|${bindir}|g" "${template}" >"${unit}"
  if grep -n '@[A-Z_]*@' "${unit}"; then
    echo "FAIL: ${template}: placeholder left"
    exit 1
  fi
  grep -q '^User=npo$' "${unit}" || { echo "FAIL: ${template}: not User=npo"; exit 1; }
  # verify prints problems on stderr and fails on errors; warnings about the host (no running
  # systemd in a container) are not the unit's.
  out="$(timeout 60 systemd-analyze verify "${unit}" 2>&1)" || { echo "${out}"; echo "FAIL: ${template}"; exit 1; }
  if grep -F "${unit}" <<<"${out}"; then
    echo "FAIL: ${template}: systemd-analyze verify complained"
    exit 1
  fi
  echo "ok: $(basename "${unit}")"
done
