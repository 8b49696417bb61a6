#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs a built npo-hal into a scratch prefix and builds two programs against it as a user
# would: one with CMake (find_package(npo-hal) -> npo::hal), one with g++ and pkg-config.
# Both must run against the installed library and print the version and the device count.
# Driven by ctest (tests/install/CMakeLists.txt); by hand:
#   run-install-test.sh --build build --work /tmp/npo-install [--cmake cmake] [--cxx g++]
#     [--libdir lib] [--version 0.1.0] [--uri emu:2] [--devices 2] [--sanitize address,undefined]
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="" work="" cmake_bin="cmake" cxx="${CXX:-g++}" libdir="lib" version="" uri="emu:2" devices=2
sanitize="" generator=""
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

export LD_LIBRARY_PATH="${prefix}/${libdir}${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"

check_output() { # name exe
  local name="$1" exe="$2" out
  step "run ${name}: ${exe} ${uri}"
  # Must load the installed library, not the build tree's.
  if command -v ldd >/dev/null 2>&1; then
    ldd "${exe}" | grep -F "libnpo-hal.so" | grep -qF "${prefix}/" ||
      die "${name} does not load libnpo-hal from ${prefix}: $(ldd "${exe}" | grep -F libnpo-hal || echo 'not linked')"
  fi
  local rc=0
  out="$("${exe}" "${uri}" 2>&1)" || rc=$?
  if ((rc != 0)); then
    echo "${out}" >&2
    die "${name} failed (exit status ${rc})"
  fi
  echo "${out}"
  [[ -z "${version}" ]] || grep -qx "npo-hal version: ${version}" <<<"${out}" ||
    die "${name}: expected 'npo-hal version: ${version}'"
  grep -qx "devices: ${devices}" <<<"${out}" || die "${name}: expected 'devices: ${devices}'"
}

# 2. CMake consumer: find_package(npo-hal) + npo::hal.
step "configure + build tests/install/consumer with CMAKE_PREFIX_PATH=${prefix}"
cfg=("${cmake_bin}" -S "${here}/consumer" -B "${work}/consumer-build" "-DCMAKE_PREFIX_PATH=${prefix}"
  "-DCMAKE_CXX_COMPILER=${cxx}" -DCMAKE_BUILD_TYPE=RelWithDebInfo)
[[ -z "${generator}" ]] || cfg+=(-G "${generator}")
if ((${#san_flags[@]})); then
  cfg+=("-DCMAKE_CXX_FLAGS=${san_flags[*]}" "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=${sanitize}")
fi
run "${work}/consumer-configure.log" "${cfg[@]}"
grep -F "found npo-hal" "${work}/consumer-configure.log" || true
run "${work}/consumer-build.log" "${cmake_bin}" --build "${work}/consumer-build"
check_output "CMake consumer" "${work}/consumer-build/consumer"

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

echo "install_consume: 2 consumers built against ${prefix} and ran; ${#headers[@]} headers self-contained"
