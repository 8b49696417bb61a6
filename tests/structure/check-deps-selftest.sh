#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Proves check-deps.sh can fail: it must pass on testdata/clean, and on clean + each
# testdata/violations/<case> overlay it must fail with exactly one violation of the rule named
# in the case's EXPECT file, pointing at the overlay's file. Also runs it on the real tree.
# Usage: check-deps-selftest.sh
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
check="${here}/check-deps.sh"
data="${here}/testdata"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/npo-deps.XXXXXX")"
trap 'rm -rf "${tmp}"' EXIT

passed=0
failed=0
fail() {
  echo "FAIL: $*"
  failed=$((failed + 1))
}

# 1. The clean fake tree passes.
if out="$("${check}" "${data}/clean" 2>&1)"; then
  passed=$((passed + 1))
else
  fail "clean tree reported violations:"
  echo "${out}"
fi

# 2. Every violation case fails with its rule, its file, and nothing else.
cases=0
for dir in "${data}"/violations/*/; do
  name="$(basename "${dir}")"
  cases=$((cases + 1))
  rule="$(head -n1 "${dir}/EXPECT")"
  tree="${tmp}/${name}"
  mkdir -p "${tree}"
  cp -R "${data}/clean/." "${tree}/"
  cp -R "${dir}." "${tree}/"
  rm -f "${tree}/EXPECT"
  bad_files="$(cd "${dir}" && find . -type f ! -name EXPECT | sed 's|^\./||')"
  if out="$("${check}" "${tree}" 2>&1)"; then
    fail "${name}: check-deps passed, expected [${rule}]"
    continue
  fi
  if ! grep -q "\[${rule}\]" <<<"${out}"; then
    fail "${name}: no [${rule}] in:"$'\n'"${out}"
    continue
  fi
  ok=1
  while IFS= read -r f; do
    grep -q "^${f}:[0-9]*: \[${rule}\]" <<<"${out}" || { fail "${name}: ${f} not reported as file:line:"$'\n'"${out}"; ok=0; }
  done <<<"${bad_files}"
  n="$(grep -c ': \[' <<<"${out}" || true)"
  if ((n != 1)); then
    fail "${name}: expected exactly 1 violation, got ${n}:"$'\n'"${out}"
    ok=0
  fi
  ((ok)) && passed=$((passed + 1))
done
((cases > 0)) || fail "no violation cases under ${data}/violations"

# 3. The real tree.
if out="$("${check}" "${here}/../.." 2>&1)"; then
  echo "${out}"
  passed=$((passed + 1))
else
  fail "the repository breaks the dependency rules:"
  echo "${out}"
fi

echo "check-deps self-test: ${passed} passed, ${failed} failed"
((failed == 0))
