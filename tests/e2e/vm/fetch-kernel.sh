#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Fetch Debian 12's stock kernel package and extract it into a cache directory.
# We never install it (no postinst, no initrd generation: ~7 s instead of ~140 s);
# we only need vmlinuz and the modules tree, with modules.dep from depmod.
#
# usage: fetch-kernel.sh CACHE_DIR
# env:   COWSTORE_E2E_KPKG  exact package (default: what linux-image-amd64 depends on)
# prints: two lines "KVER=<version>" and "KROOT=<extracted root>" on stdout
set -euo pipefail
CACHE=$(realpath -m "${1:?usage: fetch-kernel.sh CACHE_DIR}")
mkdir -p "$CACHE"
exec 9>"$CACHE/.kernel.lock"
flock 9          # two concurrent runs must not extract into the same directory

KPKG=${COWSTORE_E2E_KPKG:-}
if [ -z "$KPKG" ]; then
    KPKG=$(apt-cache depends linux-image-amd64 2>/dev/null \
           | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
fi
if [ -z "$KPKG" ]; then
    # apt lists unavailable (e.g. SKIP_APT on a machine that never ran apt-get update):
    # fall back to whatever is already cached
    KPKG=$(ls -1 "$CACHE" 2>/dev/null | sed -n 's/^\(linux-image-.*-amd64\)$/\1/p' | sort -V | tail -1)
fi
[ -n "$KPKG" ] || { echo "fetch-kernel: cannot determine the kernel package (run apt-get update)" >&2; exit 1; }

KDIR=$CACHE/$KPKG
if [ ! -f "$KDIR/.complete" ]; then
    rm -rf "$KDIR"; mkdir -p "$KDIR/deb"
    (cd "$KDIR/deb" && apt-get download -q "$KPKG" >&2)
    dpkg-deb -x "$KDIR"/deb/"$KPKG"_*.deb "$KDIR/root"
    rm -rf "$KDIR/deb"
    KVER=$(ls "$KDIR/root/lib/modules" | head -1)
    depmod -b "$KDIR/root" "$KVER"
    touch "$KDIR/.complete"
    echo "fetch-kernel: extracted $KPKG into $KDIR" >&2
fi
KVER=$(ls "$KDIR/root/lib/modules" | head -1)
[ -f "$KDIR/root/boot/vmlinuz-$KVER" ] || { echo "fetch-kernel: no vmlinuz in $KDIR" >&2; exit 1; }
echo "KVER=$KVER"
echo "KROOT=$KDIR/root"
