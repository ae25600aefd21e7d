#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Guest half of bench/e2e/side-by-side.sh (runs inside the e2e VM).
#
# The two experiments cowstore exists for, on LIO fileio and on cowstore,
# through tcm_loop, in one VM run:
#   clone a "VMDK" of SIZE: EXTENDED COPY with sg_xcopy, one segment of 4 MiB
#       (ESXi's default DataMover.MaxHWTransferSize) and of 16 MiB (its maximum)
#       per command, vs dd through the initiator
#   eager-zero SIZE: WRITE SAME(16) of zeros, 1 MiB per command, one at a
#       time and 16 in flight (ESXi's data mover keeps several outstanding),
#       vs dd of /dev/zero through the initiator
# and, for each, the bytes that crossed the initiator path (LIO's per-LUN
# port statistics), the space the backing store consumed, and each backend's
# fixed cost per SCSI command (TEST UNIT READY from one process), which bounds
# what any offload can gain under emulation.
# Then, on cowstore only, ESXi's clone shape at its queue depth (run_qd below):
# 4 MiB single-segment EXTENDED COPY sent to the destination LU, 1/8/16/32 in
# flight, beside TEST UNIT READY at the same depth and dd of the same bytes,
# with the pool on ext4 (fdatasync costs something there), and 32 in flight
# again with other tcmu-runner worker thread counts per LUN.
# E2E_BENCH_ONLY=qd runs that part alone (minutes less of TCG).
# Under TCG absolute times mean little: the ratios are the result.
. /e2e-out/e2e.env                            # E2E_REPO: where the checkout is
. "$E2E_REPO/tests/e2e/guest/lib.sh"
. "$E2E_DIR/guest/cowstore.sh"
SGIO="python3 $E2E_DIR/guest/sgio.py"
GIB=$((1 << 30)); MIB=$((1 << 20))
S=$(( ${E2E_BENCH_SIZE_GIB:-4} * GIB ))       # the VMDK
SB=$(( S / 512 ))                              # in blocks
BENCH=$E2E_OUT/bench.txt; : > $BENCH
ONLY=${E2E_BENCH_ONLY:-}                       # "" (everything) or qd
say "side-by-side: VMDK ${E2E_BENCH_SIZE_GIB:-4} GiB${ONLY:+, only $ONLY}"

# fileio's zero LUN keeps 3 x S of written zeros; the clone LUN 3 x S of data;
# run_qd's pool on this ext4 holds 2 x S of data
if [ "$ONLY" = qd ]; then step scratch mk_scratch $(( 2 * S + S / 2 + GIB ))
else step scratch mk_scratch $(( 3 * S + S / 2 + GIB )); fi

# ---------------------------------------------------------------- helpers
# port_mb WWN LUN read|write : MiB LIO counted on the LUN's port (initiator path)
port_mb() { cat $CFS/loopback/$1/tpgt_1/lun/lun_$2/statistics/scsi_tgt_port/$3_mbytes 2>/dev/null || echo 0; }
file_bytes() { echo $(( $(stat -c %b "$1") * 512 )); }
# fill DEV : the source VMDK [0,S), non-zero everywhere (64 MiB of random data repeated)
fill() { $SGIO fill $1 0 $SB; }
# measure LABEL WWN LUN DEV SPACE_FN PT_BYTES CMD... : run CMD; record seconds,
# bytes over the initiator path (blk_bytes for dd + PT_BYTES, the data-out of
# the passthrough commands we send),
# MiB LIO counted on the LUN's port (for LIO fileio this includes XCOPY's
# internal reads and writes) and bytes the backing store grew by. When CMD is
# an sgio loop, its own loop time is used (starting python costs ~0.5 s here).
declare -A T
measure() {
    local label=$1 wwn=$2 lun=$3 dev=$4 spacefn=$5 pt=$6; shift 6
    local r0 w0 s0 b0 t0 rc ini port sp loop
    r0=$(port_mb $wwn $lun read); w0=$(port_mb $wwn $lun write); s0=$($spacefn); b0=$(blk_bytes $dev)
    t0=$(now)
    step "$label" "$@"; rc=$?
    T[$label]=$(elapsed $t0)
    loop=$(sgio_field loop_secs "$(_logfile "$label")")
    [ -n "$loop" ] && T[$label]=$loop
    ini=$(( $(blk_bytes $dev) - b0 + pt ))
    port=$(( $(port_mb $wwn $lun read) - r0 + $(port_mb $wwn $lun write) - w0 ))
    sp=$(( $($spacefn) - s0 ))
    printf '  %-26s %8.2f s  initiator %13d B  LUN port %6d MiB  store %+13d B\n' \
        "$label" "${T[$label]}" "$ini" "$port" "$sp" | tee -a $BENCH
    return $rc
}
# floor LABEL SG : a backend's fixed cost per command: 2000 TEST UNIT READYs,
# one at a time and 16 in flight (milliseconds per command into T)
floor() {
    local q ms
    for q in 1 16; do
        step "$1-tur-qd$q" $SGIO loop $2 tur 2000 --qd $q
        ms=$(sgio_field per_cmd_ms "$(_logfile "$1-tur-qd$q")")
        T[$1-tur-qd$q]=${ms:-}
    done
    printf '  %-26s %8s ms per command one at a time, %s ms with 16 in flight\n' \
        "$1 TEST UNIT READY" "${T[$1-tur-qd1]:-?}" "${T[$1-tur-qd16]:-?}" | tee -a $BENCH
}
dd_clone() { dd if=$1 of=$1 bs=4M skip=0 seek=$S count=$S iflag=direct,count_bytes oflag=direct,seek_bytes status=none; }
# sg_xcopy DEV DST_BLOCK BLOCKS_PER_COMMAND : one process, one segment per command
xcopy_clone() { sg_xcopy if=$1 of=$1 bs=512 bpt=$3 id_usage=disable skip=0 seek=$2 count=$SB; }
# give a range back (fileio: emulate_tpu punches the file; cowstore: UNMAP)
discard() { blkdiscard -o $(( $2 * 512 )) -l $S $1; }
dd_zero() { dd if=/dev/zero of=$1 bs=4M seek=$2 count=$S iflag=count_bytes oflag=direct,seek_bytes status=none; }
# ws_zero SG FIRST_BLOCK QD : 1 MiB WRITE SAME(16) of zeros over S
ws_zero() { $SGIO loop $1 ws16 $(( S / MIB )) $2 2048 --qd $3; }
# verification samples 64 x 1 MiB per range: reading and comparing GiBs under TCG
# takes minutes (E2E_BENCH_VERIFY_ALL=1 compares everything)
SAMPLE=$([ -n "${E2E_BENCH_VERIFY_ALL:-}" ] && echo 0 || echo 64)
same() { $SGIO same $1 0 $2 $SB --sample $SAMPLE; }
zeros_ok() { $SGIO zero $1 0 $(( 3 * SB )) --sample $(( SAMPLE * 3 )); }

# run_backend NAME MAKE_BS_FN BS_DIR SPACE_FN DROP_FN
# clone LUN of 3 x S: [0,S) source VMDK; dd clone into [S,2S), checked and
# discarded; 4 MiB XCOPY clone into [2S,3S); 16 MiB XCOPY clone into [S,2S)
# (given back, so both offloads copy into free space, as into a new VMDK).
# zero LUN of 3 x S: dd zeros into [0,S), WRITE SAME one at a time into
# [S,2S), 16 in flight into [2S,3S).
run_backend() {
    local name=$1 mkbs=$2 bsdir=$3 spacefn=$4 dropfn=$5 wwn dev sg
    wwn=naa.5001405bbe0000$( [ $name = fileio ] && echo 10 || echo 20 )
    echo "== $name" | tee -a $BENCH
    step $name-bs-clone  $mkbs clone $(( 3 * S )) || return 1
    step $name-lun-clone mk_loop_lun $bsdir/clone $wwn 0 || return 1
    dev=$(loop_dev $wwn 0); sg=$(loop_dev $wwn 0 scsi_generic)
    floor $name $sg
    step $name-fill      fill $dev || return 1
    echo "  clone a $((S >> 30)) GiB VMDK inside one LUN:" | tee -a $BENCH
    # XCOPY parameter list per command (sg_xcopy): 16 header + 2 x 32 CSCD + 28 segment
    measure $name-clone-dd        $wwn 0 $dev $spacefn 0 dd_clone $dev
    step $name-clone-dd-equal     same $dev $SB
    step $name-clone-dd-discard   discard $dev $SB
    measure $name-clone-xcopy4    $wwn 0 $dev $spacefn $(( S / (4 * MIB) * 108 )) xcopy_clone $sg $(( 2 * SB )) 8192
    measure $name-clone-xcopy16   $wwn 0 $dev $spacefn $(( S / (16 * MIB) * 108 )) xcopy_clone $sg $SB 32768
    step $name-clone-xcopy4-equal  same $dev $(( 2 * SB ))
    step $name-clone-xcopy16-equal same $dev $SB
    # the same 16 MiB commands from one long-lived process, timed by its loop:
    # an ESXi host starts no program per clone (sg_xcopy's start-up and its
    # INQUIRY/READ CAPACITY/operating-parameter commands cost ~0.1 s here)
    step $name-clone-xcopy16-discard discard $dev $SB
    measure $name-clone-xcopy16-loop $wwn 0 $dev $spacefn $(( S / (16 * MIB) * 76 )) \
        $SGIO loop $sg xcopy $(( S / (16 * MIB) )) 0 32768 --dst-lba $SB
    step $name-clone-xcopy16-loop-equal same $dev $SB
    rm_loop_lun $wwn 0; rm_backstore $bsdir/clone; $dropfn clone
    step $name-bs-zero   $mkbs zero $(( 3 * S )) || return 1
    step $name-lun-zero  mk_loop_lun $bsdir/zero $wwn 1 || return 1
    dev=$(loop_dev $wwn 1); sg=$(loop_dev $wwn 1 scsi_generic)
    echo "  eager-zero $((S >> 30)) GiB:" | tee -a $BENCH
    # WRITE SAME data-out: one 512-byte block per command
    measure $name-zero-dd      $wwn 1 $dev $spacefn 0 dd_zero $dev 0
    measure $name-zero-ws      $wwn 1 $dev $spacefn $(( S / MIB * 512 )) ws_zero $sg $SB 1
    measure $name-zero-ws-qd16 $wwn 1 $dev $spacefn $(( S / MIB * 512 )) ws_zero $sg $(( 2 * SB )) 16
    step $name-zeros-read-zero zeros_ok $dev
    rm_loop_lun $wwn 1; rm_backstore $bsdir/zero; $dropfn zero
}

# ---------------------------------------------------------------- queue depth
# run_qd: ESXi's clone shape at ESXi's queue depth, on cowstore. Two LUNs of S
# in one copy group, exported as LUNs 0 (source) and 1 (destination) of one
# tcm_loop target; the source filled with data. Every EXTENDED COPY is 4 MiB,
# one block-to-block segment, sent to the destination LU (as ESXi sends it),
# from one process keeping Q commands in flight (sgio.py loop --qd Q); the
# destination is given back (UNMAP) before each run, so each copies into free
# space. Beside it: TEST UNIT READY at the same Q (the per-command floor of
# kernel + TCMU ring + tcmu-runner) and dd of the same bytes through the
# initiator. The pool lives on ext4 (E2E_BENCH_QD_POOL_FS=tmpfs: on tmpfs,
# where fdatasync is free) because with the write cache off every XCOPY is a
# durable commit, and how many commits share one fdatasync is the question.
# Q = 1, 8, 16, 32 with the handler's defaults (asynchronous completion, 8
# pipeline workers per LUN), then Q = 32 with each entry of
# E2E_BENCH_QD_THREADS (tcmu-runner restarted with COWSTORE_THREADS_PER_LUN):
# N = N pipeline workers; syncN = COWSTORE_COMPLETION=sync with N runner
# workers, each sleeping through its own command's commit.
# Each XCOPY run is repeated untimed under strace to count tcmu-runner's
# fdatasyncs per command (E2E_BENCH_QD_STRACE=0 skips that); the handler's
# own counters are read too, and any whose name has "sync" is reported.
QD_LIST=${E2E_BENCH_QDS:-"1 8 16 32"}
QD_THREADS=${E2E_BENCH_QD_THREADS:-"8 32 sync32 sync16 8"}
QD_TURS=${E2E_BENCH_QD_TURS:-1000}              # TEST UNIT READYs per depth
QD_FS=${E2E_BENCH_QD_POOL_FS:-ext4}
# qd_counters POOL/LUN : that LUN's handler counters (cowctl --json top: JSON
# Lines, one sample a line, its LUNs under "luns"), one "key value" a line;
# nothing if the control socket does not answer
qd_counters() {
    local tool; tool=$(cow_tool) || return 0
    timeout 20 "$tool" --json top --count 1 --interval 0.1 2>/dev/null | python3 -c '
import json, sys
rows = []
for line in sys.stdin:
    try:
        rows = json.loads(line).get("luns") or []
    except (ValueError, AttributeError):
        pass
for r in rows:
    if r.get("lun") == sys.argv[1]:
        for k, v in sorted((r.get("counters") or {}).items()):
            print(k, v)
' "$1"
}
# qd_delta BEFORE AFTER KEYREGEX : summed difference of the matching counters
qd_delta() {
    awk -v re="$3" 'NR == FNR { if ($1 ~ re) b[$1] = $2; next } $1 ~ re { d += $2 - b[$1]; n++ } END { if (n) print d }' \
        <(printf '%s\n' "$1") <(printf '%s\n' "$2")
}
# qd_restart N|syncN|default : tcmu-runner again with N pipeline workers per
# LUN, or synchronous completion with N runner workers per LUN
qd_restart() {
    stop_runner
    case $1 in
        default) unset COWSTORE_THREADS_PER_LUN COWSTORE_COMPLETION ;;
        sync*) export COWSTORE_COMPLETION=sync COWSTORE_THREADS_PER_LUN=${1#sync} ;;
        *) unset COWSTORE_COMPLETION; export COWSTORE_THREADS_PER_LUN=$1 ;;
    esac
    start_runner --handler-path $W/handlers || return 1
    unset COWSTORE_THREADS_PER_LUN COWSTORE_COMPLETION
    # the runner reopens both backstores; wait until the destination answers
    wait_for 30 $SGIO cmd $QD_DSG 000000000000 --expect GOOD > /dev/null || return 1
    sleep 1
    echo "tcmu-runner threads: $(ls /proc/$RUNNER_PID/task | wc -l) (2 LUNs open)"
}
# qd_strace_count Q OUT : the XCOPY run again with strace attached to every
# thread of tcmu-runner, counting its fdatasync/fsync calls (written to OUT).
# A separate pass: ptrace stops slow every syscall, so it is not timed.
qd_strace_count() {
    local q=$1 out=$2 n=$(( S / (4 * MIB) )) spid rc
    command -v strace > /dev/null || { echo "strace not installed"; return 1; }
    blkdiscard $QD_DST || return 1
    strace -f -c -e trace=fdatasync,fsync -o "$out" -p $RUNNER_PID & spid=$!
    sleep 3                                    # attached to every thread
    $SGIO loop $QD_DSG xcopy $n 0 8192 --src $QD_SSG --dst-lba 0 --qd $q; rc=$?
    kill -INT $spid; wait $spid
    cat "$out"
    return $rc
}
# qd_run LABEL Q : one 4 MiB XCOPY run into the emptied destination, the
# handler's counters around it; then the strace pass counting fdatasyncs
declare -A QDMS QDSY QDFS
qd_run() {
    local label=$1 q=$2 n=$(( S / (4 * MIB) )) c0 c1 ms sy cmds f
    step $label-discard blkdiscard $QD_DST || return 1
    c0=$(qd_counters bench-qd/dst)
    step $label $SGIO loop $QD_DSG xcopy $n 0 8192 --src $QD_SSG --dst-lba 0 --qd $q
    ms=$(sgio_field per_cmd_ms "$(_logfile $label)")
    c1=$(qd_counters bench-qd/dst)
    cmds=$(qd_delta "$c0" "$c1" '^xcopy$')
    sy=$(qd_delta "$c0" "$c1" 'sync')
    QDMS[$label]=${ms:-}
    QDSY[$label]=$([ -n "$sy" ] && [ -n "$cmds" ] && [ "$cmds" -gt 0 ] && awk -v a=$sy -v b=$cmds 'BEGIN { printf "%.2f", a / b }' || echo "n/a")
    echo "$label: XCOPY counted by the handler ${cmds:-?} of $n; its sync counters: ${sy:-none}" >> "$(_logfile $label)"
    [ "${E2E_BENCH_QD_STRACE:-1}" = 1 ] || return 0
    f=$W/log/$label.strace
    step $label-strace qd_strace_count $q $f
    QDFS[$label]=$(awk -v n=$n '$NF == "fdatasync" || $NF == "fsync" { c += $4 } END { if (n) printf "%.2f", c / n }' $f 2>/dev/null)
}
run_qd() {
    local wwn=naa.5001405bbe000030 q t dd_ms n=$(( S / (4 * MIB) )) tur
    echo "== cowstore: 4 MiB EXTENDED COPY at ESXi's queue depth (pool on $QD_FS)" | tee -a $BENCH
    stop_runner
    # the first half's pool (its LUNs are gone) would keep its data in RAM
    [ -z "$ONLY" ] && rm -f "$COWSTORE_POOL_DIR/bench"
    if [ "$QD_FS" = ext4 ]; then export COWSTORE_POOL_DIR=$W/qd-pools
    else export COWSTORE_POOL_DIR=/run/cowstore-qd-pools; fi
    E2E_POOL_FS=$QD_FS step qd-pool cow_pool_create bench-qd $(( 3 * S )) || return 1
    step qd-runner start_runner --handler-path $W/handlers || return 1
    step qd-bs-src cow_bs 11 src $S bench-qd src esx || return 1
    step qd-bs-dst cow_bs 11 dst $S bench-qd dst esx || return 1
    step qd-lun-src mk_loop_lun $CFS/core/user_11/src $wwn 0 || return 1
    step qd-lun-dst mk_loop_lun $CFS/core/user_11/dst $wwn 1 || return 1
    QD_SRC=$(loop_dev $wwn 0); QD_SSG=$(loop_dev $wwn 0 scsi_generic)
    QD_DST=$(loop_dev $wwn 1); QD_DSG=$(loop_dev $wwn 1 scsi_generic)
    # what could bound the batch, as the kernel has it
    {
        echo "  limits: destination sd queue_depth $(cat /sys/block/$(basename $QD_DST)/device/queue_depth 2>/dev/null)," \
             "nr_requests $(cat /sys/block/$(basename $QD_DST)/queue/nr_requests 2>/dev/null)," \
             "tcm_loop can_queue $(cat /sys/block/$(basename $QD_DST)/device/../../scsi_host/*/can_queue 2>/dev/null | head -1)"
        local a v line="  TCMU backstore attributes:"
        for a in hw_queue_depth queue_depth max_data_area_mb cmd_ring_size_mb data_pages_per_blk cmd_time_out qfull_time_out hw_max_sectors; do
            v=$(cat $CFS/core/user_11/dst/attrib/$a 2>/dev/null) && line+=" $a=$v"
        done
        echo "$line"
        echo "  handler counters of the destination LUN: $(qd_counters bench-qd/dst | awk '{ printf "%s ", $1 }')"
    } | tee -a $BENCH
    step qd-fill $SGIO fill $QD_SRC 0 $SB || return 1
    # dd of the same bytes, LU to LU through the initiator, into free space
    local t0; t0=$(now)
    step qd-dd dd if=$QD_SRC of=$QD_DST bs=4M count=$S iflag=direct,count_bytes oflag=direct status=none
    dd_ms=$(echo "scale=3; $(elapsed $t0) * 1000 / $n" | bc)
    step qd-dd-equal $SGIO same $QD_SRC 0 0 $SB --dev2 $QD_DST --sample $SAMPLE
    step qd-threads-default qd_restart default || return 1
    for q in $QD_LIST; do
        step qd-tur-qd$q $SGIO loop $QD_DSG tur $QD_TURS --qd $q
        tur=$(sgio_field per_cmd_ms "$(_logfile qd-tur-qd$q)"); QDMS[tur-qd$q]=${tur:-}
        qd_run qd-xcopy-qd$q $q
    done
    step qd-xcopy-equal $SGIO same $QD_SRC 0 0 $SB --dev2 $QD_DST --sample $SAMPLE
    # an entry may come twice (e.g. "8 32 sync32 sync16 8"): repeats show the noise
    local i=0
    for t in $QD_THREADS; do
        i=$((i + 1))
        step qd-threads-$i-$t qd_restart $t || continue
        step qd-s$i-t$t-tur-qd32 $SGIO loop $QD_DSG tur $QD_TURS --qd 32
        tur=$(sgio_field per_cmd_ms "$(_logfile qd-s$i-t$t-tur-qd32)"); QDMS[s$i-tur-qd32]=${tur:-}
        qd_run qd-s$i-t$t-xcopy-qd32 32
        QDMS[s$i]=${QDMS[qd-s$i-t$t-xcopy-qd32]:-}; QDFS[s$i]=${QDFS[qd-s$i-t$t-xcopy-qd32]:-}
        QDSY[s$i]=${QDSY[qd-s$i-t$t-xcopy-qd32]:-}
    done
    step qd-t-equal $SGIO same $QD_SRC 0 0 $SB --dev2 $QD_DST --sample $SAMPLE
    # table: per command, ratio dd (same 4 MiB) / XCOPY
    r() { [ -n "${QDMS[$1]:-}" ] && awk -v d="$dd_ms" -v x="${QDMS[$1]}" 'BEGIN { printf "1/%.0f", d / x }' || echo "n/a"; }
    {
    echo "  dd LU to LU through the initiator, 4 MiB O_DIRECT: $dd_ms ms per 4 MiB ($n x 4 MiB)"
    printf '  %-34s %9s %9s %9s %12s %12s\n' "4 MiB XCOPY to the destination" "ms/cmd" "TUR ms" "XCOPY/dd" "fdatasync/cmd" "counter/cmd"
    for q in $QD_LIST; do
        printf '  %-34s %9s %9s %9s %12s %12s\n' "Q=$q, default worker threads" "${QDMS[qd-xcopy-qd$q]:-?}" \
            "${QDMS[tur-qd$q]:-?}" "$(r qd-xcopy-qd$q)" "${QDFS[qd-xcopy-qd$q]:-?}" "${QDSY[qd-xcopy-qd$q]:-?}"
    done
    i=0
    for t in $QD_THREADS; do
        i=$((i + 1))
        printf '  %-34s %9s %9s %9s %12s %12s\n' "Q=32, $t workers per LUN" "${QDMS[s$i]:-?}" \
            "${QDMS[s$i-tur-qd32]:-?}" "$(r s$i)" "${QDFS[s$i]:-?}" "${QDSY[s$i]:-?}"
    done
    echo "  (ms/cmd: sgio.py's loop time / commands. fdatasync/cmd: tcmu-runner's fdatasync+fsync"
    echo "   calls per XCOPY, counted by strace in a second, untimed pass of the same run."
    echo "   counter/cmd: the handler's own counters whose name has 'sync' per XCOPY it counted"
    echo "   (n/a: this handler exposes none).)"
    } | tee -a $BENCH
    rm_loop_lun $wwn 1; rm_loop_lun $wwn 0
    rm_backstore $CFS/core/user_11/dst; rm_backstore $CFS/core/user_11/src
}

# ---------------------------------------------------------------- LIO fileio
fio_mk() { mk_fileio_bs 9 $1 $W/fio-$1.img $2 emulate_tpu=1 emulate_tpws=1; }
fio_space() { local t=0 f; for f in $W/fio-*.img; do [ -f $f ] && t=$(( t + $(file_bytes $f) )); done; echo $t; }
fio_drop() { rm -f $W/fio-$1.img; }
[ -z "$ONLY" ] && run_backend fileio fio_mk $CFS/core/fileio_9 fio_space fio_drop

# ---------------------------------------------------------------- cowstore
if [ ! -f "$COW_SO" ]; then
    skip cowstore-half "handler_cowstore.so not found in ${COW_HANDLER_DIR:-?}"
    echo "== cowstore: SKIPPED (handler_cowstore.so not built in ${COW_HANDLER_DIR:-?})" | tee -a $BENCH
else
    # tcmu-runner's own qcow handler beside ours: its TEST UNIT READY is the
    # daemon's floor (answered on the device's command thread, no worker hop)
    mkdir -p $W/handlers
    ln -sf "$COW_SO" $W/handlers/
    ln -sf /usr/lib/x86_64-linux-gnu/tcmu-runner/handler_qcow.so $W/handlers/
    step runner-start start_runner --handler-path $W/handlers
    if [ -z "$ONLY" ]; then
    if step qcow-image qemu-img create -q -f qcow2 $W/ref.qcow2 64M &&
       step qcow-bs mk_user_bs 7 ref 67108864 qcow/$W/ref.qcow2 &&
       step qcow-lun mk_loop_lun $CFS/core/user_7/ref naa.5001405bbe000070 0; then
        echo "== tcmu-runner's own qcow handler (reference: the daemon's cost per command)" | tee -a $BENCH
        floor tcmu-qcow $(loop_dev naa.5001405bbe000070 0 scsi_generic)
        rm_loop_lun naa.5001405bbe000070 0; rm_backstore $CFS/core/user_7/ref
    fi
    step pool-create  cow_pool_create bench $(( 7 * S ))
    cow_mk() { cow_bs 9 $1 $2 bench $1; }
    cow_space() { cow_pool_bytes bench; }   # physical bytes of the pool file
    cow_drop() { cow_lun_delete bench $1; }
    run_backend cowstore cow_mk $CFS/core/user_9 cow_space cow_drop
    step pool-show cow_pool_show bench
    fi
    run_qd
fi
[ "$ONLY" = qd ] && { sed 's/^/E2E-NOTE /' $BENCH >> $RESULTS; finish; }

# ---------------------------------------------------------------- ratios
# ratio A B : T[A] / T[B]; per GiB when both are whole-S runs
ratio() { [ -n "${T[$1]:-}" ] && [ -n "${T[$2]:-}" ] && awk -v a="${T[$1]}" -v b="${T[$2]}" 'BEGIN { printf "%.1fx\n", a / b }' || echo "n/a"; }
# verdict A B : ratio and whether it reaches the 100x goal
verdict() {
    local r; r=$(ratio "$1" "$2")
    case "$r" in n/a) echo "$r" ;; *) awk -v r="${r%x}" 'BEGIN { exit !(r >= 100) }' && echo "$r  (goal met)" || echo "$r  (goal NOT met)" ;; esac
}
# ceiling DD_LABEL BYTES_PER_CMD TUR_LABEL : the most any offload could gain here,
# if the target did no work at all: dd time per command's worth of bytes / TUR
ceiling() {
    [ -n "${T[$1]:-}" ] && [ -n "${T[$3]:-}" ] || { echo "n/a"; return; }
    awk -v t="${T[$1]}" -v b="$2" -v s="$S" -v tur="${T[$3]}" 'BEGIN { printf "%.1fx\n", t * 1000 * b / s / tur }'
}
{
echo "== ratios (higher = offload faster; goal for cowstore >= 100x)"
echo "  cowstore clone: dd / XCOPY 16 MiB       $(verdict cowstore-clone-dd cowstore-clone-xcopy16)"
echo "    the same, one long-lived process      $(verdict cowstore-clone-dd cowstore-clone-xcopy16-loop)"
echo "  cowstore clone: dd / XCOPY 4 MiB        $(verdict cowstore-clone-dd cowstore-clone-xcopy4)"
echo "  cowstore zero:  dd / WRITE SAME x16     $(verdict cowstore-zero-dd cowstore-zero-ws-qd16)"
echo "  cowstore zero:  dd / WRITE SAME x1      $(verdict cowstore-zero-dd cowstore-zero-ws)"
echo "  clone XCOPY 16 MiB: fileio / cowstore   $(verdict fileio-clone-xcopy16 cowstore-clone-xcopy16)"
echo "    the same, one long-lived process      $(verdict fileio-clone-xcopy16-loop cowstore-clone-xcopy16-loop)"
echo "  clone XCOPY 4 MiB:  fileio / cowstore   $(verdict fileio-clone-xcopy4 cowstore-clone-xcopy4)"
echo "  zero WRITE SAME x16: fileio / cowstore  $(verdict fileio-zero-ws-qd16 cowstore-zero-ws-qd16)"
echo "  zero WRITE SAME x1:  fileio / cowstore  $(verdict fileio-zero-ws cowstore-zero-ws)"
echo "  fileio   clone: dd / XCOPY 16 MiB, 4 MiB  $(ratio fileio-clone-dd fileio-clone-xcopy16), $(ratio fileio-clone-dd fileio-clone-xcopy4)"
echo "  fileio   zero:  dd / WRITE SAME x16, x1   $(ratio fileio-zero-dd fileio-zero-ws-qd16), $(ratio fileio-zero-dd fileio-zero-ws)"
per_cmd() { [ -n "${T[$1]:-}" ] && awk -v t="${T[$1]}" -v n="$2" 'BEGIN { printf "%.3f ms", t * 1000 / n }' || echo "n/a"; }
echo "== cost per command on cowstore (the offload's own work is what exceeds TEST UNIT READY)"
echo "  TEST UNIT READY                         $(printf '%s' "${T[cowstore-tur-qd1]:-?}") ms, 16 in flight $(printf '%s' "${T[cowstore-tur-qd16]:-?}") ms"
echo "  WRITE SAME 1 MiB                        $(per_cmd cowstore-zero-ws $(( S / MIB ))), 16 in flight $(per_cmd cowstore-zero-ws-qd16 $(( S / MIB )))"
echo "  EXTENDED COPY 16 MiB (one process)      $(per_cmd cowstore-clone-xcopy16-loop $(( S / (16 * MIB) )))"
echo "  dd through the initiator, per MiB       zero $(per_cmd cowstore-zero-dd $(( S / MIB ))), clone $(per_cmd cowstore-clone-dd $(( S / MIB )))"
echo "== ceilings: roughly the ratio a target doing no work at all would reach over TCMU"
echo "   here (dd time for one command's bytes / cowstore's TEST UNIT READY, from one"
echo "   2000-command loop each: expect +-30 % of noise under TCG)"
echo "  clone 16 MiB per command, one at a time   $(ceiling cowstore-clone-dd $(( 16 * MIB )) cowstore-tur-qd1)"
echo "  clone 4 MiB per command, one at a time    $(ceiling cowstore-clone-dd $(( 4 * MIB )) cowstore-tur-qd1)"
echo "  zero 1 MiB per command, 16 in flight      $(ceiling cowstore-zero-dd $MIB cowstore-tur-qd16)"
echo "  zero 1 MiB per command, one at a time     $(ceiling cowstore-zero-dd $MIB cowstore-tur-qd1)"
echo "  (a TEST UNIT READY on tcmu-runner's own qcow handler costs $(printf '%s' "${T[tcmu-qcow-tur-qd1]:-?}") ms one at a time,"
echo "   $(printf '%s' "${T[tcmu-qcow-tur-qd16]:-?}") ms with 16 in flight: the daemon's floor, before any handler work)"
echo "  Each offloaded command pays the kernel, the TCMU ring and tcmu-runner's"
echo "  threads once (TEST UNIT READY above); LIO fileio runs in the kernel and"
echo "  pays far less. See tests/e2e/README.md."
} | tee -a $BENCH
sed 's/^/E2E-NOTE /' $BENCH >> $RESULTS
finish
