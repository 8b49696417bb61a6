#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs every Debian 12 package npo-hal needs to build and test. Idempotent: when all are
# present it prints one line and changes nothing; otherwise it runs `apt-get update` and
# installs only the missing ones. Runs as root (CI, containers) or through sudo.
#
# Then fetches DPDK's driver-SDK headers (tools/dpdk-sdk-headers.sh; docs/dpdk.md).
#
# Usage: bash tools/setup-debian.sh [--fuzz] [--print]
#   --fuzz   also install clang-19 + libclang-rt-19-dev (libFuzzer targets, tests/fuzz)
#   --print  print the package list and exit
set -euo pipefail

packages=(
  # toolchain and build
  build-essential cmake ninja-build pkg-config ccache git python3
  # libraries (TOOLCHAIN.md: these compile together in one C++23 translation unit)
  libspdlog-dev libfmt-dev libnuma-dev nlohmann-json3-dev libyaml-cpp-dev libcli11-dev
  # firmware image signatures and digests (docs/spec/firmware-image.md): Ed25519, SHA-512, BLAKE2b
  libsodium-dev
  # DPDK: headers/libraries, plus dpdk-test (dmadev_autotest) and dpdk-telemetry.py
  libdpdk-dev dpdk-dev
  # libfabric provider libnpo-fi.so (drivers/libfabric): headers, and fi_info/fi_pingpong for its tests
  libfabric-dev libfabric-bin
  # groff renders fi_npo(7) in ctest fi_params (groff -man -ww)
  groff-base
  # npo-exporter's HTTP server (cpp-httplib); Prometheus + promtool for its tests (issue 17)
  libcpp-httplib-dev prometheus
  # Slurm's controller and scontrol (munge comes with them): npo-smi topo --format slurm is
  # loaded by a real slurmctld in tests/observability (as root)
  slurmctld slurm-client
  # tests
  libgtest-dev libgmock-dev libbenchmark-dev
  # Open MPI over the libfabric provider npo (tests/mpi, docs/mpi.md): mpirun + mpicc (mtl ofi),
  # NetPIPE's NPopenmpi (integrity check, netpipe_integrity)
  openmpi-bin libopenmpi-dev netpipe-openmpi
  # format check (tests/structure/check-format.sh)
  clang-format
  # VFIO real-kernel test in a QEMU TCG guest (tests/vfio/qemu, ctest label vfio-qemu)
  qemu-system-x86 busybox-static
)

for arg in "$@"; do
  case "${arg}" in
    --fuzz) packages+=(clang-19 libclang-rt-19-dev) ;;
    --print) printf '%s\n' "${packages[@]}"; exit 0 ;;
    -h | --help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "npo-hal setup: unknown argument '${arg}' (try --help)" >&2; exit 2 ;;
  esac
done

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
  echo "npo-hal setup: dpkg/apt not found: this script is for Debian 12; install the equivalents of: ${packages[*]}" >&2
  exit 1
fi

# One dpkg-query for all packages; unknown packages are simply absent from its output.
status="$(dpkg-query -W -f='${Package}\t${db:Status-Status}\n' "${packages[@]}" 2>/dev/null || true)"
missing=()
for p in "${packages[@]}"; do
  if ! grep -qxF "${p}"$'\tinstalled' <<<"${status}"; then
    missing+=("${p}")
  fi
done

# DPDK's driver-SDK headers (drivers/dpdk) from Debian's dpdk source package of the installed
# version, checksum-verified, into a cache folder outside the repository (idempotent).
# A failure (no network, no source package) is reported and the build then switches the
# dma_npo driver off with that reason printed; the rest of npo-hal does not need the headers.
dpdk_sdk_headers() {
  if ! bash "$(dirname "${BASH_SOURCE[0]}")/dpdk-sdk-headers.sh"; then
    echo "npo-hal setup: WARNING: DPDK driver-SDK headers not fetched; the dma_npo driver will be OFF" >&2
  fi
}

if ((${#missing[@]} == 0)); then
  echo "npo-hal setup: all ${#packages[@]} packages present"
  dpdk_sdk_headers
  exit 0
fi

sudo_cmd=()
if ((EUID != 0)); then
  if command -v sudo >/dev/null 2>&1; then
    sudo_cmd=(sudo)
  else
    echo "npo-hal setup: not root and no sudo; as root run: apt-get install ${missing[*]}" >&2
    exit 1
  fi
fi

log="$(mktemp "${TMPDIR:-/tmp}/npo-setup.XXXXXX.log")"
printf 'npo-hal setup: installing: %s ... ' "${missing[*]}"
start=${SECONDS}
apt_opts=(-o DPkg::Lock::Timeout=300 -o Dpkg::Use-Pty=0 -q)
if ! "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "${apt_opts[@]}" update >"${log}" 2>&1 ||
  ! "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "${apt_opts[@]}" install -y \
    --no-install-recommends "${missing[@]}" >>"${log}" 2>&1; then
  echo "FAILED"
  echo "npo-hal setup: apt-get failed; last lines of ${log}:" >&2
  tail -n 30 "${log}" >&2
  exit 1
fi
echo "done ($((SECONDS - start)) s)"
rm -f "${log}"
dpdk_sdk_headers
