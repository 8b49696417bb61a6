#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Tests npo-vfio-bind on a fake sysfs tree (NPO_SYSFS): what it writes to driver_override,
# driver/unbind and drivers_probe, its warnings, its udev answers and its exit codes.
# Usage: test-bind-helper.sh HELPER VENDOR DEVICE   (IDs as 4 hex digits, e.g. 1ee7 0a01)
set -eu
helper=$1
vid=$2
did=$3
tmp=$(mktemp -d "${TMPDIR:-/tmp}/npo-udev-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
sys=$tmp/sys
fails=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }
expect_file() { # path expected-content what
  got=$(cat "$1" 2>/dev/null || echo "<missing>")
  if [ "$got" = "$2" ]; then ok "$3"; else bad "$3: $1 holds '$got', expected '$2'"; fi
}

fn() { # bdf vendor device driver group
  d=$sys/devices/pci0000:00/$1
  mkdir -p "$d" "$sys/bus/pci/devices"
  echo "0x$2" >"$d/vendor"
  echo "0x$3" >"$d/device"
  : >"$d/driver_override"
  ln -s "../../../devices/pci0000:00/$1" "$sys/bus/pci/devices/$1"
  if [ -n "$4" ]; then
    mkdir -p "$sys/bus/pci/drivers/$4"
    : >"$sys/bus/pci/drivers/$4/unbind"
    ln -s "../../../bus/pci/drivers/$4" "$d/driver"
  fi
  if [ -n "$5" ]; then
    mkdir -p "$sys/kernel/iommu_groups/$5/devices"
    ln -s "../../../kernel/iommu_groups/$5" "$d/iommu_group"
    ln -s "../../../../devices/pci0000:00/$1" "$sys/kernel/iommu_groups/$5/devices/$1"
  fi
}
mkdir -p "$sys/bus/pci/drivers/vfio-pci"
: >"$sys/bus/pci/drivers/vfio-pci/unbind"
: >"$sys/bus/pci/drivers_probe"
fn 0000:3b:00.0 "$vid" "$did" npo_native 12
fn 0000:3b:00.1 10de 22ba snd_hda_intel 12
fn 0000:5e:00.0 "$vid" "$did" vfio-pci 40
fn 0000:00:03.0 1af4 1041 virtio-pci 3
fn 0000:77:00.0 "$vid" "$did" "" 77
export NPO_SYSFS="$sys"

# bind one card: driver_override, unbind from its driver, probe; warns about the group peer.
out=$("$helper" bind 3b:00.0 2>"$tmp/err")
expect_file "$sys/devices/pci0000:00/0000:3b:00.0/driver_override" vfio-pci "bind sets driver_override"
expect_file "$sys/bus/pci/drivers/npo_native/unbind" 0000:3b:00.0 "bind unbinds the old driver"
expect_file "$sys/bus/pci/drivers_probe" 0000:3b:00.0 "bind probes"
case "$out" in *"0000:3b:00.0: vfio-pci (was: npo_native), IOMMU group 12"*) ok "bind reports" ;; *) bad "bind output: $out" ;; esac
if grep -q "0000:3b:00.1 shares IOMMU group 12 and is bound to snd_hda_intel" "$tmp/err"; then ok "group peer warning"; else
  bad "no group peer warning: $(cat "$tmp/err")"; fi

# status of every card (no BDF: the NPO cards only)
out=$("$helper" status)
n=$(echo "$out" | grep -c "driver=")
if [ "$n" = 3 ]; then ok "status lists the 3 cards"; else bad "status: $out"; fi
case "$out" in *"0000:5e:00.0 driver=vfio-pci iommu_group=40 nodes=/dev/vfio/40"*) ok "status line" ;; *) bad "status: $out" ;; esac

# unbind: release from vfio-pci, clear driver_override, probe the kernel's drivers
: >"$sys/bus/pci/drivers_probe"
"$helper" unbind 0000:5e:00.0 >/dev/null
expect_file "$sys/bus/pci/drivers/vfio-pci/unbind" 0000:5e:00.0 "unbind unbinds vfio-pci"
expect_file "$sys/devices/pci0000:00/0000:5e:00.0/driver_override" "" "unbind clears driver_override"
expect_file "$sys/bus/pci/drivers_probe" 0000:5e:00.0 "unbind probes"

# udev questions
if "$helper" is-npo-group 12; then ok "group 12 holds a card"; else bad "is-npo-group 12"; fi
if "$helper" is-npo-group 3; then bad "is-npo-group 3 (virtio only) said yes"; else ok "group 3 holds no card"; fi
if "$helper" is-npo-group 999; then bad "is-npo-group 999 said yes"; else ok "unknown group"; fi
: >"$sys/bus/pci/drivers_probe"
"$helper" udev-probe 0000:77:00.0
expect_file "$sys/bus/pci/drivers_probe" 0000:77:00.0 "udev-probe probes an unbound card"
: >"$sys/bus/pci/drivers_probe"
"$helper" udev-probe 0000:3b:00.1
expect_file "$sys/bus/pci/drivers_probe" "" "udev-probe leaves a claimed function alone"

# other IDs through NPO_PCI_IDS
if NPO_PCI_IDS=1af4:1041 "$helper" is-npo-group 3; then ok "NPO_PCI_IDS"; else bad "NPO_PCI_IDS ignored"; fi

# errors and exit codes
set +e
"$helper" bind 0000:99:00.0 2>/dev/null
rc=$?
[ $rc = 1 ] && ok "unknown function: exit 1" || bad "unknown function: exit $rc"
"$helper" bind not-a-bdf 2>/dev/null
rc=$?
[ $rc = 1 ] && ok "bad address: exit 1" || bad "bad address: exit $rc"
"$helper" 2>/dev/null
rc=$?
[ $rc = 2 ] && ok "no command: exit 2" || bad "no command: exit $rc"
"$helper" frobnicate 2>/dev/null
rc=$?
[ $rc = 2 ] && ok "unknown command: exit 2" || bad "unknown command: exit $rc"
NPO_PCI_IDS=dead:beef "$helper" bind 2>/dev/null
rc=$?
[ $rc = 1 ] && ok "no card: exit 1" || bad "no card: exit $rc"
set -e

if [ $fails -ne 0 ]; then
  echo "$fails check(s) failed"
  exit 1
fi
echo "all checks passed"
