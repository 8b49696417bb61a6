#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Every top-level folder of npo-hal (and the root) has a non-empty README.md saying what lives
# there and what it may depend on. Folders: the known ones plus every other top-level folder
# that holds files git tracks or would track (build trees and hidden folders are skipped).
# Usage: check-readmes.sh [ROOT]
set -euo pipefail

root="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
cd "${root}"

declare -A seen=()
folders=()
add() { [[ -n "${seen[$1]:-}" ]] || { seen[$1]=1; folders+=("$1"); }; }
add .
for d in hal drivers firmware-iface emulator tools tests udev docs; do add "${d}"; done
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  while IFS= read -r d; do add "${d}"; done < <(git ls-files --cached --others --exclude-standard |
    awk -F/ 'NF > 1 && $1 !~ /^\./ {print $1}' | sort -u)
else
  while IFS= read -r d; do add "${d#./}"; done < <(find . -mindepth 1 -maxdepth 1 -type d \
    ! -name '.*' ! -name 'build*' | sort)
fi

missing=0
for d in "${folders[@]}"; do
  if [[ ! -s "${d}/README.md" ]]; then
    echo "${d}/README.md: missing or empty (say what lives in ${d}/ and what it may depend on)"
    missing=$((missing + 1))
  fi
done
if ((missing)); then
  echo "check-readmes: ${missing} folder(s) without README.md"
  exit 1
fi
echo "check-readmes: OK (${#folders[@]} folders: ${folders[*]})"
