#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Checks the dependency rules of DESIGN.md on every #include of the tree:
#   fw-std-only            firmware-iface includes only the standard library and npo/fw/...
#   emu-no-drivers         emulator never includes drivers (it is the hardware, not a shortcut)
#   drivers-no-emu         drivers never include the emulator
#   drivers-no-backend     device logic (drivers/* but the backend folders) never includes a backend
#   tools-public-api-only  tools include hal's public headers npo/hal/*.hpp (not backend/), their
#                          own headers, the standard/POSIX library, CLI11, nlohmann, fmt, spdlog, cpp-httplib
#   hal-api-no-internals   hal/include never includes drivers or the emulator
#   hal-api-no-backend     the user API (hal/include/npo/hal/*.hpp) never includes npo/hal/backend/
#   hal-composition-root   in hal/src only builtin_backends.cpp includes the backends, and only
#                          their registration headers (npo/emu/register.hpp, vfio/register.hpp)
#   provider-public-api-only  the libfabric provider (drivers/libfabric) includes hal's public
#                          headers npo/hal/*.hpp (not backend/), libfabric's rdma/*, its own
#                          headers and the standard/POSIX library: it is a HAL user like a tool
# Usage: check-deps.sh [ROOT]   (ROOT defaults to the repository holding this script)
# Prints "file:line: [rule] message" per violation; exits 1 if there is any.
set -euo pipefail

root="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
cd "${root}"

# ---- Vocabulary ---------------------------------------------------------------------------
std_cxx=" algorithm any array atomic barrier bit bitset cassert ccomplex cctype cerrno cfenv cfloat
  charconv chrono cinttypes ciso646 climits clocale cmath codecvt compare complex concepts
  condition_variable coroutine csetjmp csignal cstdalign cstdarg cstdbool cstddef cstdint cstdio
  cstdlib cstring ctgmath ctime cuchar cwchar cwctype deque exception execution expected filesystem
  flat_map flat_set format forward_list fstream functional future generator initializer_list iomanip
  ios iosfwd iostream istream iterator latch limits list locale map mdspan memory memory_resource
  mutex new numbers numeric optional ostream print queue random ranges ratio regex scoped_allocator
  semaphore set shared_mutex source_location span spanstream sstream stack stacktrace stdexcept
  stdfloat stop_token streambuf string string_view strstream syncstream system_error thread tuple
  type_traits typeindex typeinfo unordered_map unordered_set utility valarray variant vector version "
std_c=" assert.h complex.h ctype.h errno.h fenv.h float.h inttypes.h iso646.h limits.h locale.h math.h
  setjmp.h signal.h stdalign.h stdarg.h stdatomic.h stdbool.h stddef.h stdint.h stdio.h stdlib.h
  string.h tgmath.h threads.h time.h uchar.h wchar.h wctype.h "
posix_c=" unistd.h fcntl.h poll.h termios.h dirent.h pthread.h sched.h syslog.h getopt.h libgen.h pwd.h
  grp.h dlfcn.h netdb.h sysexits.h fnmatch.h glob.h spawn.h strings.h err.h ifaddrs.h
  x86intrin.h immintrin.h emmintrin.h arm_neon.h arm_acle.h "
# (the last line: the compiler's own intrinsics headers, part of the toolchain like libc)
# newlines to spaces, so " name " lookups work across the lines of each list
std_cxx="${std_cxx//$'\n'/ }"
std_c="${std_c//$'\n'/ }"
posix_c="${posix_c//$'\n'/ }"
# Third-party libraries the tools may use directly (include path prefixes).
# httplib.h: Debian's cpp-httplib (libcpp-httplib-dev), npo-exporter's HTTP server (issue 17).
tools_third_party=(CLI/ nlohmann/ fmt/ spdlog/ httplib.h)
# Deliberate exceptions, "file-glob|include-glob" (e.g. "tools/npo-emu/*|npo/emu/*" if the
# emulator's control tool is allowed its control surface). Keep this list short and explained.
exceptions=(
  # npo-emu is the emulator's companion tool: `topo check` validates a file's scripted faults
  # with the emulator's own validator (npo::emu::check_scenario), so it accepts what emu:file= accepts.
  "tools/npo-emu/*|npo/emu/emulator.hpp"
  # ... and `fault --socket-dir` speaks npo-emud's protocol (docs/spec/emud-protocol.md) to it.
  "tools/npo-emu/*|npo/fw/emud.hpp"
  # npo-emud is the daemon that holds an Emulator and serves it (npo/emu/server.hpp).
  "tools/npo-emud/*|npo/emu/emulator.hpp"
  "tools/npo-emud/*|npo/emu/server.hpp"
  # ... and runs the one bring-up in-process on that Emulator through a registry of its own.
  "tools/npo-emud/*|npo/hal/backend/registry.hpp"
  # ... and serves its switches and partition IDs on DIR/fabric.sock (docs/spec/fabric-mgmt.md).
  "tools/npo-emud/*|npo/emu/ocs.hpp"
  # npo-fabric drives npo-emud's switches through that socket's client (npo::emu::RemoteFabric).
  "tools/npo-fabric/*|npo/emu/remote_fabric.hpp"
)
# Folders under drivers/ that are backends (device logic must not know them).
backend_dirs=(vfio)
# Registration headers: the only backend headers hal/src/builtin_backends.cpp may include.
registration_headers=(npo/emu/register.hpp vfio/register.hpp)
composition_root="hal/src/builtin_backends.cpp"

# Driver subfolders: the known ones plus whatever drivers/ holds now.
driver_dirs=" card optics vfio dpdk "
if [[ -d drivers ]]; then
  for d in drivers/*/; do
    [[ -d "${d}" ]] && driver_dirs+="$(basename "${d}") "
  done
fi

is_std() { [[ "${std_cxx}" == *" $1 "* || "${std_c}" == *" $1 "* ]]; }
is_posix() { [[ "${posix_c}" == *" $1 "* || "$1" =~ ^(sys|arpa|netinet|net)/[a-z0-9_/]+\.h$ ]]; }
is_driver_path() {
  local first="${1%%/*}"
  [[ "$1" == npo/drivers/* || "$1" == */drivers/* || "$1" == drivers/* ]] && return 0
  [[ "$1" == */* && "${driver_dirs}" == *" ${first} "* ]]
}
is_emu_path() { [[ "$1" == npo/emu/* || "$1" == emulator/* || "$1" == */emulator/* ]]; }
is_backend_path() {
  local b
  for b in "${backend_dirs[@]}"; do
    [[ "$1" == "${b}/"* || "$1" == */drivers/"${b}/"* || "$1" == npo/drivers/"${b}/"* ]] && return 0
  done
  return 1
}

# normalize a/b/../c -> a/c (pure bash, no subprocess)
normalize() {
  local IFS=/ part out=()
  for part in $1; do
    case "${part}" in
      '' | .) ;;
      ..) ((${#out[@]})) && unset 'out[-1]' ;;
      *) out+=("${part}") ;;
    esac
  done
  local joined="${out[*]}"
  printf '%s' "${joined}"
}

# The component a file belongs to: drivers/<sub> for drivers, else its top-level folder.
component_of() {
  local f="$1" top="${1%%/*}"
  if [[ "${top}" == drivers ]]; then
    local rest="${f#drivers/}"
    [[ "${rest}" == */* ]] && top="drivers/${rest%%/*}"
  fi
  printf '%s' "${top}"
}

# Is quoted include $2 of file $1 a header of the file's own component? Tried against the
# file's folder and the component's include roots (include/, src/, the component itself).
resolves_locally() {
  local file="$1" inc="$2" comp cand base
  comp="$(component_of "${file}")"
  for base in "$(dirname "${file}")" "${comp}/include" "${comp}/src" "${comp}"; do
    cand="$(normalize "${base}/${inc}")"
    if [[ -f "${cand}" && "${cand}" == "${comp}/"* ]]; then
      return 0
    fi
  done
  return 1
}

violations=0
scanned=0
checked=0
report() { # file line rule message include
  printf '%s:%s: [%s] %s: #include %s\n' "$1" "$2" "$3" "$4" "$5"
  violations=$((violations + 1))
}

# ---- Per-folder rules -----------------------------------------------------------------------
check_include() { # file line kind(<,") path spelled
  local f="$1" n="$2" kind="$3" p="$4" s="$5" e
  checked=$((checked + 1))
  for e in "${exceptions[@]}"; do
    # shellcheck disable=SC2053 # glob match on purpose
    [[ "${f}" == ${e%%|*} && "${p}" == ${e#*|} ]] && return 0
  done
  case "${f}" in
    firmware-iface/*)
      if [[ "${kind}" == '<' ]]; then
        is_std "${p}" || [[ "${p}" == npo/fw/* ]] ||
          report "${f}" "${n}" fw-std-only "firmware-iface may include only the standard library and npo/fw/" "${s}"
      else
        [[ "${p}" == npo/fw/* ]] || resolves_locally "${f}" "${p}" ||
          report "${f}" "${n}" fw-std-only "firmware-iface may include only the standard library and npo/fw/" "${s}"
      fi
      ;;
    emulator/*)
      if is_driver_path "${p}" && ! { [[ "${kind}" == '"' ]] && resolves_locally "${f}" "${p}"; }; then
        report "${f}" "${n}" emu-no-drivers "the emulator must not include drivers (it is the hardware)" "${s}"
      fi
      ;;
    drivers/libfabric/*)
      local ok=0
      if [[ "${p}" =~ ^npo/hal/[A-Za-z0-9_]+\.hpp$ ]]; then
        ok=1
      elif [[ "${kind}" == '<' ]]; then
        if is_std "${p}" || is_posix "${p}" || [[ "${p}" == rdma/* ]]; then ok=1; fi
      elif resolves_locally "${f}" "${p}"; then
        ok=1
      fi
      ((ok)) || report "${f}" "${n}" provider-public-api-only \
        "the libfabric provider may include only npo/hal/*.hpp (not backend/), rdma/*, its own headers, std/POSIX" "${s}"
      ;;
    drivers/*)
      if is_emu_path "${p}"; then
        report "${f}" "${n}" drivers-no-emu "drivers must not include the emulator" "${s}"
      fi
      local comp b own=0
      comp="$(component_of "${f}")"
      for b in "${backend_dirs[@]}"; do [[ "${comp}" == "drivers/${b}" ]] && own=1; done
      if ((own == 0)) && is_backend_path "${p}"; then
        report "${f}" "${n}" drivers-no-backend "device logic must not depend on a specific backend" "${s}"
      fi
      ;;
    tools/*)
      local ok=0 t
      if [[ "${p}" =~ ^npo/hal/[A-Za-z0-9_]+\.hpp$ ]]; then
        ok=1
      elif [[ "${kind}" == '<' ]]; then
        if is_std "${p}" || is_posix "${p}"; then ok=1; fi
        for t in "${tools_third_party[@]}"; do [[ "${p}" == "${t}"* ]] && ok=1; done
      elif resolves_locally "${f}" "${p}"; then
        ok=1
      fi
      ((ok)) || report "${f}" "${n}" tools-public-api-only \
        "tools may include only npo/hal/*.hpp (not backend/), their own headers, std/POSIX, ${tools_third_party[*]}" "${s}"
      ;;
    hal/include/*)
      if is_driver_path "${p}" || is_emu_path "${p}"; then
        report "${f}" "${n}" hal-api-no-internals "hal's public headers must not include drivers or the emulator" "${s}"
      fi
      if [[ "${f}" =~ ^hal/include/npo/hal/[^/]+$ && ("${p}" == npo/hal/backend/* || "${p}" == backend/*) ]]; then
        report "${f}" "${n}" hal-api-no-backend "the user API must not include the backend interface (tools would see it)" "${s}"
      fi
      ;;
    hal/*)
      if is_emu_path "${p}" || is_backend_path "${p}"; then
        local allowed=0 r
        if [[ "${f}" == "${composition_root}" ]]; then
          for r in "${registration_headers[@]}"; do [[ "${p}" == "${r}" ]] && allowed=1; done
        fi
        ((allowed)) || report "${f}" "${n}" hal-composition-root \
          "only ${composition_root} may include a backend, and only ${registration_headers[*]}" "${s}"
      fi
      ;;
  esac
}

folders=()
for d in firmware-iface emulator drivers tools hal; do [[ -d "${d}" ]] && folders+=("${d}"); done
if ((${#folders[@]} == 0)); then
  echo "check-deps: no source folders under ${root}" >&2
  exit 2
fi

# One grep over every source file: "file:line:text" of each #include line.
include_re='^[[:space:]]*#[[:space:]]*include[[:space:]]*([<"])([^>"]+)[>"]'
while IFS= read -r -d '' file; do
  scanned=$((scanned + 1))
  while IFS= read -r hit; do
    n="${hit%%:*}"
    text="${hit#*:}"
    if [[ "${text}" =~ ${include_re} ]]; then
      kind="${BASH_REMATCH[1]}"
      path="${BASH_REMATCH[2]}"
      if [[ "${kind}" == '<' ]]; then spelled="<${path}>"; else spelled="\"${path}\""; fi
      check_include "${file#./}" "${n}" "${kind}" "${path}" "${spelled}"
    fi
  done < <(grep -nE '^[[:space:]]*#[[:space:]]*include' "${file}" || true)
done < <(find "${folders[@]}" -type f \( -name '*.hpp' -o -name '*.h' -o -name '*.hh' -o -name '*.hxx' -o -name '*.cpp' \
  -o -name '*.cc' -o -name '*.cxx' -o -name '*.c' -o -name '*.ipp' -o -name '*.inc' \) -not -path '*/testdata/*' -print0 | sort -z)

if ((violations)); then
  echo "check-deps: ${violations} violation(s) of the dependency rules (DESIGN.md) in ${scanned} files"
  exit 1
fi
echo "check-deps: OK (${scanned} files, ${checked} includes, folders: ${folders[*]})"
