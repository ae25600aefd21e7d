#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Suite "device-pool": a pool on a block device, as NAS builders keep theirs
# on a disk or an md array, through the real kernel (issue 12).
#
# A loop device in the guest (over a tmpfs file) holds the pool: cowctl pool
# create --device; two LUNs exported through tcm_loop; data written and read
# through the initiator's /dev/sdX; clones by EXTENDED COPY (sg_xcopy, two
# LUNs of one copy group) and by cowctl lun clone while tcmu-runner serves
# the pool, then copy-on-write checked (the source overwritten, the clones
# keep the old data); tcmu-runner restarted; cowctl save; then two "reboots"
# (runner stopped, LIO cleared, disks detached and attached again):
#  1. the device names changed: an ext4 disk now has the pool's old name.
#     cowctl restore (what cowstore-restore.service runs at boot) must refuse
#     it, with and without --create-missing, and leave the ext4 disk byte for
#     byte as it was; after the link is fixed by hand, restore brings every
#     LUN and export back;
#  2. the pool directory lost its link: restore relinks the saved device,
#     which carries this pool's UUID.
# The data is verified after every step; the pool checks clean at the end.
#
#   tests/e2e/run-e2e.sh --suite device-pool [--handler-dir DIR]
#   (E2E_COWCTL=/path/to/cowctl picks the binary; default: the build's or PATH's)
. "$(dirname "$0")/../guest/lib.sh"
COWSTORE_POOL_DIR=$W/pools          # the pool directory holds only the link to the device
. "$E2E_DIR/guest/cowstore.sh"

[ -f "$COW_SO" ] || skip_suite "handler_cowstore.so not found in ${COW_HANDLER_DIR:-?}"
COWCTL=${E2E_COWCTL:-$(cow_tool)}
[ -n "$COWCTL" ] && [ -x "$COWCTL" ] || skip_suite "no cowctl binary (set E2E_COWCTL)"
cowctl() { "$COWCTL" "$@"; }
CONF=$W/cowstore.yaml
DISKS=/run/disks

# dev_of POOL/LUN [block|scsi_generic] : the tcm_loop disk cowctl exported it as
dev_of() {
    local t n
    read -r t n < <(cowctl --json export list | python3 -c '
import json, sys
for e in json.load(sys.stdin):
    if e["lun"] == sys.argv[1] and e["fabric"] == "loopback":
        print(e["target"], e["lun_number"]); break' "$1") || return 1
    loop_dev "$t" "$n" "${2:-block}"
}
# pool_field FIELD : one number of `cowctl --json pool show dp` (bytes)
pool_field() { cowctl --json pool show dp | python3 -c "import json,sys; print(json.load(sys.stdin)['$1'])"; }
# rc_is RC CMD... : CMD exits with exactly RC
rc_is() { local want=$1 rc; shift; "$@"; rc=$?; echo "(exit $rc, want $want)"; [ $rc -eq "$want" ]; }
# data_ok : everything written so far reads back through the initiator
data_ok() {
    local v1 v2 vc
    v1=$(wait_for 20 dev_of dp/vm1) && v2=$(wait_for 20 dev_of dp/vm2) && vc=$(wait_for 20 dev_of dp/vm1-snap) ||
        { echo "a LUN's disk is missing (vm1=$v1 vm2=$v2 vm1-snap=$vc)"; return 1; }
    echo "vm1=$v1 vm2=$v2 vm1-snap=$vc"
    same_as "$v1" 0 4096 $W/pat2 && same_as_range "$v1" 4096 4096 $W/pat 4096 &&
        zeros "$v1" 8192 2048 &&
        same_as "$v2" 32768 8192 $W/pat && zeros "$v2" 0 4096 && zeros "$v2" 28672 4096 &&
        same_as "$vc" 0 8192 $W/pat
}
# same_as_range DEV LBA COUNT FILE FILE_LBA : blocks equal FILE's from FILE_LBA
same_as_range() { cmp <(read_blocks "$1" "$2" "$3") <(dd if="$4" bs=512 skip="$5" count="$3" status=none); }
# reboot : what a reboot does to LIO and the runner (the pool's disk stays)
reboot_lio() { targetcli clearconfig confirm=True && stop_runner TERM && ! compgen -G "$CFS/core/user_*/*/enable"; }

say "suite device-pool: $COWCTL, handler $COW_SO, pool dir $COWSTORE_POOL_DIR"
step scratch          mk_scratch 300M
step disks-tmpfs      bash -c "mkdir -p $DISKS && mount -t tmpfs -o size=1300M tmpfs $DISKS"
step dbus             start_dbus
step runner-start     start_runner --handler-path "$COW_HANDLER_DIR"

# ------------------------------------------------------------ the disks
# An ext4 disk with a file on it: the kind of device restore must never touch.
step ext4-image       bash -c "truncate -s 64M $DISKS/ext4.img && mkfs.ext4 -q -F $DISKS/ext4.img &&
                        mkdir -p /mnt/e && mount -o loop $DISKS/ext4.img /mnt/e &&
                        echo 'the only copy of something' > /mnt/e/marker && umount /mnt/e &&
                        sha256sum < $DISKS/ext4.img > $DISKS/ext4.sha256"
truncate -s 1G $DISKS/pool.img
DEV=$(losetup -f --show $DISKS/pool.img)
step pool-disk        test -b "$DEV"
say "pool disk $DEV"

# ------------------------------------------------------------ create, I/O
# cowctl's defaults: a format 3 pool (64K allocation unit, 4K grain) on the device
step pool-create      cowctl pool create dp --device "$DEV"
step pool-link        shows "$DEV" readlink $COWSTORE_POOL_DIR/dp
step pool-format3     shows "sharing unit: *4.00 KiB \\(format 3\\)" cowctl pool show dp
step pool-show        shows "1.00 GiB" cowctl pool show dp
step lun-create-vm1   cowctl lun create dp/vm1 --size 256M
step lun-create-vm2   cowctl lun create dp/vm2 --size 256M
step export-vm1       cowctl export loop dp/vm1 --copy-group g1
step export-vm2       cowctl export loop dp/vm2 --copy-group g1
step disks-appear     wait_for 20 dev_of dp/vm2
V1=$(dev_of dp/vm1); V2=$(dev_of dp/vm2); S1=$(dev_of dp/vm1 scsi_generic); S2=$(dev_of dp/vm2 scsi_generic)
say "vm1=$V1 ($S1) vm2=$V2 ($S2)"
step mk-patterns      bash -c "dd if=/dev/urandom of=$W/pat bs=1M count=4 status=none && dd if=/dev/urandom of=$W/pat2 bs=1M count=2 status=none"
step io-write         dd if=$W/pat of="$V1" bs=1M oflag=direct status=none
step io-read          same_as "$V1" 0 8192 $W/pat
step io-unwritten-zeros zeros "$V1" 8192 2048
step io-on-the-device eval 'a=$(pool_field allocated); echo allocated=$a; [ $a -ge $((4 << 20)) ]'

# ------------------------------------------------------------ clone: XCOPY and cowctl
SHARED0=$(pool_field shared)
# 4 MiB from vm1 to vm2 at 16 MiB, aligned to the allocation unit: a metadata clone
step xcopy            sg_xcopy if="$S1" of="$S2" bs=512 skip=0 seek=32768 count=8192
step xcopy-data       same_as "$V2" 32768 8192 $W/pat
step xcopy-shares     eval 's=$(pool_field shared); echo shared before=$SHARED0 after=$s; [ $s -ge $((SHARED0 + (4 << 20))) ]'
step clone-online     cowctl lun clone dp/vm1 vm1-snap
step export-clone     cowctl export loop dp/vm1-snap --copy-group g1
step clone-data       wait_for 20 eval 'same_as "$(dev_of dp/vm1-snap)" 0 8192 $W/pat'
# copy on write: overwrite vm1's first 2 MiB; both clones keep the old data
step cow-write        dd if=$W/pat2 of="$V1" bs=1M oflag=direct status=none
step cow-all          data_ok

# ------------------------------------------------------------ tcmu-runner restart
step runner-stop      stop_runner TERM
step runner-restart   start_runner --handler-path "$COW_HANDLER_DIR"
step restart-data     wait_for 30 data_ok

# ------------------------------------------------------------ save; reboot 1: names changed
step save             cowctl save $CONF
step save-device      shows "device: $DEV" cat $CONF
step save-uuid        shows "uuid: " cat $CONF
step reboot1          reboot_lio
step detach           losetup -d "$DEV"
# The ext4 disk comes up under the pool's old name, the pool's disk elsewhere.
step ext4-takes-name  losetup "$DEV" $DISKS/ext4.img
DEV2=$(losetup -f --show $DISKS/pool.img)
step pool-disk-moved  bash -c "test -b '$DEV2' && [ '$DEV2' != '$DEV' ] && echo 'pool now on $DEV2'"
step runner-boot1     start_runner --handler-path "$COW_HANDLER_DIR"
step restore-refuses  rc_is 3 cowctl restore $CONF
step restore-says-why fails_with "dp.*not restored" cowctl restore $CONF
step restore-create-missing-refuses rc_is 3 cowctl restore --create-missing $CONF
step ext4-intact      bash -c "sha256sum < $DISKS/ext4.img | cmp - $DISKS/ext4.sha256 && echo 'image unchanged'"
step ext4-fsck        e2fsck -fn "$DEV"
step ext4-marker      bash -c "mount -o ro $DEV /mnt/e && grep -qx 'the only copy of something' /mnt/e/marker; rc=\$?; umount /mnt/e; exit \$rc"
step nothing-exported shows "no cowstore exports" cowctl export list
# the administrator points the link at the disk's new name, as restore's message says
step relink-by-hand   ln -sfn "$DEV2" $COWSTORE_POOL_DIR/dp
step restore          cowctl restore $CONF
step restore-data     wait_for 30 data_ok
step restore-again    shows "nothing to do" cowctl restore $CONF

# ------------------------------------------------------------ reboot 2: the link is lost
step save2            cowctl save $CONF
step save2-device     shows "device: $DEV2" cat $CONF
step reboot2          reboot_lio
step link-lost        rm $COWSTORE_POOL_DIR/dp
step runner-boot2     start_runner --handler-path "$COW_HANDLER_DIR"
step restore-relinks  shows "relinked pool dp to $DEV2" cowctl restore $CONF
step relinked-data    wait_for 30 data_ok
step relinked-link    shows "$DEV2" readlink $COWSTORE_POOL_DIR/dp

# ------------------------------------------------------------ shut down, check offline
step runner-stop-end  stop_runner TERM
step pool-check       shows "clean" cowctl pool check dp
step ext4-still-intact bash -c "losetup -d $DEV; sha256sum < $DISKS/ext4.img | cmp - $DISKS/ext4.sha256"
losetup -d "$DEV2" 2>/dev/null
finish
