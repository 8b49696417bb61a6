#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Checks that CHANGELOG.md's newest released entry ("## [X.Y.Z] - DATE", the first after
# "## [Unreleased]") is the version CMake's project() declares, the single version source.
# Usage: check-changelog.sh <CHANGELOG.md> <PROJECT_VERSION>
set -euo pipefail
changelog="$1" version="$2"
[[ -f "${changelog}" ]] || { echo "FAIL: no ${changelog}"; exit 1; }
grep -q '^## \[Unreleased\]' "${changelog}" || { echo "FAIL: ${changelog} has no '## [Unreleased]' section"; exit 1; }
newest="$(grep -m1 -E '^## \[[0-9]+\.[0-9]+\.[0-9]+\] - [0-9]{4}-[0-9]{2}-[0-9]{2}$' "${changelog}" | sed -E 's/^## \[([^]]+)\].*/\1/')" || true
[[ -n "${newest}" ]] || { echo "FAIL: ${changelog} has no released entry '## [X.Y.Z] - YYYY-MM-DD'"; exit 1; }
if [[ "${newest}" != "${version}" ]]; then
  echo "FAIL: CHANGELOG.md's newest release is ${newest}, CMakeLists.txt's project() says ${version}"
  exit 1
fi
echo "changelog: newest release ${newest} = PROJECT_VERSION"
