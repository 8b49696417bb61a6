#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Compiles one probe source with the include path of one build layer (the flags CMake gives
# that layer's target) and checks the outcome:
#   check-layer.sh --cxx CXX --expect ok   --source FILE -- FLAGS...   compiles cleanly
#   check-layer.sh --cxx CXX --expect fail --missing HEADER --source FILE -- FLAGS...
#       fails, and because HEADER is not on the layer's include path ("No such file")
# So a forbidden include (DESIGN.md "Dependency rules") is a compile error, not a grep finding.
set -euo pipefail
cxx="" expect="" missing="" source=""
while (($#)); do
  case "$1" in
    --cxx) cxx="$2"; shift 2 ;;
    --expect) expect="$2"; shift 2 ;;
    --missing) missing="$2"; shift 2 ;;
    --source) source="$2"; shift 2 ;;
    --) shift; break ;;
    *) echo "check-layer: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[[ -n "${cxx}" && -n "${source}" && ( "${expect}" == ok || "${expect}" == fail ) ]] ||
  { echo "check-layer: usage: --cxx CXX --expect ok|fail [--missing HEADER] --source FILE -- FLAGS" >&2; exit 2; }
flags=()
for f in "$@"; do
  [[ -n "${f}" && "${f}" != "-I" ]] && flags+=("${f}")
done
set +e
out="$("${cxx}" -std=c++23 -fsyntax-only "${flags[@]}" "${source}" 2>&1)"
rc=$?
set -e
if [[ "${expect}" == ok ]]; then
  if ((rc != 0)); then
    echo "check-layer: FAIL: ${source} should compile with this layer's include path:"; echo "${out}"; exit 1
  fi
  echo "check-layer: ok: ${source} compiles"
  exit 0
fi
if ((rc == 0)); then
  echo "check-layer: FAIL: ${source} compiled, but its include of ${missing} breaks the layer rules"; exit 1
fi
if ! grep -qF "${missing}: No such file or directory" <<<"${out}"; then
  echo "check-layer: FAIL: ${source} failed for another reason than the missing ${missing}:"; echo "${out}"; exit 1
fi
echo "check-layer: ok: ${source} does not compile (${missing} is not on the layer's include path)"
