#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The library for real cards: configures this source tree with NPO_WITH_EMULATOR=OFF (no
# tests, no tools), builds and installs it, and checks that
#   - libnpo-hal neither contains the emulator (no npo::emu symbols) nor links yaml-cpp;
#   - the topology-file add-on (libnpo-topology-file) is the one library that links yaml-cpp;
#   - a consumer built with find_package(npo-hal) runs, and System::open("emu:2") is refused
#     with kInvalidArgument listing only the vfio forms.
# Driven by ctest (label install); by hand:
#   run-real-cards-test.sh --source DIR --work DIR [--cmake cmake] [--cxx g++] [--libdir lib]
#     [--control LIBNPO-HAL-WITH-EMULATOR]
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source_dir="" work="" control="" cmake_bin="cmake" cxx="${CXX:-g++}" libdir="lib" generator=""
while (($#)); do
  case "$1" in
    --source) source_dir="$2" ;;
    --work) work="$2" ;;
    --cmake) cmake_bin="$2" ;;
    --cxx) cxx="$2" ;;
    --libdir) libdir="$2" ;;
    --generator) generator="$2" ;;
    --control) control="$2" ;;
    *) echo "run-real-cards-test: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift 2
done
[[ -n "${source_dir}" && -n "${work}" ]] || { echo "usage: $0 --source DIR --work DIR [...]" >&2; exit 2; }

step() { echo "-- install_real_cards: $*"; }
die() {
  echo "FAIL: install_real_cards: $*" >&2
  exit 1
}
run() {
  local log="$1"
  shift
  if ! "$@" >"${log}" 2>&1; then
    tail -n 60 "${log}" >&2
    die "command failed: $*"
  fi
}

rm -rf "${work}"
mkdir -p "${work}"
prefix="${work}/prefix"

# -O0: this lane checks what is linked, not speed, and -O0 halves the compile time.
cfg=("${cmake_bin}" -S "${source_dir}" -B "${work}/build" -DNPO_WITH_EMULATOR=OFF -DNPO_BUILD_TESTS=OFF
  -DNPO_BUILD_TOOLS=OFF -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-O0" "-DCMAKE_CXX_COMPILER=${cxx}")
[[ -z "${generator}" ]] || cfg+=(-G "${generator}")
step "configure NPO_WITH_EMULATOR=OFF"
run "${work}/configure.log" "${cfg[@]}"
grep -q "NPO_WITH_EMULATOR   OFF" "${work}/configure.log" || die "configure summary does not say NPO_WITH_EMULATOR OFF"
step "build"
run "${work}/build.log" "${cmake_bin}" --build "${work}/build" -j 2
step "install into ${prefix}"
run "${work}/install.log" "${cmake_bin}" --install "${work}/build" --prefix "${prefix}"

lib="$(compgen -G "${prefix}/${libdir}/libnpo-hal.so.*.*" | head -n1)" || true
[[ -n "${lib}" ]] || die "not installed: ${libdir}/libnpo-hal.so.*"
topo="$(compgen -G "${prefix}/${libdir}/libnpo-topology-file.so.*.*" | head -n1)" || true
[[ -n "${topo}" ]] || die "not installed: ${libdir}/libnpo-topology-file.so.* (the topology-file add-on)"

needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
step "libnpo-hal NEEDED: $(needed "${lib}" | tr '\n' ' ')"
if needed "${lib}" | grep -q yaml-cpp; then die "libnpo-hal links yaml-cpp"; fi
needed "${topo}" | grep -q yaml-cpp || die "libnpo-topology-file does not link yaml-cpp (is the reader in it?)"
emu_syms="$(nm -DC --defined-only "${lib}" | grep -c 'npo::emu::' || true)"
if [[ -n "${control}" ]]; then
  # Control: the default build's library (with the emulator) does export such symbols, so
  # finding none above means something.
  control_syms="$(nm -DC --defined-only "${control}" | grep -c 'npo::emu::' || true)"
  ((control_syms > 0)) || die "control ${control} has no npo::emu symbols: the check cannot tell"
fi
((emu_syms == 0)) || die "libnpo-hal exports ${emu_syms} npo::emu symbols: the emulator is in it"
[[ ! -d "${prefix}/include/npo/emu" ]] || die "emulator headers installed"

step "CMake consumer against the real-cards package"
ccfg=("${cmake_bin}" -S "${here}/consumer" -B "${work}/consumer-build" "-DCMAKE_PREFIX_PATH=${prefix}"
  "-DCMAKE_CXX_COMPILER=${cxx}")
[[ -z "${generator}" ]] || ccfg+=(-G "${generator}")
run "${work}/consumer-configure.log" "${ccfg[@]}"
run "${work}/consumer-build.log" "${cmake_bin}" --build "${work}/consumer-build"
rc=0
out="$(LD_LIBRARY_PATH="${prefix}/${libdir}" "${work}/consumer-build/consumer" emu:2 2>&1)" || rc=$?
echo "${out}"
((rc != 0)) || die "System::open(\"emu:2\") succeeded in a build without the emulator"
grep -q "invalid_argument" <<<"${out}" || die "emu:2 was not refused as an invalid argument"
grep -q "vfio:" <<<"${out}" || die "the refusal does not list the accepted vfio forms"
if grep -q "emu:mesh8" <<<"${out}"; then die "the refusal lists emu forms in a build without the emulator"; fi
echo "install_real_cards: libnpo-hal without emulator and yaml-cpp; $(needed "${lib}" | wc -l) NEEDED entries; consumer refused emu:2"
