#!/bin/busybox sh
# SPDX-License-Identifier: Apache-2.0
# /init of the vfio-qemu guest: mount, load VFIO (no modules.dep: insmod in dependency order),
# bind edu and nvme to vfio-pci with the udev helper, run the test, print its status, power off.
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sysfs /sys
/bin/busybox mount -t devtmpfs devtmpfs /dev
/bin/busybox --install -s /bin
export PATH=/bin
api=type1
serial=npo0001
for a in $(cat /proc/cmdline); do
  case "$a" in
    npo.api=*) api=${a#npo.api=} ;;
    npo.serial=*) serial=${a#npo.serial=} ;;
  esac
done
for m in vfio vfio_iommu_type1 vfio_virqfd irqbypass vfio-pci-core vfio-pci; do
  insmod /modules/$m.ko || echo "insmod $m: failed"
done
export NPO_PCI_IDS=1234:11e8,1b36:0010
npo-vfio-bind bind
npo-vfio-bind status
echo "guest: $(ls /dev/vfio | tr '\n' ' ')"
NPO_QEMU_NVME_SERIAL=$serial /test/npo-vfio-qemu-guest "$api"
echo "NPO-VFIO-QEMU-EXIT: $?"
poweroff -f
