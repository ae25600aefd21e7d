#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The main job's real-LUN part (tools/run-demo.sh runs it; see tools/demo/README.md).
#
# Inside the e2e VM (no LIO on the host kernel):
#   tests/e2e/run-e2e.sh --suite tools/demo/guest-demo.sh --handler-dir build/default/handler/plugin
# or on a host whose kernel has LIO (run-demo.sh sets E2E_DEMO_HOST=1 and cleans up after).
#
# tcmu-runner loads handler_cowstore.so; cowctl makes a pool and VAAI-enabled
# LUNs exported over iSCSI on 127.0.0.1 (and through tcm_loop, which gives this
# machine a /dev/sdX for each LUN: the local initiator the measurements use);
# then: the VAAI status as ESXi would list it and the device fields behind it;
# a clone (EXTENDED COPY, 4 MiB per command, between two LUNs of one copy
# group) and an eager-zero (WRITE SAME(16), 1 MiB per command) against the same
# work done through the data path (dd), with time, bytes over the initiator
# path and pool space consumed.
#
# Lines meant for the reader start with "DEMO| " (run-demo.sh shows only those);
# everything else goes to the harness's logs. env: E2E_DEMO_MIB (size of the
# "VMDK", default 256), E2E_DEMO_RUNNER=system (use the tcmu-runner already running).
. "$(dirname "$0")/../../tests/e2e/guest/lib.sh"
. "$E2E_DIR/guest/cowstore.sh"
SGIO="python3 $E2E_DIR/guest/sgio.py"
MIB=1048576
SM=${E2E_DEMO_MIB:-256}
S=$(( SM * MIB )); SB=$(( S / 512 ))
POOL=${E2E_DEMO_POOL:-demo}
IQN=iqn.2024-01.io.cowstore:demo
TXT=$E2E_OUT/demo.txt; : > "$TXT"
COWCTL=$(cow_tool)
cowctl() { "$COWCTL" "$@"; }

# out TEXT... : a line for the reader; cmdout CMD... : a command's output for the reader, indented
out() { printf '%s\n' "$*" | tee -a "$TXT" | sed 's/^/DEMO| /'; }
cmdout() { "$@" 2>&1 | sed 's/^/    /' | tee -a "$TXT" | sed 's/^/DEMO| /'; }
header() { out ""; out "---- $* ----"; }
die() { out "FAILED: $* (see the logs: $LOGDIR)"; teardown; finish; }
# teardown: on a host (not in the throw-away VM), remove what the demo made
teardown() {
    [ -n "${E2E_DEMO_HOST:-}" ] || return 0
    local l
    for l in ${LUNS:-}; do
        step unexport-$l cowctl unexport $POOL/$l --backstore
        step delete-$l cowctl lun delete $POOL/$l
    done
}

[ -f "$COW_SO" ] || skip_suite "handler_cowstore.so not found in ${COW_HANDLER_DIR:-?}"
[ -n "$COWCTL" ] || skip_suite "no cowctl binary"

# ------------------------------------------------------------------ serve
header "1. Serve: tcmu-runner + handler_cowstore.so, a pool and iSCSI LUNs made by cowctl"
mkdir -p "$W/log"
if [ "${E2E_DEMO_RUNNER:-}" = system ]; then
    out "using the tcmu-runner already running (it loads handler_cowstore.so from its handler directory)"
else
    step runner-start start_runner --handler-path "$COW_HANDLER_DIR" || die "tcmu-runner did not start"
    out "tcmu-runner $(tcmu-runner -V 2>&1 | grep -o '[0-9][0-9.]*' | head -1) started with --handler-path $COW_HANDLER_DIR"
fi
# the pool holds the source, its two clones and the two zeroed disks, with room to spare
step pool-create cow_pool_create "$POOL" $(( 6 * S + 64 * MIB )) || die "cowctl pool create"
out "\$ cowctl pool create $POOL --size $(( (6 * S + 64 * MIB) / MIB ))M      (pools live in $COWSTORE_POOL_DIR)"
# vm1: the source "VMDK"; vm1-xcopy / vm1-dd: its clones; zero-ws / zero-dd: eager-zeroed disks
LUNS="vm1 vm1-xcopy vm1-dd zero-ws zero-dd"
for l in $LUNS; do
    step lun-$l cowctl lun create $POOL/$l --size ${SM}M || die "cowctl lun create $POOL/$l"
    step iscsi-$l cowctl export iscsi $POOL/$l --target $IQN --portal 127.0.0.1:3260 --demo-mode --copy-group esx \
        || die "cowctl export iscsi $POOL/$l"
    step loop-$l cowctl export loop $POOL/$l || die "cowctl export loop $POOL/$l"
done
out "\$ cowctl lun create $POOL/<lun> --size ${SM}M                    (x5: $LUNS)"
out "\$ cowctl export iscsi $POOL/<lun> --target $IQN --portal 127.0.0.1:3260 --demo-mode --copy-group esx   (lab: any local initiator)"
out "\$ cowctl export loop $POOL/<lun>"
cmdout cowctl export list
out "An iSCSI initiator on 127.0.0.1 (libiscsi's iscsi-ls) logs in and sees the LUNs:"
# each new LUN left a "REPORTED LUNS DATA HAS CHANGED" unit attention for this
# initiator name; iscsi-ls stops at the first one: log in until they are consumed
for i in 1 2 3 4 5 6 7 8; do
    iscsi-ls -s iscsi://127.0.0.1 > $LOGDIR/iscsi-ls.log 2>&1 && ! grep -q failed $LOGDIR/iscsi-ls.log && break
done
cmdout cat $LOGDIR/iscsi-ls.log
# the tcm_loop disk of a LUN: /dev/sdX and /dev/sgN
loop_wwn() { cowctl --json export list | python3 -c "import json,sys
print([e['target'] for e in json.load(sys.stdin) if e['lun'] == '$POOL/$1' and e['fabric'] == 'loopback'][0])"; }
declare -A DEV SG
for l in $LUNS; do
    w=$(loop_wwn $l) || die "no loopback export of $l"
    wait_for 20 loop_dev "$w" 0 > /dev/null || die "no /dev/sdX for $l"
    DEV[$l]=$(loop_dev "$w" 0); SG[$l]=$(loop_dev "$w" 0 scsi_generic)
done
out "The same LUNs through tcm_loop (the measurements below use these local disks):"
for l in $LUNS; do out "$(printf '    %-16s %-9s %s' $POOL/$l ${DEV[$l]} ${SG[$l]})"; done

# ------------------------------------------------------------------ VAAI status
A=${SG[vm1]}
header "2. VAAI status of $POOL/vm1: what ESXi would conclude, and the device fields behind it"
out "\$ cowctl vaai status $POOL/vm1"
cmdout cowctl vaai status $POOL/vm1
out "What the device answers (read with SG_IO, as an ESXi host probes it):"
cmdout eval "$SGIO vaai $A | grep -E 'esxcli|NOT MET'"
out "\$ sg_vpd -p bl $A   (Block Limits: ATS and WRITE SAME/UNMAP sizes)"
cmdout eval "sg_vpd -p bl $A | grep -iE 'compare and write|write same length|unmap lba count|unmap granularity:'"
out "\$ sg_vpd -p lbpv $A   (Logical Block Provisioning: thin, UNMAP, WRITE SAME with UNMAP)"
cmdout eval "sg_vpd -p lbpv $A | grep -E 'LBPU|LBPWS|LBPRZ|Provisioning type'"
out "\$ sg_vpd -p tpc $A   (Third-party Copy: EXTENDED COPY limits)"
cmdout eval "sg_vpd -p tpc $A | grep -iE 'extended copy|block -> block|maximum segment length'"
out "\$ sg_readcap -l $A   (thin provisioning enabled, unmapped blocks read as zeros)"
cmdout eval "sg_readcap -l $A | grep -iE 'lbpme|logical block length'"
out "\$ sg_opcodes $A   (the VAAI opcodes among the supported commands)"
cmdout eval "sg_opcodes $A | grep -E '^ *(83|84|89|93|42|41)[ ,]'"

# ------------------------------------------------------------------ clone and zero
header "3. Clone and eager-zero a ${SM} MiB \"VMDK\": VAAI offload vs the data path"
out "Writing ${SM} MiB of random data into $POOL/vm1 (the VMDK to clone) ..."
step fill $SGIO fill ${DEV[vm1]} 0 $SB || die "fill"
pool_alloc() { cow_pool_field $POOL allocated; }
declare -A T IB PS
# timed CMD... : run CMD, its wall-clock seconds to $W/secs
timed() { local t0 rc; t0=$(now); "$@"; rc=$?; elapsed $t0 > $W/secs; return $rc; }
# measure KEY PASSTHROUGH_BYTES DEVS CMD... : time CMD; bytes over the initiator
# path (block layer sectors of DEVS + data-out of SG_IO commands) and pool growth
measure() {
    local key=$1 pt=$2 devs=$3 t0 b0=0 b1=0 p0 d; shift 3
    for d in $devs; do b0=$(( b0 + $(blk_bytes $d) )); done
    p0=$(pool_alloc)
    step $key timed "$@" || die "$key"
    T[$key]=$(cat $W/secs)
    for d in $devs; do b1=$(( b1 + $(blk_bytes $d) )); done
    IB[$key]=$(( b1 - b0 + pt )); PS[$key]=$(( $(pool_alloc) - p0 ))
}
NX=$(( S / (16 * MIB) ))                     # XCOPY commands, 16 MiB each
out "clone, data path: dd reads vm1 and writes vm1-dd (4 MiB O_DIRECT) ..."
measure clone-dd 0 "${DEV[vm1]} ${DEV[vm1-dd]}" \
    dd if=${DEV[vm1]} of=${DEV[vm1-dd]} bs=4M count=$(( S / (4 * MIB) )) iflag=direct oflag=direct status=none
out "clone, offload: vm1 -> vm1-xcopy, $NX EXTENDED COPY commands of one 16 MiB segment each"
out "  (what ESXi sends with DataMover.MaxHWTransferSize=16384), from one process ..."
# parameter list per command: 16 header + 2 x 32 CSCD + 28 segment descriptor
measure clone-xcopy $(( NX * 108 )) "${DEV[vm1]} ${DEV[vm1-xcopy]}" \
    $SGIO loop ${SG[vm1]} xcopy $NX 0 32768 --dst ${SG[vm1-xcopy]} --dst-lba 0
# the loop's own time, without python's start-up (one process for all commands, as ESXi has)
T[clone-xcopy]=$(sgio_field loop_secs "$(ls $LOGDIR/*-clone-xcopy.log | tail -1)")
step clone-equal $SGIO same ${DEV[vm1]} 0 0 $SB --dev2 ${DEV[vm1-xcopy]} --sample 16 || die "the XCOPY clone differs"
step clone-dd-equal $SGIO same ${DEV[vm1]} 0 0 $SB --dev2 ${DEV[vm1-dd]} --sample 16 || die "the dd clone differs"
out "zero, data path: dd writes ${SM} MiB of zeros to zero-dd (4 MiB O_DIRECT) ..."
measure zero-dd 0 "${DEV[zero-dd]}" \
    dd if=/dev/zero of=${DEV[zero-dd]} bs=4M count=$(( S / (4 * MIB) )) oflag=direct status=none
out "zero, offload: $SM WRITE SAME(16) commands of 1 MiB to zero-ws, 16 in flight as ESXi keeps them ..."
measure zero-ws $(( SM * 512 )) "${DEV[zero-ws]}" $SGIO loop ${SG[zero-ws]} ws16 $SM 0 2048 --qd 16
# the loop's own time, without python's start-up (one process for all commands, as ESXi has)
T[zero-ws]=$(sgio_field loop_secs "$(ls $LOGDIR/*-zero-ws.log | tail -1)")
step zero-read-zero $SGIO zero ${DEV[zero-ws]} 0 $SB --sample 16 || die "zero-ws does not read as zeros"
step zero-dd-read-zero $SGIO zero ${DEV[zero-dd]} 0 $SB --sample 16 || die "zero-dd does not read as zeros"
out "(both clones compared with the source, both zeroed disks read back as zeros: sampled, 16 x 1 MiB each)"

# ------------------------------------------------------------------ the table
hb() { # human bytes
    awk -v b="$1" 'BEGIN { s = b < 0 ? "-" : ""; if (b < 0) b = -b
        if (b >= 1073741824) printf "%s%.2f GiB", s, b / 1073741824
        else if (b >= 1048576) printf "%s%.1f MiB", s, b / 1048576
        else if (b >= 1024) printf "%s%.1f KiB", s, b / 1024
        else printf "%s%d B", s, b }'
}
ratio() { awk -v a="${T[$1]}" -v b="${T[$2]}" 'BEGIN { if (b > 0) printf "%.0fx", a / b; else print "n/a" }'; }
row() { printf '%-8s %-36s %9.2f s  %12s  %12s' "$1" "$2" "${T[$3]}" "$(hb ${IB[$3]})" "$(hb ${PS[$3]})"; }
header "4. Result (${SM} MiB; TCG emulation makes absolute times slow: the ratios are the point)"
out "$(printf '%-8s %-36s %11s  %12s  %12s' what how time 'initiator I/O' 'pool space')"
out "$(row clone 'dd read + write (data path)' clone-dd)"
out "$(row clone 'EXTENDED COPY, 16 MiB/cmd (VAAI)' clone-xcopy)   $(ratio clone-dd clone-xcopy) faster"
out "$(row zero 'dd of zeros (data path)' zero-dd)"
out "$(row zero 'WRITE SAME(16), 1 MiB/cmd x16 (VAAI)' zero-ws)   $(ratio zero-dd zero-ws) faster"
out "initiator I/O: bytes between initiator and target (data read and written; for VAAI, only the"
out "commands' parameter data). pool space: what the pool allocated for the operation. The XCOPY"
out "clone shares vm1's extents (copy-on-write): nothing is copied until either LUN is written;"
out "zeros written by dd take real space, WRITE SAME of zeros leaves the disk thin. An offloaded"
out "command costs about the same whatever the size it names; the data path costs per byte."
out ""
out "\$ cowctl pool show $POOL"
cmdout cowctl pool show $POOL
out "\$ cowctl vaai status $POOL/vm1   (the handler's counters: the EXTENDED COPY commands went to vm1)"
cmdout cowctl vaai status $POOL/vm1

teardown
finish
