#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `cmake --install` puts libnpo-fi.so into <prefix>/<libdir>/libfabric/ (with prefix /usr on
# Debian that is /usr/lib/x86_64-linux-gnu/libfabric/, libfabric's default provider folder);
# the installed module exports only fi_prov_ini, needs no npo-hal library beside it, and
# fi_info loads it from there; the extension header is <prefix>/include/rdma/fi_npo_ext.h (a C
# program built with it opens a domain and reads its counters) and fi_npo(7) is in
# <prefix>/share/man/man7.
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
hdr="${work}/prefix/include/rdma/fi_npo_ext.h"
[[ -f "${hdr}" ]] || { echo "FAIL: ${hdr} not installed"; exit 1; }
page="${work}/prefix/share/man/man7/fi_npo.7"
[[ -f "${page}" ]] || { echo "FAIL: ${page} not installed"; exit 1; }
grep -q '^\.TH fi_npo 7' "${page}" || { echo "FAIL: ${page} is not fi_npo(7)"; exit 1; }
if command -v cc >/dev/null; then
  read -r -a fab <<<"$(pkg-config --cflags --libs libfabric)"
  cc -std=gnu11 -Wall -Werror -I"${work}/prefix/include" "$(dirname "${BASH_SOURCE[0]}")/ext_consumer.c" "${fab[@]}" \
    -o "${work}/ext_consumer" >"${work}/cc.log" 2>&1 || { echo "FAIL: the consumer of <rdma/fi_npo_ext.h>"; cat "${work}/cc.log"; exit 1; }
  out="$(env -u NPO_FI_BACKEND FI_PROVIDER_PATH="$(dirname "${mod}")" FI_NPO_BACKEND=emu:2 "${work}/ext_consumer" 2>&1)" ||
    { echo "FAIL: the consumer of <rdma/fi_npo_ext.h>: ${out}"; exit 1; }
  echo "consumer of <rdma/fi_npo_ext.h>: ${out}"
  grep -qE '^domain npo0: card 0 fabric_id [0-9]+ ops_ok 0$' <<<"${out}" || { echo "FAIL: unexpected counters"; exit 1; }
fi
rm -rf "${work}"
echo PASS
