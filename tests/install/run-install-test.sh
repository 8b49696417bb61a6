#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs a built npo-hal into a scratch prefix and builds programs against it as a user
# would: with CMake (find_package(npo-hal) -> npo::hal) and with g++ and pkg-config, each
# time the small consumer (prints the version and the device count) and the program of
# docs/getting-started.md (docs/examples/getting_started.cpp: fabric bring-up, window
# export/import, remote DMA, data check on emu:mesh8). Every program must run against the
# installed library with no LD_LIBRARY_PATH (RPATH: CMake's, or the .pc file's -rpath).
# Driven by ctest (tests/install/CMakeLists.txt); by hand:
#   run-install-test.sh --build build --work /tmp/npo-install [--cmake cmake] [--cxx g++]
#     [--libdir lib] [--version 0.1.0] [--uri emu:2] [--devices 2] [--sanitize address,undefined]
#     [--dpdk ON]   (the DPDK driver was built: check its DSO, static library and header are
#                    installed, run dmadev_autotest on the installed DSO and a static consumer)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="" work="" cmake_bin="cmake" cxx="${CXX:-g++}" libdir="lib" version="" uri="emu:2" devices=2
sanitize="" generator="" dpdk="OFF"
while (($#)); do
  case "$1" in
    --build) build="$2" ;;
    --work) work="$2" ;;
    --cmake) cmake_bin="$2" ;;
    --cxx) cxx="$2" ;;
    --libdir) libdir="$2" ;;
    --version) version="$2" ;;
    --uri) uri="$2" ;;
    --devices) devices="$2" ;;
    --sanitize) sanitize="$2" ;;
    --generator) generator="$2" ;;
    --dpdk) dpdk="$2" ;;
    *) echo "run-install-test: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift 2
done
[[ -n "${build}" && -n "${work}" ]] || { echo "usage: $0 --build DIR --work DIR [...]" >&2; exit 2; }
build="$(cd "${build}" && pwd)"

step() { echo "-- install_consume: $*"; }
die() {
  echo "FAIL: install_consume: $*" >&2
  exit 1
}
# run LOG CMD...: quiet unless it fails
run() {
  local log="$1"
  shift
  if ! "$@" >"${log}" 2>&1; then
    cat "${log}" >&2
    die "command failed: $*"
  fi
}

rm -rf "${work}"
mkdir -p "${work}"
prefix="${work}/prefix"

san_flags=()
if [[ -n "${sanitize}" ]]; then
  san_flags=("-fsanitize=${sanitize}" -fno-omit-frame-pointer)
fi

# 1. Install.
step "cmake --install ${build} --prefix ${prefix}"
run "${work}/install.log" "${cmake_bin}" --install "${build}" --prefix "${prefix}"
for f in "${prefix}/${libdir}/cmake/npo-hal/npo-hal-config.cmake" "${prefix}/${libdir}/pkgconfig/npo-hal.pc" \
  "${prefix}/include/npo/hal/hal.hpp" "${prefix}/include/npo/fw/regs.hpp"; do
  [[ -f "${f}" ]] || die "not installed: ${f#"${prefix}/"}"
done
# Everything must land under the prefix (an absolute DESTINATION would write into the system).
if [[ -f "${build}/install_manifest.txt" ]]; then
  if outside="$(grep -vF "${prefix}/" "${build}/install_manifest.txt")"; then
    die "installed outside --prefix (use a relative DESTINATION): ${outside}"
  fi
fi
compgen -G "${prefix}/${libdir}/libnpo-hal.so*" >/dev/null || die "not installed: ${libdir}/libnpo-hal.so"
# The installed package must be relocatable: no path into the source or build tree.
src_root="$(cd "${here}/../.." && pwd)"
if leaks="$(grep -rlF -e "${src_root}/" -e "${build}" "${prefix}/${libdir}/cmake" "${prefix}/${libdir}/pkgconfig")"; then
  die "installed package files name the source/build tree: ${leaks}"
fi

# A user's program finds the library by its RPATH, not by the environment.
unset LD_LIBRARY_PATH

# Must load the installed library (not the build tree's), with no LD_LIBRARY_PATH.
check_loads_installed() { # name exe
  local name="$1" exe="$2"
  if command -v ldd >/dev/null 2>&1; then
    env -u LD_LIBRARY_PATH ldd "${exe}" | grep -F "libnpo-hal.so" | grep -qF "${prefix}/" ||
      die "${name} does not load libnpo-hal from ${prefix}: $(env -u LD_LIBRARY_PATH ldd "${exe}" | grep -F libnpo-hal || echo 'not linked')"
  fi
}

# Every installed tool answers --version with exit 0, its name and the project version. The
# tools carry no install RPATH (a packaged install puts the library on the system path), so
# they find the prefix's library through LD_LIBRARY_PATH here.
ntools=0
for exe in "${prefix}"/bin/npo-*; do
  [[ -x "${exe}" && -f "${exe}" ]] || continue
  name="$(basename "${exe}")"
  rc=0
  out="$(LD_LIBRARY_PATH="${prefix}/${libdir}" timeout 30 "${exe}" --version 2>&1)" || rc=$?
  ((rc == 0)) || die "${name} --version exited ${rc}: ${out}"
  if [[ -n "${version}" ]]; then
    [[ "${out}" == "${name} (npo-hal) ${version}"* ]] || die "${name} --version says '${out}', not ${version}"
  fi
  ntools=$((ntools + 1))
done
step "--version of ${ntools} installed tools"

check_output() { # name exe
  local name="$1" exe="$2" out
  step "run ${name}: ${exe} ${uri}"
  check_loads_installed "${name}" "${exe}"
  local rc=0
  out="$(env -u LD_LIBRARY_PATH "${exe}" "${uri}" 2>&1)" || rc=$?
  if ((rc != 0)); then
    echo "${out}" >&2
    die "${name} failed (exit status ${rc})"
  fi
  echo "${out}"
  [[ -z "${version}" ]] || grep -qx "npo-hal version: ${version}" <<<"${out}" ||
    die "${name}: expected 'npo-hal version: ${version}'"
  grep -qx "devices: ${devices}" <<<"${out}" || die "${name}: expected 'devices: ${devices}'"
}

getting_started_src="${here}/../../docs/examples/getting_started.cpp"
[[ -f "${getting_started_src}" ]] || die "missing ${getting_started_src}"
check_getting_started() { # name exe
  local name="$1" exe="$2" out rc=0
  step "run ${name}: ${exe} (emu:mesh8)"
  check_loads_installed "${name}" "${exe}"
  out="$(env -u LD_LIBRARY_PATH "${exe}" 2>&1)" || rc=$?
  echo "${out}"
  ((rc == 0)) || die "${name} failed (exit status ${rc})"
  grep -q "fabric: 56 of 56 ports up" <<<"${out}" || die "${name}: expected 'fabric: 56 of 56 ports up'"
  grep -q "data checked" <<<"${out}" || die "${name}: expected 'data checked'"
}

# 2. CMake consumer: find_package(npo-hal) + npo::hal.
step "configure + build tests/install/consumer with CMAKE_PREFIX_PATH=${prefix}"
cfg=("${cmake_bin}" -S "${here}/consumer" -B "${work}/consumer-build" "-DCMAKE_PREFIX_PATH=${prefix}"
  "-DCMAKE_CXX_COMPILER=${cxx}" -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DNPO_GETTING_STARTED=${getting_started_src}")
[[ -z "${generator}" ]] || cfg+=(-G "${generator}")
[[ "${dpdk}" != "ON" ]] || cfg+=(-DNPO_CONSUME_DPDK=ON)
if ((${#san_flags[@]})); then
  cfg+=("-DCMAKE_CXX_FLAGS=${san_flags[*]}" "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=${sanitize}")
fi
run "${work}/consumer-configure.log" "${cfg[@]}"
grep -F "found npo-hal" "${work}/consumer-configure.log" || true
run "${work}/consumer-build.log" "${cmake_bin}" --build "${work}/consumer-build"
check_output "CMake consumer" "${work}/consumer-build/consumer"
check_getting_started "CMake getting_started" "${work}/consumer-build/getting_started"

# 2b. The DPDK driver: DSO (loadable with -d, finds libnpo-hal by its RPATH), static library
# and header, the CMake target npo::dpdk; DPDK's own suite on the installed DSO.
if [[ "${dpdk}" == "ON" ]]; then
  pmd="${prefix}/${libdir}/dpdk/librte_dma_npo.so"
  for f in "${pmd}" "${prefix}/${libdir}/libnpo_dpdk.a" "${prefix}/include/npo/dpdk/dmadev.h" \
    "${prefix}/${libdir}/cmake/npo-hal/npo-hal-dpdk-targets.cmake"; do
    [[ -f "${f}" ]] || die "not installed: ${f#"${prefix}/"}"
  done
  if command -v ldd >/dev/null 2>&1; then
    env -u LD_LIBRARY_PATH ldd "${pmd}" | grep -F "libnpo-hal.so" | grep -qF "${prefix}/" ||
      die "the installed DSO does not load libnpo-hal from ${prefix}"
  fi
  step "run dpdk_consumer (npo::dpdk, static)"
  out="$(env -u LD_LIBRARY_PATH "${work}/consumer-build/dpdk_consumer" "${uri}" 2>&1)" || die "dpdk_consumer: ${out}"
  echo "${out}"
  grep -q "dmadev dma_npo0: max_vchans" <<<"${out}" || die "dpdk_consumer: expected 'dmadev dma_npo0: max_vchans'"
  if command -v dpdk-test >/dev/null 2>&1; then
    step "dmadev_autotest on the installed ${pmd#"${prefix}/"}"
    run "${work}/dmadev-autotest.log" env -u LD_LIBRARY_PATH bash "${here}/../dpdk/run-dmadev-autotest.sh" "${pmd}" \
      "dma_npo0,backend=${uri},card=0"
    tail -n 1 "${work}/dmadev-autotest.log"
  else
    step "dpdk-test not found (package dpdk-dev): the installed DSO is not run"
  fi
fi

# 3. pkg-config consumer: g++ $(pkg-config --cflags --libs npo-hal).
command -v pkg-config >/dev/null 2>&1 || die "pkg-config not found (bash tools/setup-debian.sh installs it)"
export PKG_CONFIG_PATH="${prefix}/${libdir}/pkgconfig${PKG_CONFIG_PATH:+:${PKG_CONFIG_PATH}}"
flags="$(pkg-config --cflags --libs npo-hal)" || die "pkg-config --cflags --libs npo-hal failed"
step "pkg-config: ${flags}"
[[ -z "${version}" || "$(pkg-config --modversion npo-hal)" == "${version}" ]] ||
  die "pkg-config --modversion npo-hal: $(pkg-config --modversion npo-hal), expected ${version}"
# shellcheck disable=SC2086 # pkg-config output is a list of flags
run "${work}/pkgconfig-build.log" "${cxx}" "${san_flags[@]}" "${here}/consumer/main.cpp" -o "${work}/consumer-pc" ${flags}
check_output "pkg-config consumer" "${work}/consumer-pc"
# shellcheck disable=SC2086 # pkg-config output is a list of flags
run "${work}/pkgconfig-gs-build.log" "${cxx}" "${san_flags[@]}" "${getting_started_src}" -o "${work}/getting-started-pc" ${flags}
check_getting_started "pkg-config getting_started" "${work}/getting-started-pc"

# 4. Every installed header compiles on its own (a user may include any one of them first).
mapfile -t headers < <(cd "${prefix}/include" && find npo -name '*.hpp' | sort)
step "${#headers[@]} installed headers compile alone"
mkdir -p "${work}/headers"
for h in "${headers[@]}"; do
  printf '#include <%s>\n#include <%s>\n' "${h}" "${h}" >"${work}/headers/${h//\//_}.cpp"
done
cflags="$(pkg-config --cflags npo-hal)"
# shellcheck disable=SC2086 # flags list
if ! find "${work}/headers" -name '*.cpp' -print0 | sort -z |
  xargs -0 -P 2 -I{} sh -c "${cxx} -fsyntax-only -Wall -Wextra -Werror ${cflags} {} 2>{}.log || { echo FAILED: {}; cat {}.log; exit 1; }"; then
  die "an installed header does not compile on its own (or twice: missing #pragma once)"
fi

echo "install_consume: 4 programs built against ${prefix} (CMake, pkg-config) and ran without LD_LIBRARY_PATH; ${#headers[@]} headers self-contained"
