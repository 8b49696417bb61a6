#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Checks that every C++ source of npo-hal is formatted per .clang-format.
# Usage: check-format.sh [--fix] [--clang-format PROGRAM]
#   --fix   rewrite the files in place (clang-format -i) instead of checking
# Folders: hal drivers firmware-iface emulator tools tests (tests/**/testdata excluded).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
fix=0
clang_format="${CLANG_FORMAT:-}"
while (($#)); do
  case "$1" in
    --fix) fix=1 ;;
    --clang-format) clang_format="$2"; shift ;;
    -h | --help) sed -n '3,6p' "$0"; exit 0 ;;
    *) echo "check-format: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done
if [[ -z "${clang_format}" ]]; then
  for c in clang-format clang-format-19 clang-format-16 clang-format-15 clang-format-14; do
    if command -v "${c}" >/dev/null 2>&1; then clang_format="${c}"; break; fi
  done
fi
if [[ -z "${clang_format}" ]]; then
  echo "check-format: clang-format not found (bash tools/setup-debian.sh installs it)" >&2
  exit 2
fi

cd "${root}"
folders=()
for d in hal drivers firmware-iface emulator tools tests; do [[ -d "${d}" ]] && folders+=("${d}"); done
mapfile -d '' files < <(find "${folders[@]}" -type f \( -name '*.hpp' -o -name '*.cpp' \) \
  -not -path '*/testdata/*' -print0 | sort -z)
if ((${#files[@]} == 0)); then
  echo "check-format: no files"
  exit 0
fi

if ((fix)); then
  printf '%s\0' "${files[@]}" | xargs -0 -n 50 "${clang_format}" -i --style=file
  echo "check-format: formatted ${#files[@]} files with $("${clang_format}" --version | sed 's/.*version \([0-9.]*\).*/\1/')"
  exit 0
fi

bad=()
for f in "${files[@]}"; do
  if ! "${clang_format}" --dry-run -Werror --style=file "${f}" >/dev/null 2>&1; then
    bad+=("${f}")
  fi
done
if ((${#bad[@]})); then
  for f in "${bad[@]}"; do
    # first few differences, as clang-format reports them
    "${clang_format}" --dry-run --style=file "${f}" 2>&1 | grep -m 3 -A 2 'warning:' || true
  done
  echo
  echo "check-format: ${#bad[@]} of ${#files[@]} files need formatting:"
  printf '  %s\n' "${bad[@]}"
  echo "fix: tests/structure/check-format.sh --fix"
  exit 1
fi
echo "check-format: OK (${#files[@]} files, ${clang_format})"
