#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `cmake --install` puts libnpo-fi.so into <prefix>/<libdir>/libfabric/ (with prefix /usr on
# Debian that is /usr/lib/x86_64-linux-gnu/libfabric/, libfabric's default provider folder);
# the installed module exports only fi_prov_ini, needs no npo-hal library beside it, and
# fi_info loads it from there.
# Usage: run-install-check.sh CMAKE BUILD_DIR LIBDIR WORK
set -euo pipefail
cmake_bin="$1" build="$2" libdir="$3" work="$4"
rm -rf "${work}"
mkdir -p "${work}"
"${cmake_bin}" --install "${build}" --prefix "${work}/prefix" >"${work}/install.log" 2>&1 ||
  { cat "${work}/install.log"; exit 1; }
mod="${work}/prefix/${libdir}/libfabric/libnpo-fi.so"
[[ -f "${mod}" ]] || { echo "FAIL: ${mod} not installed"; ls -R "${work}/prefix" | head -50; exit 1; }
echo "installed: ${mod}"
syms="$(nm -D --defined-only "${mod}" | awk '{print $3}' | sort -u)"
[[ "${syms}" == "fi_prov_ini" ]] || { echo "FAIL: installed module exports: ${syms}"; exit 1; }
if ldd "${mod}" | grep -q 'libnpo-hal'; then echo "FAIL: the module needs libnpo-hal.so"; exit 1; fi
if ldd "${mod}" | grep -q 'not found'; then echo "FAIL: unresolved libraries"; ldd "${mod}"; exit 1; fi
if command -v fi_info >/dev/null; then
  FI_PROVIDER_PATH="$(dirname "${mod}")" fi_info -l | grep -qx 'npo:' ||
    { echo "FAIL: fi_info -l does not list npo from the installed module"; exit 1; }
  echo "fi_info -l lists npo from ${libdir}/libfabric"
fi
rm -rf "${work}"
echo PASS
