#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Build the guest's initramfs: static busybox, the kernel modules the e2e
# suites need (with their dependencies, in load order) and init.sh as /init.
# Takes ~1 s and ~3 MB, so run-e2e.sh simply rebuilds it on every run.
#
# usage: mkinitramfs.sh KVER MODROOT OUTPUT
#   MODROOT: directory that contains lib/modules/KVER (the extracted kernel .deb)
# env:   E2E_EXTRA_MODS  additional module names
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
KVER=${1:?usage: mkinitramfs.sh KVER MODROOT OUTPUT}
MODROOT=$(realpath "${2:?}")
OUT=${3:?}
# crc32c first: iscsi_target_mod's login allocates crc32c and fails
# ("crypto_alloc_ahash() failed") if no implementation is loaded yet.
MODS="crc32c_generic crc32c_intel virtio_pci 9pnet_virtio 9p overlay configfs
      target_core_mod target_core_user target_core_file target_core_iblock tcm_loop
      iscsi_target_mod sd_mod sg loop ext4 ${E2E_EXTRA_MODS:-}"

BUSYBOX=$(command -v busybox || true)
[ -n "$BUSYBOX" ] && file -L "$BUSYBOX" | grep -q "statically linked" \
    || { echo "mkinitramfs: need a static busybox (apt-get install busybox-static)" >&2; exit 1; }

W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
mkdir -p "$W"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,etc,lib/modules/"$KVER"}
cp "$BUSYBOX" "$W/bin/busybox"
cp "$HERE/init.sh" "$W/init"; chmod +x "$W/init"

: > "$W/modules.order"
for m in $MODS; do
    modprobe -d "$MODROOT" -S "$KVER" --show-depends "$m" | awk '$1=="insmod"{print $2}'
done | awk '!seen[$0]++' | while read -r src; do
    ko=${src#"$MODROOT"}                  # /lib/modules/KVER/...
    mkdir -p "$W$(dirname "$ko")"
    cp "$src" "$W$ko"
    echo "$ko" >> "$W/modules.order"
done
# The kernel's own request_module() runs /sbin/modprobe (busybox) in the
# initramfs root, so the initramfs needs a usable modules.dep too.
for f in modules.order modules.builtin modules.builtin.modinfo; do
    cp "$MODROOT/lib/modules/$KVER/$f" "$W/lib/modules/$KVER/" 2>/dev/null || true
done
depmod -b "$W" "$KVER"
mkdir -p "$(dirname "$OUT")"
(cd "$W" && find . | cpio -o -H newc --quiet | gzip -1) > "$OUT.tmp"
mv "$OUT.tmp" "$OUT"
echo "mkinitramfs: $OUT ($(du -h "$OUT" | cut -f1), $(wc -l < "$W/modules.order") modules)" >&2
