#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Suite "readme": README.md's "Using it" as a reader types it, as root on
# Debian 12 with LIO (issue 12).
#
# tests/readme/readme_blocks.py runs every README block marked "vm", in
# order, in the checkout: it installs the packages packaging/build-deb.sh
# left in build/deb (the guest starts without any cowstore file installed),
# loads the modules, restarts tcmu-runner so that it loads the packaged
# handler from its own directory, makes the pool, LUNs, exports, clone and
# saved file, and enables cowstore-restore.service. systemd is not PID 1 here:
# guest/systemctl-standin does what systemd would, from the installed unit
# files. Then what the README promises is checked: both ESXi initiators see
# both LUNs over iSCSI, anyone else is refused; after a reboot (LIO cleared,
# the runner stopped, then the enabled units started as at boot) both LUNs
# are back with the same identity. Last, the README with the bug it once had
# (exporting tank/ds2 without creating it) must fail at that line (run from
# the pool block on: the packages are installed by then).
#
#   tests/e2e/run-e2e.sh --suite readme       (after packaging/build-deb.sh)
#   E2E_DEB_DIR=DIR: the packages (default build/deb of the checkout)
. "$(dirname "$0")/../guest/lib.sh"
REPO=$E2E_REPO
README=$REPO/README.md
BLOCKS="python3 $REPO/tests/readme/readme_blocks.py"
DEBS=${E2E_DEB_DIR:-$REPO/build/deb}
ESX1=iqn.1998-01.com.vmware:esx1
ESX2=iqn.1998-01.com.vmware:esx2
MA=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)

compgen -G "$DEBS/cowstore_*.deb" > /dev/null && compgen -G "$DEBS/cowstore-handler_*.deb" > /dev/null ||
    skip_suite "no cowstore packages in $DEBS (run packaging/build-deb.sh first)"
[ "$DEBS" = "$REPO/build/deb" ] || { mkdir -p /run/readme-checkout/build; ln -s "$DEBS" /run/readme-checkout/build/deb; }
CHECKOUT=$([ "$DEBS" = "$REPO/build/deb" ] && echo "$REPO" || echo /run/readme-checkout)
say "suite readme: $README, packages $(cd "$DEBS" && ls cowstore*_*.deb | tr '\n' ' ')"

# What a fresh Debian 12 box has that the guest lacks: systemctl (see above),
# a hostname (cowctl names its default target after it), a running system bus.
mkdir -p /run/standin/bin
ln -sf "$E2E_DIR/guest/systemctl-standin" /run/standin/bin/systemctl
export PATH=/run/standin/bin:$PATH
hostname nas
# iscsi_target LUN : the iSCSI target cowctl exported POOL/LUN on
iscsi_target() {
    cowctl --json export list | python3 -c '
import json, sys
for e in json.load(sys.stdin):
    if e["lun"] == sys.argv[1] and e["fabric"] == "iscsi":
        print(e["target"], e["lun_number"]); break' "$1"
}
# serial_as INITIATOR URL : the LUN's unit serial (VPD 0x80) as that initiator reads it
serial_as() { iscsi-inq -i "$1" -e 1 -c 128 "$2" | sed -n 's/.*[Ss]erial.*: *//p' | tail -n 1; }
# boot : what systemd does at boot for the units that matter here (enabled ones only)
boot() {
    local u
    for u in tcmu-runner.service cowstore-restore.service; do
        systemctl is-enabled $u || { echo "$u is not enabled: it would not start at boot"; return 1; }
        systemctl start $u || return 1
    done
}
reboot_lio() { targetcli clearconfig confirm=True && systemctl stop tcmu-runner; }
finish_readme() {
    systemctl stop tcmu-runner > /dev/null 2>&1
    cp /var/log/tcmu-runner.log /run/systemctl-standin/*.out "$LOGDIR/" 2>/dev/null
    finish
}

step scratch          mk_scratch 200M
step dbus             start_dbus
step fresh-machine    bash -c "! command -v cowctl && ! test -e /usr/lib/$MA/tcmu-runner/handler_cowstore.so &&
                        ! test -e /lib/systemd/system/cowstore-restore.service"

# ------------------------------------------------------------ the README, as written
step readme-blocks    $BLOCKS run "$README" --mode vm --cwd "$CHECKOUT" --log "$LOGDIR/readme"
step installed        dpkg -s cowstore cowstore-handler
RUNNER=$(cat /run/systemctl-standin/tcmu-runner.service.pid 2>/dev/null)
step runner-loads-packaged-handler shows "/usr/lib/$MA/tcmu-runner/handler_cowstore.so" cat /proc/${RUNNER:-0}/maps
step modules-at-boot  shows "target_core_user" cat /etc/modules-load.d/cowstore.conf
step unit-enabled     systemctl is-enabled cowstore-restore.service
step saved            shows "name: ds2" cat /etc/cowstore/cowstore.yaml
step clone-made       shows "ds1-copy" cowctl lun list tank
read -r TGT N1 < <(iscsi_target tank/ds1); read -r TGT2 N2 < <(iscsi_target tank/ds2)
say "ds1: $TGT LUN $N1, ds2: $TGT2 LUN $N2"
step same-target      test -n "$TGT" -a "$TGT" = "$TGT2"
U1=iscsi://127.0.0.1/$TGT/$N1; U2=iscsi://127.0.0.1/$TGT/$N2
step esx1-sees-ds1    shows "Product:cowstore" iscsi-inq -i $ESX1 $U1
step esx1-sees-ds2    shows "Product:cowstore" iscsi-inq -i $ESX1 $U2
step esx2-sees-ds1    shows "Product:cowstore" iscsi-inq -i $ESX2 $U1
step esx2-sees-ds2    shows "Product:cowstore" iscsi-inq -i $ESX2 $U2
step stranger-refused fails_with "Authorization failure" iscsi-inq -i iqn.1998-01.com.vmware:stranger $U1
S1=$(serial_as $ESX1 $U1); S2=$(serial_as $ESX1 $U2)
say "serials: ds1 $S1, ds2 $S2"
step serials-differ   test -n "$S1" -a -n "$S2" -a "$S1" != "$S2"

# ------------------------------------------------------------ reboot: the enabled units bring it back
step reboot           reboot_lio
step lio-empty        shows "no cowstore exports" cowctl export list
step boot             boot
step after-boot-ds1   bash -c "[ \"\$(iscsi-inq -i $ESX1 -e 1 -c 128 $U1 | sed -n 's/.*[Ss]erial.*: *//p' | tail -n 1)\" = '$S1' ]"
step after-boot-ds2   bash -c "[ \"\$(iscsi-inq -i $ESX2 -e 1 -c 128 $U2 | sed -n 's/.*[Ss]erial.*: *//p' | tail -n 1)\" = '$S2' ]"
step after-boot-stranger fails_with "Authorization failure" iscsi-inq -i iqn.1998-01.com.vmware:stranger $U1

# ------------------------------------------------------------ the README with its old bug fails
# LIO, pool and saved file gone (the packages stay installed and the runner
# restarted, so the run starts at the pool block), and the README's
# 'lun create tank/ds2' line removed: the run must stop at the export of
# tank/ds2 and name that README line.
step reset            bash -c "targetcli clearconfig confirm=True && systemctl stop tcmu-runner &&
                        rm -f /var/lib/cowstore/pools/tank /etc/cowstore/cowstore.yaml && systemctl start tcmu-runner"
python3 -c "import sys; s=open(sys.argv[1]).read(); t=s.replace('cowctl lun create tank/ds2 --size 500G\n', '', 1); assert t != s; open(sys.argv[2], 'w').write(t)" \
    "$README" $W/README-bug.md
step old-bug-fails    fails_with "README.md:[0-9]+: this command failed .*export iscsi tank/ds2" \
                        $BLOCKS run $W/README-bug.md --mode vm --cwd "$CHECKOUT" --start-at 'cowctl pool create'
finish_readme
