#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fetches Debian's own kernel for the vfio-qemu test into a cache directory outside the
# repository: `apt-get download` of the image package linux-image-amd64 depends on, `dpkg -x`,
# then keeps only what the guest needs: vmlinuz, config, the uncompressed ELF vmlinux (faster
# to boot under TCG) and the VFIO modules (the package has no modules.dep; the guest insmods them).
# Usage: fetch-kernel.sh DIR       (no root needed; DIR is created)
set -euo pipefail
dir=$1
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
command -v apt-get >/dev/null && command -v dpkg >/dev/null || { echo "fetch-kernel: needs apt-get and dpkg (Debian)" >&2; exit 1; }
pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
[[ -n "${pkg}" ]] || { echo "fetch-kernel: apt-cache knows no linux-image-amd64 (apt-get update?)" >&2; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/npo-kernel.XXXXXX")
trap 'rm -rf "${tmp}"' EXIT
chmod 0777 "${tmp}"  # apt-get download runs as _apt when it can
(cd "${tmp}" && apt-get download -q "${pkg}" >/dev/null 2>&1) || { echo "fetch-kernel: apt-get download ${pkg} failed" >&2; exit 1; }
dpkg -x "${tmp}"/*.deb "${tmp}/root"
mkdir -p "${dir}/modules"
cp "${tmp}"/root/boot/vmlinuz-* "${dir}/vmlinuz"
cp "${tmp}"/root/boot/config-* "${dir}/config"
for m in vfio vfio_iommu_type1 vfio_virqfd irqbypass vfio-pci-core vfio-pci; do
  f=$(find "${tmp}/root/lib/modules" -name "${m}.ko*" | head -n 1)
  [[ -n "${f}" ]] || { echo "fetch-kernel: ${pkg} has no ${m}.ko" >&2; exit 1; }
  case "${f}" in
    *.xz) xz -dc "${f}" >"${dir}/modules/${m}.ko" ;;
    *.zst) zstd -qdc "${f}" >"${dir}/modules/${m}.ko" ;;
    *) cp "${f}" "${dir}/modules/${m}.ko" ;;
  esac
done
python3 "${here}/extract-vmlinux.py" "${dir}/vmlinuz" "${dir}/vmlinux" >/dev/null || rm -f "${dir}/vmlinux"
echo "${pkg}" >"${dir}/package"
echo "fetch-kernel: ${pkg} in ${dir}"
