#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Suite "stock": proves the harness with Debian's stock tcmu-runner handlers
# (user:qcow), before and independently of handler_cowstore.so.
#   - LUN made through configfs, exported via tcm_loop: sg3_utils + dd data checks
#   - the same handler through targetcli, with a system D-Bus in the guest
#   - an iSCSI LUN on 127.0.0.1:3260: iscsi-inq/iscsi-ls and an iscsi-test-cu subset,
#     gated on tests/e2e/icu-baseline-stock.txt
#   - tcmu-runner restart with data verified, per-command timing from one process
# Takes about a minute and a half under TCG.
. "$(dirname "$0")/../guest/lib.sh"
. "$E2E_DIR/guest/icu.sh"
SGIO="python3 $E2E_DIR/guest/sgio.py"
say "suite stock start"

step scratch        mk_scratch 1200M
step qemu-img       qemu-img create -q -f qcow2 $W/q0.qcow2 1G
step qemu-img-iscsi qemu-img create -q -f qcow2 $W/q1.qcow2 256M
step dbus           start_dbus
step runner-start   start_runner
step runner-version shows "tcmu-runner 1\.5\.4" bash -c "tcmu-runner -V; true"   # -V exits 1

# ------------------------------------------------------------ configfs + tcm_loop
WWN0=naa.5001405000000010
step bs-create      mk_user_bs 0 q0 1073741824 qcow/$W/q0.qcow2
step loop-lun       mk_loop_lun $CFS/core/user_0/q0 $WWN0
DEV=$(loop_dev $WWN0); SG=$(loop_dev $WWN0 0 scsi_generic)
say "tcm_loop disk $DEV ($SG)"
step sg_inq         sg_inq $DEV
step sg_inq-vendor  shows "Vendor identification: LIO-ORG" sg_inq $DEV
step sg_vpd-sn      sg_vpd -p sn $DEV
step sg_vpd-di      shows "designator type: NAA" sg_vpd -p di $DEV
step sg_vpd-bl      sg_vpd -p bl $DEV
step sg_readcap     shows "Last LBA=2097151" sg_readcap -l $DEV
step mk-pattern     dd if=/dev/urandom of=$W/pat bs=1M count=8 status=none
step dd-write       dd if=$W/pat of=$DEV bs=1M oflag=direct status=none
step dd-verify      same_as $DEV 0 16384 $W/pat
# WRITE SAME (16): one block of 0xAB replicated over LBA 40960..40967
pattern_file $W/blk-ab 253 512
step sg_write_same  sg_write_same --16 --lba=40960 --num=8 --in=$W/blk-ab $DEV
step ws-verify      all_bytes $DEV 40960 8 253
step ws-before      zeros $DEV 40952 8
step ws-after       zeros $DEV 40968 8
# COMPARE AND WRITE: LBA 40960 holds 0xAB; compare with that, write 0xCD
pattern_file $W/blk-cd 315 512
cat $W/blk-ab $W/blk-cd > $W/caw-ok
step sg_caw         sg_compare_and_write --in=$W/caw-ok --lba=40960 --num=1 $DEV
step caw-verify     all_bytes $DEV 40960 1 315
# the same CAW again must miscompare (block now holds 0xCD), leaving the block alone
step sg_caw-miscompare fails sg_compare_and_write --in=$W/caw-ok --lba=40960 --num=1 $DEV
step caw-unchanged  all_bytes $DEV 40960 1 315
# EXTENDED COPY (LID1) inside the LU: 16 blocks from LBA 0 to LBA 100000
step sg_xcopy       sg_xcopy if=$SG of=$SG bs=512 skip=0 seek=100000 count=16 id_usage=disable
step xcopy-verify   same_as $DEV 100000 16 <(head -c 8192 $W/pat)
# stock tcmu-runner does not implement REPORT SUPPORTED OPERATION CODES
step sg_opcodes-unsupported fails_with "Invalid opcode" sg_opcodes $DEV
step ddpt-read      ddpt if=$SG iflag=pt of=$W/ddpt.out bs=512 count=16384
step ddpt-cmp       cmp $W/ddpt.out $W/pat
# per-command cost from one process (no 56 ms process start per command)
step sgio-tur       $SGIO loop $SG tur 200
step sgio-write16   $SGIO loop $SG write16 100 200000 8

# ------------------------------------------------------------ restart the runner
step runner-stop    stop_runner
step runner-restart start_runner
step reopen-verify  wait_for 20 same_as $DEV 0 16384 $W/pat
step qcow-check     bash -c "sync; qemu-img check -U $W/q0.qcow2"

# ------------------------------------------------------------ targetcli (D-Bus)
step tcli-ls        bash -c "targetcli ls /backstores | grep -q user:qcow"
step qemu-img-tq    qemu-img create -q -f qcow2 $W/tq.qcow2 64M
step tcli-bs        targetcli /backstores/user:qcow create name=tq size=64M cfgstring=$W/tq.qcow2
step tcli-bs-bad    fails targetcli /backstores/user:qcow create name=tbad size=64M cfgstring=/nonexistent/x.qcow2
WWN1=naa.5001405000000020
step tcli-loop      targetcli /loopback create $WWN1
step tcli-looplun   targetcli /loopback/$WWN1/luns create /backstores/user:qcow/tq
step tcli-disk      wait_for 20 loop_dev $WWN1
step tcli-readcap   shows "Last LBA=131071" sg_readcap $(loop_dev $WWN1)
step tcli-save      targetcli saveconfig $W/saveconfig.json
cp $W/saveconfig.json $LOGDIR/ 2>/dev/null

# ------------------------------------------------------------ iSCSI on 127.0.0.1
IQN=iqn.2003-01.org.cowstore.e2e:stock
step bs1-create     mk_user_bs 0 q1 268435456 qcow/$W/q1.qcow2
step iscsi-lun      mk_iscsi_lun $CFS/core/user_0/q1 $IQN
step iscsi-inq      iscsi-inq $(iscsi_url $IQN)
step iscsi-ls       iscsi-ls -s iscsi://127.0.0.1
STOCK_ICU="SCSI.TestUnitReady,SCSI.Inquiry,SCSI.ReadCapacity10,SCSI.ReadCapacity16,SCSI.Read10,SCSI.Write10,SCSI.CompareAndWrite,SCSI.WriteSame16"
step icu-run        icu_run stock $(iscsi_url $IQN) "$STOCK_ICU"
step icu-baseline   icu_gate stock $E2E_DIR/icu-baseline-stock.txt
icu_table stock

step runner-alive   runner_alive
finish
