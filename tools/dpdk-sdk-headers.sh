#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Obtains DPDK's driver-SDK headers (rte_dmadev_pmd.h, dev_driver.h, bus_driver.h,
# bus_vdev_driver.h), which libdpdk-dev does not ship, from Debian's `dpdk` source package of
# exactly the installed version. Nothing is copied into the repository: the headers land in a
# cache folder that CMake reads (NPO_DPDK_SDK_DIR).
#
# How (docs/dpdk.md, TOOLCHAIN.md "DPDK"): a private apt configuration with `deb-src` entries
# for the same mirrors and suites as the system's sources; `apt-get source --download-only`
# fetches the .dsc and tarballs and checks them against the signed Sources index (apt verifies
# the Release signature and every file's SHA256); `dpkg-source` checks the .dsc's checksums
# again. The system's apt configuration is not touched. Idempotent: a second run with the
# headers present for the installed version prints one line and does nothing.
#
# Usage: bash tools/dpdk-sdk-headers.sh [--print-dir]
#   NPO_DPDK_SDK_CACHE  cache root (default ${XDG_CACHE_HOME:-$HOME/.cache}/npo-hal/dpdk-sdk)
set -euo pipefail

cache_root="${NPO_DPDK_SDK_CACHE:-${XDG_CACHE_HOME:-${HOME}/.cache}/npo-hal/dpdk-sdk}"
version="$(dpkg-query -W -f='${Version}' libdpdk-dev 2>/dev/null || true)"
if [[ -z "${version}" ]]; then
  echo "npo-hal dpdk-sdk: libdpdk-dev is not installed; skipping the driver-SDK headers" >&2
  exit 0
fi
dest="${cache_root}/${version}/include"
if [[ "${1:-}" == "--print-dir" ]]; then
  echo "${dest}"
  exit 0
fi
headers=(lib/dmadev/rte_dmadev_pmd.h lib/eal/include/dev_driver.h lib/eal/include/bus_driver.h
  drivers/bus/vdev/bus_vdev_driver.h)
have_all=1
for h in "${headers[@]}"; do
  [[ -f "${dest}/$(basename "${h}")" ]] || have_all=0
done
if ((have_all)); then
  echo "npo-hal dpdk-sdk: driver-SDK headers of dpdk ${version} present in ${dest}"
  exit 0
fi

work="${cache_root}/${version}/apt"
mkdir -p "${work}/sources" "${work}/lists/partial" "${work}/archives/partial" "${work}/src"
# deb-src entries: the same URIs, suites, components and keyring as the binary sources.
: >"${work}/sources/npo-src.sources"
for f in /etc/apt/sources.list.d/*.sources; do
  [[ -f "${f}" ]] || continue
  sed -e 's/^Types:.*/Types: deb-src/' "${f}" >>"${work}/sources/npo-src.sources"
  echo >>"${work}/sources/npo-src.sources"
done
if [[ -f /etc/apt/sources.list ]]; then
  grep -E '^deb ' /etc/apt/sources.list | sed -e 's/^deb /deb-src /' >"${work}/sources/npo-src.list" || true
fi
apt_opts=(-q -o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=${work}/sources"
  -o "Dir::State::Lists=${work}/lists" -o "Dir::Cache::Archives=${work}/archives"
  -o Debug::NoLocking=1 -o "APT::Sandbox::User=$(id -un)")
log="${work}/apt.log"
printf 'npo-hal dpdk-sdk: fetching Debian source package dpdk=%s ... ' "${version}"
if ! apt-get "${apt_opts[@]}" update >"${log}" 2>&1; then
  echo "FAILED (apt-get update; see ${log})"
  tail -n 20 "${log}" >&2
  exit 1
fi
cd "${work}/src"
if ! apt-get "${apt_opts[@]}" source --download-only "dpdk=${version}" >>"${log}" 2>&1; then
  echo "FAILED (apt-get source; see ${log})"
  tail -n 20 "${log}" >&2
  exit 1
fi
dsc="$(ls -1 dpdk_*.dsc | head -n 1)"
# apt already checked every file against the signed Sources index; check the tarballs against
# the .dsc's Checksums-Sha256 once more here, visibly, before anything is unpacked.
if ! awk '/^Checksums-Sha256:/ {on = 1; next} /^[^ ]/ {on = 0} on && NF == 3 {print $1 "  " $3}' "${dsc}" |
  sha256sum --check --quiet >>"${log}" 2>&1; then
  echo "FAILED (checksum mismatch against ${dsc}; see ${log})"
  exit 1
fi
# dpkg-source verifies the .dsc's checksums again while unpacking.
rm -rf "${work}/src/tree"
if ! dpkg-source -x "${dsc}" "${work}/src/tree" >>"${log}" 2>&1; then
  echo "FAILED (dpkg-source -x; see ${log})"
  tail -n 20 "${log}" >&2
  exit 1
fi
mkdir -p "${dest}"
for h in "${headers[@]}"; do
  install -m 0644 "${work}/src/tree/${h}" "${dest}/"
done
sha256sum "${work}/src/"dpdk_*.orig.tar.* >"${cache_root}/${version}/orig.sha256"
rm -rf "${work}/src/tree"
echo "done (${dest})"
