#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Guest suite for the real-kernel harness: cowctl against real LIO, Debian's
# tcmu-runner and handler_cowstore.so (issue 5's end-to-end scenario).
#
#   tests/e2e/run-e2e.sh --suite tests/cowctl/e2e/cowctl.sh --handler-dir DIR
#   (E2E_COWCTL=/path/to/cowctl picks the binary; default: the build's or PATH's.
#    Point DIR and E2E_COWCTL into an unpacked package root to test the .debs.)
#
# pool + LUN + iSCSI export by cowctl; the LUN shows in targetcli; data
# written through an initiator (tcm_loop disk); clone through the control
# socket while tcmu-runner holds the pool, and import/export through it;
# cowctl save; LIO cleared and
# tcmu-runner restarted; cowctl restore brings everything back and the data
# reads back; a second restore changes nothing; a read-only snapshot and an
# online rollback (same device, data back, MEDIUM MAY HAVE CHANGED); targetcli's saveconfig /
# clearconfig / restoreconfig keeps cowctl's objects; a format 2 pool upgraded
# in place to format 3 (refused while served, its export saved, unexported,
# upgraded, restored, data and clone read back, a 4 KiB write parts from the
# clone by 4 KiB; a second upgrade is "already"); unexport and delete.
. "$(dirname "$0")/../../e2e/guest/lib.sh"
. "$E2E_DIR/guest/cowstore.sh"

[ -f "$COW_SO" ] || skip_suite "handler_cowstore.so not found in ${COW_HANDLER_DIR:-?}"
COWCTL=${E2E_COWCTL:-$(cow_tool)}
[ -n "$COWCTL" ] && [ -x "$COWCTL" ] || skip_suite "no cowctl binary (set E2E_COWCTL)"
cowctl() { "$COWCTL" "$@"; }
say "suite cowctl: $COWCTL, handler $COW_SO, pools in $COWSTORE_POOL_DIR"
TGT=iqn.2024-01.io.cowstore:e2e.p0
CONF=$W/cowstore.yaml
MIB=1048576

step scratch          mk_scratch 1200M
step dbus             start_dbus
step runner-start     start_runner --handler-path "$COW_HANDLER_DIR"

# ------------------------------------------------------------ make and export
# 512M: the pool fits the guest's /run tmpfs (half its memory), so the handler's
# thin-on-thin unit attention (on by default) has nothing to say here. The
# installed cowctl's defaults: a format 3 pool (64K allocation unit, 4K grain).
step pool-create      cowctl pool create p0 --size 512M
step pool-format3     shows "sharing unit: *4.00 KiB \\(format 3\\)" cowctl pool show p0
step lun-create       cowctl lun create p0/vm1 --size 64M --copy-group g1
step bs-config        shows 'Config: cowstore/p0/vm1;copy_group=g1' cat $CFS/core/user_0/p0-vm1/info
step bs-wwn           shows "$(cowctl --json lun show p0/vm1 | sed -n 's/.*"wwn": "\(.*\)".*/\1/p')" \
                      cat $CFS/core/user_0/p0-vm1/wwn/vpd_unit_serial
step export-iscsi     cowctl export iscsi p0/vm1 --target $TGT --portal 127.0.0.1:3260 --demo-mode
step export-loop      cowctl export loop p0/vm1
step targetcli-sees   shows "p0-vm1" targetcli ls /backstores/user:cowstore
step targetcli-iscsi  shows "$TGT" targetcli ls /iscsi
LW=$(cowctl --json export list | sed -n 's/.*"target": "\(naa\.[0-9a-f]*\)".*/\1/p' | head -1)
step loop-disk        wait_for 20 loop_dev "$LW" 0
D=$(loop_dev "$LW" 0)
pattern_file $W/pat 125 $((4 * MIB))
step write            dd if=$W/pat of="$D" bs=1M seek=8 oflag=direct status=none
step read             same_as "$D" $((8 * 2048)) $((4 * 2048)) $W/pat
step iscsi-inquiry    shows "LIO-ORG|cowstore" iscsi-inq "$(iscsi_url $TGT 0)"
step vaai-status      shows "ATS Status: supported" cowctl vaai status p0/vm1
step pool-served      shows "tcmu-runner" cowctl pool show p0
step clone-online     cowctl lun clone p0/vm1 vm1-copy
step clone-listed     shows "p0/vm1-copy" cowctl lun list p0
step delete-refused   fails cowctl lun delete p0/vm1
step import-online    cowctl lun import p0/imported --from $W/pat
step export-online    cowctl lun export p0/vm1 --to $W/vm1.img
step export-data      cmp <(dd if=$W/vm1.img bs=1M skip=8 count=4 status=none) $W/pat
step top-once         cowctl top --count 1 --interval 0.5
step resize-online    cowctl lun resize p0/vm1 --size 96M
step resize-lio       shows "100663296" cat $CFS/core/user_0/p0-vm1/attrib/dev_size
step resize-seen      eval "echo 1 > /sys/block/${D#/dev/}/device/rescan; blockdev --getsize64 $D | grep -qx 100663296"

# ------------------------------------------------------------ save, clear, restore
step save             cowctl save $CONF
step save-content     shows "copy_group: g1" cat $CONF
step save-uuid        shows "uuid: " cat $CONF
step clear-lio        targetcli clearconfig confirm=True
step runner-stop      stop_runner
step runner-restart   start_runner --handler-path "$COW_HANDLER_DIR"
step restore          cowctl restore $CONF
step restore-again    shows "nothing to do" cowctl restore $CONF
LW2=$(cowctl --json export list | sed -n 's/.*"target": "\(naa\.[0-9a-f]*\)".*/\1/p' | head -1)
step loop-disk-again  wait_for 20 loop_dev "$LW2" 0
D2=$(loop_dev "$LW2" 0)
step read-after       same_as "$D2" $((8 * 2048)) $((4 * 2048)) $W/pat
# The identifier cowctl prints is the one the initiator reads in VPD 0x83.
NAA=$(cowctl --json lun show p0/vm1 | sed -n 's/.*"naa": "naa\.\([0-9a-f]*\)".*/\1/p')
step naa-is-vpd83     eval "[ -n '$NAA' ] && sg_vpd -p di $D2 | tr -d ' ' | grep -qi '$NAA'"
step iscsi-after      shows "LIO-ORG|cowstore" iscsi-inq "$(iscsi_url $TGT 0)"

# ------------------------------------------------------------ snapshot and online rollback
# A read-only snapshot, new data written through the initiator, then a rollback
# while tcmu-runner serves the LUN: the initiator reads the snapshot's data on
# the same device (same naa), and its next command is told the medium changed.
step snapshot         cowctl lun snapshot p0/vm1 vm1-s1
step snapshot-ro      shows "read-only" cowctl lun show p0/vm1-s1
step overwrite        eval "dd if=/dev/urandom of=$W/pat2 bs=1M count=4 status=none && dd if=$W/pat2 of=$D2 bs=1M seek=8 oflag=direct status=none"
step overwritten      same_as "$D2" $((8 * 2048)) $((4 * 2048)) $W/pat2
step rollback         cowctl lun rollback p0/vm1 vm1-s1
step rollback-ua      eval "sg_turs -v $D2 2>&1 | tee /dev/stderr | grep -qi 'medium may have changed'"
step rollback-data    same_as "$D2" $((8 * 2048)) $((4 * 2048)) $W/pat
step rollback-naa     eval "sg_vpd -p di $D2 | tr -d ' ' | grep -qi '$NAA'"
step snapshot-kept    shows "p0/vm1-s1" cowctl lun list p0

# ------------------------------------------------------------ targetcli round trip
step tcli-save        targetcli saveconfig $W/tcli.json
step tcli-clear       targetcli clearconfig confirm=True
step tcli-restore     targetcli restoreconfig $W/tcli.json
step tcli-kept        shows "$TGT" cowctl export list
step tcli-nothing     shows "nothing to do" cowctl restore $CONF

# ------------------------------------------------------------ pool upgrade, format 2 to 3
# A format 2 pool (1M allocation unit = sharing unit) with data written through
# the kernel and a clone. pool upgrade is refused while tcmu-runner serves it
# (the upgrade below then starts from format 2: nothing changed); with the LUN's
# backstore removed, as the refusal says, it converts the pool in place;
# restore brings the export saved before back (the pool is used as it is now,
# with a note). The LUN and its clone read as before, and a 4 KiB write parts
# from the clone by one 4 KiB grain (format 2: a whole 1 MiB unit). p1 is gone
# after, so the steps below see the suite's own objects only.
loop_target() { # loop_target POOL/LUN : its tcm_loop target's WWN
    cowctl --json export list | python3 -c 'import json, sys
print(" ".join(e["target"] for e in json.load(sys.stdin) if e["lun"] == sys.argv[1] and e["fabric"] == "loopback"))' "$1"
}
lun_field() { # lun_field POOL LUN FIELD : a LUN's figure from pool show --json
    cowctl --json pool show "$1" | python3 -c 'import json, sys
print(next(l[sys.argv[2]] for l in json.load(sys.stdin)["luns"] if l["name"] == sys.argv[1]))' "$2" "$3"
}
pattern_file $W/upat 252 $((2 * MIB))
pattern_file $W/upat4k 063 4096
step up-pool          cowctl pool create p1 --size 64M --allocation-unit 1M --grain 1M
step up-format2       shows "sharing unit: *1.00 MiB \(the allocation unit, format 2" cowctl pool show p1
step up-lun           cowctl lun create p1/d1 --size 8M
step up-export        cowctl export loop p1/d1
UW=$(loop_target p1/d1)
step up-disk          wait_for 20 loop_dev "$UW" 0
UD=$(loop_dev "$UW" 0)
step up-write         dd if=$W/upat of="$UD" bs=1M seek=2 oflag=direct status=none
step up-clone         cowctl lun clone p1/d1 d1-copy
step up-save          cowctl save $W/up.yaml
step up-refused       fails_with "in use by tcmu-runner: stop serving it first" cowctl pool upgrade p1 --yes
step up-unexport      cowctl unexport p1/d1 --backstore
step up-upgrade       shows "upgraded from format 2 \(1.00 MiB sharing\) to format 3 \(4.00 KiB sharing\)" \
                      cowctl pool upgrade p1 --yes
step up-format3       shows "sharing unit: *4.00 KiB \(format 3\)" cowctl pool show p1
step up-restore       shows "pool p1 was upgraded from format 2 to format 3" cowctl restore $W/up.yaml
step up-disk-again    wait_for 20 loop_dev "$UW" 0
UD=$(loop_dev "$UW" 0)
step up-read          same_as "$UD" $((2 * 2048)) $((2 * 2048)) $W/upat
step up-write-4k      eval "dd if=$W/upat4k of=$UD bs=4k seek=768 oflag=direct status=none && same_as $UD $((3 * 2048)) 8 $W/upat4k"
step up-clone-data    eval "cowctl lun export p1/d1-copy --to $W/upc.img && cmp <(dd if=$W/upc.img bs=1M skip=2 count=2 status=none) $W/upat"
step up-grain-owned   shows "^4096$" lun_field p1 d1 exclusive
step up-already       shows "pool p1 is format 3 already" cowctl pool upgrade p1 --yes
step up-delete        eval "cowctl unexport p1/d1 --backstore && cowctl pool delete p1 --force"

# ------------------------------------------------------------ take it down
step unexport         cowctl unexport p0/vm1 --backstore
step lun-delete       cowctl lun delete p0/vm1
step runner-stop-end  stop_runner
step pool-check       shows "clean" cowctl pool check p0
finish
