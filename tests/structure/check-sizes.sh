#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# File-size limits that keep the middle layer readable (issue 12): no file of the topology
# model over 500 lines, no source file (.cpp, .hpp, .h, .c, at any depth) of hal, drivers,
# emulator or tools over 800 (issue 35). A file over its limit is split by role, not granted
# an exception.
# Usage: check-sizes.sh [ROOT]   Prints "file: N lines > LIMIT (rule)"; exits 1 on any.
set -euo pipefail
root="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
cd "${root}"
shopt -s nullglob globstar
# rule|limit|globs...
rules=(
  "topology-model|500|hal/src/topology_*.cpp hal/include/npo/hal/topology*.hpp hal/include/npo/hal/fabric_spec.hpp drivers/card/topology*.cpp emulator/src/fabric.* emulator/src/scenario.* emulator/src/config.*"
  "source|800|hal/**/*.cpp hal/**/*.hpp hal/**/*.h hal/**/*.c drivers/**/*.cpp drivers/**/*.hpp drivers/**/*.h drivers/**/*.c emulator/**/*.cpp emulator/**/*.hpp emulator/**/*.h emulator/**/*.c tools/**/*.cpp tools/**/*.hpp tools/**/*.h tools/**/*.c"
)
bad=0 files=0
for rule in "${rules[@]}"; do
  IFS='|' read -r name limit globs <<<"${rule}"
  for g in ${globs}; do
    for f in ${g}; do
      files=$((files + 1))
      n=$(wc -l <"${f}")
      if ((n > limit)); then
        echo "${f}: ${n} lines > ${limit} (${name})"
        bad=$((bad + 1))
      fi
    done
  done
done
((files > 0)) || { echo "check-sizes: no files matched: wrong root?"; exit 1; }
if ((bad)); then
  echo "check-sizes: ${bad} file(s) over their limit: split them by role"
  exit 1
fi
echo "check-sizes: OK (${files} files)"
