#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Prints a path DPDK's EAL will load the driver DSO <pmd> from with `-d`. EAL refuses a plugin
# whose directory or any directory above it is world-writable ("directory path /tmp is
# world-writable and insecure"), so a build tree under /tmp could not run DPDK's tests. Then the
# DSO is copied (its RUNPATH is absolute, so it still finds libnpo-hal) into a new private
# directory under $HOME/.cache, whose path the caller removes with the parent directory it
# prints on the second line; otherwise <pmd> itself and an empty second line.
# Usage: plugin-path.sh <pmd>
set -euo pipefail
pmd="$1"
world_writable_above() {
  local d
  d="$(cd "$(dirname "$1")" && pwd -P)"
  while :; do
    if [[ -n "$(find "${d}" -maxdepth 0 -perm -o+w 2>/dev/null)" ]]; then return 0; fi
    [[ "${d}" == / ]] && return 1
    d="$(dirname "${d}")"
  done
}
if ! world_writable_above "${pmd}"; then
  printf '%s\n\n' "${pmd}"
  exit 0
fi
base="${HOME:-/root}/.cache"
mkdir -p "${base}"
dir="$(mktemp -d "${base}/npo-dpdk-plugin.XXXXXX")"
cp "${pmd}" "${dir}/"
if world_writable_above "${dir}/$(basename "${pmd}")"; then
  echo "plugin-path: ${pmd} and ${dir} both sit under a world-writable directory, which DPDK refuses" >&2
fi
printf '%s\n%s\n' "${dir}/$(basename "${pmd}")" "${dir}"
