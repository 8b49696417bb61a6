#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Prints a path DPDK's EAL will load the driver DSO <pmd> from with `-d`. EAL refuses a plugin
# whose directory or any directory above it is world-writable ("directory path /tmp is
# world-writable and insecure"), so a build tree under /tmp could not run DPDK's tests. Then the
# DSO is copied into a new private directory under $HOME/.cache, which the caller removes (the
# second line); otherwise <pmd> itself and an empty second line. A build tree's DSO has an
# absolute RUNPATH and finds libnpo-hal as it is; an installed one's is relative ($ORIGIN/..),
# so each $ORIGIN entry is mirrored beside the copy with links to the libraries it held.
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
# Two levels down, so that a RUNPATH of $ORIGIN/.. stays inside ${dir}.
copy_dir="${dir}/lib/plugin"
mkdir -p "${copy_dir}"
cp "${pmd}" "${copy_dir}/"
orig_dir="$(cd "$(dirname "${pmd}")" && pwd -P)"
runpath="$(readelf -d "${pmd}" 2>/dev/null | sed -n 's/.*(RUNPATH).*\[\(.*\)\].*/\1/p')"
IFS=':' read -r -a entries <<<"${runpath}"
for e in "${entries[@]}"; do
  [[ "${e}" == *'$ORIGIN'* ]] || continue
  src="${e//\$ORIGIN/${orig_dir}}"
  dst="${e//\$ORIGIN/${copy_dir}}"
  mkdir -p "${dst}"
  for f in "${src}"/lib*.so*; do
    if [[ -e "${f}" && "$(basename "${f}")" != "$(basename "${pmd}")" ]]; then
      ln -sf "$(cd "$(dirname "${f}")" && pwd -P)/$(basename "${f}")" "${dst}/"
    fi
  done
done
if world_writable_above "${copy_dir}/$(basename "${pmd}")"; then
  echo "plugin-path: ${pmd} and ${dir} both sit under a world-writable directory, which DPDK refuses" >&2
fi
printf '%s\n%s\n' "${copy_dir}/$(basename "${pmd}")" "${dir}"
