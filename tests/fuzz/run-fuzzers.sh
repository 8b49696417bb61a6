#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the libFuzzer targets of tests/fuzz with clang-19 in a separate tree and runs each one
# for FUZZ_SECONDS with the dumps of tests/data/eeprom as seed corpus. Exits 1 on any finding
# (crash, sanitizer report, broken invariant, timeout, OOM). Idempotent: installs clang-19 +
# libclang-rt-19-dev only when missing (as root, via tools/setup-debian.sh --fuzz), reuses the
# build tree and keeps each target's grown corpus for the next run.
#
# Usage: bash tests/fuzz/run-fuzzers.sh [TARGET...]      (default: all seven targets)
#   TARGET: cmis sff8636 sff8472 dump_text fabric_spec emud_protocol firmware_image
# Environment:
#   FUZZ_SECONDS    seconds per target (default 60)
#   FUZZ_BUILD_DIR  build tree (default build-fuzz, relative to the repository)
#   FUZZ_JOBS       parallel compile jobs (default 2)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "${root}"
seconds="${FUZZ_SECONDS:-60}"
build="${FUZZ_BUILD_DIR:-build-fuzz}"
jobs="${FUZZ_JOBS:-2}"
targets=("$@")
((${#targets[@]})) || targets=(cmis sff8636 sff8472 dump_text fabric_spec emud_protocol firmware_image)
for t in "${targets[@]}"; do
  case "${t}" in
    cmis | sff8636 | sff8472 | dump_text | fabric_spec | emud_protocol | firmware_image) ;;
    *) echo "run-fuzzers: unknown target '${t}' (cmis sff8636 sff8472 dump_text fabric_spec emud_protocol firmware_image)" >&2; exit 2 ;;
  esac
done
if ! [[ "${seconds}" =~ ^[0-9]+$ ]] || ((seconds < 1)); then
  echo "run-fuzzers: FUZZ_SECONDS must be a positive integer, got '${seconds}'" >&2
  exit 2
fi

# ---- Toolchain: clang-19 with the libFuzzer runtime -----------------------------------------
have_toolchain() {
  command -v clang++-19 >/dev/null 2>&1 &&
    compgen -G "/usr/lib/llvm-19/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a" >/dev/null
}
if ! have_toolchain; then
  echo "== run-fuzzers: installing clang-19 and libclang-rt-19-dev"
  bash tools/setup-debian.sh --fuzz
  have_toolchain || { echo "run-fuzzers: clang-19 libFuzzer runtime still missing" >&2; exit 1; }
fi

# ---- Configure and build only the fuzz targets ----------------------------------------------
# Tests ON (the fuzz folder lives under tests/), tools and DPDK OFF; only `npo_fuzzers` is built,
# so no GoogleTest binary is compiled here.
if [[ ! -f "${build}/CMakeCache.txt" ]]; then
  echo "== run-fuzzers: configuring ${build} (clang-19)"
  CC=clang-19 CXX=clang++-19 cmake -S . -B "${build}" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DNPO_BUILD_FUZZ=ON -DNPO_BUILD_TESTS=ON -DNPO_BUILD_TOOLS=OFF -DNPO_WITH_DPDK=OFF >"${build}.configure.log" 2>&1 ||
    { tail -n 30 "${build}.configure.log" >&2; exit 1; }
  mv "${build}.configure.log" "${build}/configure.log"
fi
echo "== run-fuzzers: building npo_fuzzers in ${build}"
cmake --build "${build}" -j "${jobs}" --target npo_fuzzers >"${build}/fuzz-build.log" 2>&1 ||
  { tail -n 40 "${build}/fuzz-build.log" >&2; exit 1; }

fuzz="${build}/fuzz"
"${fuzz}/npo_fuzz_seeds" tests/data/eeprom "${fuzz}/seeds" tests/data/firmware/dev-key.sec
mkdir -p "${fuzz}/artifacts"

# ---- Run ---------------------------------------------------------------------------------------
declare -A max_len=([cmis]=1024 [sff8636]=1024 [sff8472]=1024 [dump_text]=8192 [fabric_spec]=8192 [emud_protocol]=8200 [firmware_image]=4096)
# Seed corpora: the EEPROM dumps (generated into seeds/), the topology files as they are.
mkdir -p "${fuzz}/seeds/fabric_spec"
cp tests/data/topology/* "${fuzz}/seeds/fabric_spec/"
mkdir -p "${fuzz}/seeds/emud_protocol"
cp tests/data/emud/* "${fuzz}/seeds/emud_protocol/"
failed=0
summary=()
for t in "${targets[@]}"; do
  corpus="${fuzz}/corpus/${t}"
  log="${fuzz}/${t}.log"
  mkdir -p "${corpus}"
  echo "== run-fuzzers: fuzz_${t} for ${seconds} s"
  status=0
  "${fuzz}/fuzz_${t}" "${corpus}" "${fuzz}/seeds/${t}" -max_total_time="${seconds}" -max_len="${max_len[${t}]}" \
    -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="${fuzz}/artifacts/${t}-" \
    >"${log}" 2>&1 || status=$?
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "${log}" | tail -n 1)"
  secs="$(sed -n 's/^stat::average_exec_per_sec: *//p' "${log}" | tail -n 1)"
  cov="$(grep -oE 'cov: [0-9]+' "${log}" | tail -n 1 || true)"
  units="$(find "${corpus}" -type f | wc -l)"
  if ((status != 0)); then
    failed=1
    echo "== run-fuzzers: fuzz_${t} FOUND A PROBLEM (exit ${status}); log ${log}, artifacts ${fuzz}/artifacts/" >&2
    grep -m 5 -E 'ERROR|SUMMARY|Test unit written' "${log}" >&2 || true
    summary+=("$(printf '%-10s FAIL  exit %s  (%s)' "${t}" "${status}" "${log}")")
  else
    summary+=("$(printf '%-10s ok    %s execs in %s s (%s/s), %s, corpus %s' "${t}" "${execs:-?}" "${seconds}" \
      "${secs:-?}" "${cov:-cov: ?}" "${units}")")
  fi
done

echo "== run-fuzzers: summary"
printf '  %s\n' "${summary[@]}"
exit "${failed}"
