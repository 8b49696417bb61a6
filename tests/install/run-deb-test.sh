#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the npo-hal .deb with CPack from a build tree, checks what it holds and its version,
# installs it as root (apt-get, which pulls its dependencies), runs the installed tools (and
# fi_info, which must find the installed libfabric provider npo without FI_PROVIDER_PATH) and
# builds a program against it with g++ and pkg-config, then purges it again (a trap: also when
# a step fails). Not root: says why and exits 77 (ctest's skip). Every step is bounded.
# Driven by ctest (tests/install/CMakeLists.txt, label install); by hand, as root:
#   run-deb-test.sh --build build --work /tmp/npo-deb --cpack cpack --version 0.1.0 [--cxx g++]
#     [--exporter ON|OFF]   (npo-exporter was built: its unit must be in the package)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="" work="" cpack_bin="cpack" cxx="${CXX:-g++}" version="" exporter="ON"
while (($#)); do
  case "$1" in
    --build) build="$2" ;;
    --work) work="$2" ;;
    --cpack) cpack_bin="$2" ;;
    --cxx) cxx="$2" ;;
    --version) version="$2" ;;
    --exporter) exporter="$2" ;;
    *) echo "run-deb-test: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift 2
done
[[ -n "${build}" && -n "${work}" && -n "${version}" ]] || {
  echo "usage: $0 --build DIR --work DIR --version X.Y.Z [--cpack cpack] [--cxx g++]" >&2
  exit 2
}
build="$(cd "${build}" && pwd)"

step() { echo "-- deb_package: $*"; }
die() {
  echo "FAIL: deb_package: $*" >&2
  exit 1
}
# run LOG SECONDS CMD...: quiet unless it fails or times out
run() {
  local log="$1" secs="$2"
  shift 2
  if ! timeout "${secs}" "$@" >"${log}" 2>&1; then
    tail -n 60 "${log}" >&2
    die "command failed (or timed out after ${secs} s): $*"
  fi
}

for tool in dpkg-deb dpkg apt-get pkg-config; do
  command -v "${tool}" >/dev/null || { echo "SKIP: ${tool} not found (not a Debian system)"; exit 77; }
done
if [[ "$(id -u)" != 0 ]]; then
  echo "SKIP: installing the .deb needs root (the CI runs this as root)"
  exit 77
fi
if dpkg -s npo-hal >/dev/null 2>&1; then
  die "npo-hal is already installed on this system; this test installs and purges its own (dpkg --purge npo-hal first)"
fi

rm -rf "${work}"
mkdir -p "${work}"

# 1. Build the package.
step "cpack -G DEB -B ${work}/pkg"
run "${work}/cpack.log" 900 "${cpack_bin}" -G DEB -B "${work}/pkg" --config "${build}/CPackConfig.cmake"
shopt -s nullglob
debs=("${work}"/pkg/npo-hal_*.deb)
((${#debs[@]} == 1)) || die "expected one npo-hal_*.deb in ${work}/pkg, found ${#debs[@]}"
deb="${debs[0]}"
step "built $(basename "${deb}")"

# 2. Its control fields and contents.
got="$(timeout 30 dpkg-deb -f "${deb}" Version)"
[[ "${got}" == "${version}" ]] || die "package Version is '${got}', project() says ${version}"
[[ "$(timeout 30 dpkg-deb -f "${deb}" Package)" == npo-hal ]] || die "package name is not npo-hal"
depends="$(timeout 30 dpkg-deb -f "${deb}" Depends)"
[[ "${depends}" == *libc6* ]] || die "Depends has no libc6 (dpkg-shlibdeps did not run?): ${depends}"
timeout 30 dpkg-deb -c "${deb}" | awk '{print $6}' | sed 's|^\./|/|' >"${work}/contents.txt"
multiarch="$(timeout 30 dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)"
for f in /usr/bin/npo-smi /usr/bin/npo-emud /usr/lib/systemd/system/npo-emud.service \
  /usr/lib/sysusers.d/npo-hal.conf /usr/lib/udev/rules.d/70-npo-vfio.rules \
  "/usr/lib/${multiarch}/pkgconfig/npo-hal.pc" /usr/include/npo/hal/hal.hpp \
  /usr/share/npo-hal/alerts/npo-alerts.yml /usr/share/npo-hal/grafana/npo-fabric.json; do
  grep -qxF "${f}" "${work}/contents.txt" || die "not in the package: ${f}"
done
if [[ "${exporter}" == ON ]]; then
  grep -qxF /usr/lib/systemd/system/npo-exporter.service "${work}/contents.txt" ||
    die "not in the package: /usr/lib/systemd/system/npo-exporter.service"
fi
# The libfabric provider (when this build has it), its extension header and fi_npo(7).
provider=OFF
if [[ -f "${build}/lib/libnpo-fi.so" ]]; then
  provider=ON
  for f in "/usr/lib/${multiarch}/libfabric/libnpo-fi.so" /usr/include/rdma/fi_npo_ext.h /usr/share/man/man7/fi_npo.7; do
    grep -qxF "${f}" "${work}/contents.txt" || die "not in the package: ${f}"
  done
fi
grep -qE "^/usr/lib/${multiarch}/libnpo-hal\\.so" "${work}/contents.txt" ||
  die "libnpo-hal.so is not in /usr/lib/${multiarch}"
if grep -vE '^/usr(/|$)|^/$' "${work}/contents.txt"; then
  die "files outside /usr (above)"
fi

# 3. Install it (apt-get resolves Depends); purge it again whatever happens next.
cleanup() {
  step "dpkg --purge npo-hal"
  timeout 120 dpkg --purge npo-hal >"${work}/purge.log" 2>&1 || cat "${work}/purge.log" >&2
}
trap cleanup EXIT
step "apt-get install ./$(basename "${deb}")"
run "${work}/apt-install.log" 600 env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${deb}"

# 4. The installed tools, the user, the units.
out="$(timeout 60 /usr/bin/npo-smi --version)" || die "/usr/bin/npo-smi --version failed"
[[ "${out}" == *"${version}"* ]] || die "npo-smi --version says '${out}', not ${version}"
step "npo-smi --version: ${out}"
timeout 120 /usr/bin/npo-smi --backend emu:2 >"${work}/smi.txt" 2>&1 || { cat "${work}/smi.txt" >&2; die "npo-smi --backend emu:2 failed"; }
# Its header line: "npo-smi VERSION  backend emu:2 (emulator)  2 cards".
grep -qE "^npo-smi ${version//./\\.} +backend emu:2 .* 2 cards$" "${work}/smi.txt" ||
  { cat "${work}/smi.txt" >&2; die "npo-smi --backend emu:2 did not list 2 cards"; }
timeout 30 getent passwd npo >/dev/null || die "getent passwd npo: the postinst made no user npo"
timeout 30 getent group npo >/dev/null || die "getent group npo: the postinst made no group npo"
grep -q '^ExecStart=/usr/bin/npo-emud ' /usr/lib/systemd/system/npo-emud.service ||
  die "npo-emud.service does not run /usr/bin/npo-emud"
if command -v systemd-analyze >/dev/null; then
  for unit in /usr/lib/systemd/system/npo-emud.service /usr/lib/systemd/system/npo-exporter.service; do
    [[ -f "${unit}" ]] || continue
    run "${work}/verify.log" 60 systemd-analyze verify "${unit}"
    if grep -F "${unit}" "${work}/verify.log"; then die "systemd-analyze verify ${unit} complained"; fi
  done
fi

# The system's libfabric finds the installed provider by itself (no FI_PROVIDER_PATH).
if [[ "${provider}" == ON ]] && command -v fi_info >/dev/null; then
  timeout 60 env -u FI_PROVIDER_PATH fi_info -l >"${work}/fi-info-l.txt" 2>&1 || true
  grep -qx 'npo:' "${work}/fi-info-l.txt" ||
    { cat "${work}/fi-info-l.txt" >&2; die "fi_info -l without FI_PROVIDER_PATH does not list npo"; }
  step "fi_info -l lists npo from /usr/lib/${multiarch}/libfabric"
fi

# 5. A program built against the installed package (g++ and pkg-config, no LD_LIBRARY_PATH).
step "g++ -std=c++23 consumer \$(pkg-config --cflags --libs npo-hal)"
read -r -a pc_flags <<<"$(timeout 30 env -u PKG_CONFIG_PATH pkg-config --cflags --libs npo-hal)"
run "${work}/consumer-build.log" 300 "${cxx}" -std=c++23 "${here}/consumer/main.cpp" "${pc_flags[@]}" -o "${work}/consumer"
run "${work}/consumer-run.log" 120 env -u LD_LIBRARY_PATH "${work}/consumer" emu:2
grep -q "devices: 2" "${work}/consumer-run.log" || { cat "${work}/consumer-run.log" >&2; die "the consumer did not see 2 devices"; }
grep -q "npo-hal version: ${version}" "${work}/consumer-run.log" || die "the consumer loaded another version"
step "OK"
