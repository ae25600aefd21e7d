#!/bin/busybox sh
# SPDX-License-Identifier: Apache-2.0
# PID 1 of the e2e guest (runs from the initramfs built by mkinitramfs.sh).
#
# Loads the modules, mounts the host's / read-only over virtio-9p with a tmpfs
# overlay on top (so the guest runs the host's installed binaries and the
# checkout's build), mounts the writable 9p share "out" at /e2e-out, chroots
# and runs the script named by e2e.script=. The script's exit status leaves the
# VM through isa-debug-exit (qemu exits with 2*rc+1); run-vm.sh decodes it.
#
# kernel command line: e2e.script=PATH  e2e.timeout=SECS  e2e.tmpfs=SIZE  e2e.shell=1
/bin/busybox --install -s   # canonical applet paths, incl. /sbin/modprobe for request_module()
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
dmesg -n 1                  # console messages are slow under TCG; dmesg is saved at the end
echo "E2E: initramfs up at $(cut -d' ' -f1 /proc/uptime)s"

while read -r ko; do        # dependency order, computed by mkinitramfs.sh
    insmod "$ko" 2>/dev/null || echo "E2E: insmod failed (ignored): $ko"
done < /modules.order

script=; guest_timeout=; want_shell=; tmpfs_size=1g; expose=
for arg in $(cat /proc/cmdline); do
    case "$arg" in
        e2e.script=*)  script="${arg#e2e.script=}" ;;
        e2e.timeout=*) guest_timeout="${arg#e2e.timeout=}" ;;
        e2e.tmpfs=*)   tmpfs_size="${arg#e2e.tmpfs=}" ;;
        e2e.shell=1)   want_shell=1 ;;
        e2e.expose=*)  expose="${arg#e2e.expose=}" ;;
    esac
done

fatal() { echo "E2E: FATAL: $*"; printf '\176' | dd of=/dev/port bs=1 seek=244 count=1 2>/dev/null; poweroff -f; }
mkdir -p /lower /rw /newroot
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,cache=loose,ro hostroot /lower \
    || fatal "9p mount of the host root failed"
mount -t tmpfs -o size="$tmpfs_size" tmpfs /rw
mkdir -p /rw/upper /rw/work
mount -t overlay overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work /newroot \
    || fatal "overlay mount failed"
mount -t proc proc /newroot/proc
mount -t sysfs sysfs /newroot/sys
mount -t configfs configfs /newroot/sys/kernel/config
mount -t devtmpfs devtmpfs /newroot/dev
mkdir -p /newroot/dev/pts /newroot/dev/shm
mount -t devpts devpts /newroot/dev/pts
mount -t tmpfs tmpfs /newroot/dev/shm
# devtmpfs has no /dev/fd: bash's <(...) needs it
ln -sf /proc/self/fd /newroot/dev/fd;     ln -sf /proc/self/fd/0 /newroot/dev/stdin
ln -sf /proc/self/fd/1 /newroot/dev/stdout; ln -sf /proc/self/fd/2 /newroot/dev/stderr
mount -t tmpfs tmpfs /newroot/run
mount -t tmpfs tmpfs /newroot/tmp
# The guest's own tmpfs on /tmp and /run hides whatever the host keeps there,
# and CI may well clone the checkout under /tmp: put the host directories the
# suite needs (e2e.expose=DIR,DIR: the checkout, the handler dir) back on top.
for d in $(echo "$expose" | tr ',' ' '); do
    case "$d" in
        /tmp/*|/run/*|/dev/shm/*)
            [ -d "/lower$d" ] || continue
            mkdir -p "/newroot$d" && mount --bind "/lower$d" "/newroot$d" \
                || echo "E2E: could not expose $d in the guest" ;;
    esac
done
mkdir -p /newroot/e2e-out
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 out /newroot/e2e-out \
    || fatal "9p mount of the out share failed"
# tcmu-runner (libkmod) exits if /lib/modules/$(uname -r) is missing; the host
# only extracted the kernel .deb, so expose the initramfs copy.
KV=$(uname -r)
if [ ! -d /newroot/lib/modules/$KV ]; then
    mkdir -p /newroot/lib/modules/$KV && mount --bind /lib/modules/$KV /newroot/lib/modules/$KV
fi
ip link set lo up
echo "E2E: chroot ready at $(cut -d' ' -f1 /proc/uptime)s"

rc=0
if [ -n "$script" ]; then
    ${guest_timeout:+timeout -s KILL $guest_timeout} \
        chroot /newroot /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TERM=dumb LANG=C.UTF-8 \
        /bin/bash "$script"
    rc=$?
    [ -n "$guest_timeout" ] && [ $rc -eq 137 ] && echo "E2E: guest script killed after e2e.timeout=${guest_timeout}s"
fi
[ -n "$want_shell" ] && chroot /newroot /bin/bash -l
echo "E2E: script rc=$rc at $(cut -d' ' -f1 /proc/uptime)s"
dmesg > /newroot/e2e-out/dmesg.txt 2>/dev/null
if [ $rc -ne 0 ]; then
    # a killed or failed suite could not save its daemon logs (guest/lib.sh keeps
    # them in /tmp/w/log) nor say what was still running: do it here
    mkdir -p /newroot/e2e-out/logs
    for f in /newroot/tmp/w/log/*; do
        [ -f "$f" ] && [ ! -e "/newroot/e2e-out/logs/${f##*/}" ] && cp "$f" /newroot/e2e-out/logs/
    done
    ps -o pid,ppid,stat,time,args > /newroot/e2e-out/ps-at-exit.txt 2>/dev/null
fi
sync
umount /newroot/e2e-out 2>/dev/null
# isa-debug-exit at 0xf4: qemu exits with (byte<<1)|1, so only 0..127 survive.
# 126/127 (script not executable / command not found) -> 123;
# >= 128 (killed by e2e.timeout or another signal) -> 125.
case $rc in 125|126|127) rc=123 ;; esac
[ $rc -ge 128 ] && rc=125
printf "\\$(printf '%03o' $rc)" | dd of=/dev/port bs=1 seek=244 count=1 2>/dev/null
poweroff -f
