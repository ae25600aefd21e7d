#!/bin/bash
# Guest half of bench/e2e/side-by-side.sh (runs inside the e2e VM).
#
# The two experiments cowstore exists for, on LIO fileio and on cowstore,
# through tcm_loop, in one VM run:
#   clone a "VMDK" of SIZE: EXTENDED COPY (sg_xcopy, 4 MiB per command as ESXi
#       sends: bs=512 bpt=8192 id_usage=disable) vs dd through the initiator
#   eager-zero SIZE: WRITE SAME(16) of zeros, 1 MiB per command from one
#       process (guest/sgio.py) vs dd of /dev/zero through the initiator
# and, for each, the bytes that crossed the initiator path (LIO's per-LUN
# port statistics) and the space the backing store consumed.
# Under TCG absolute times mean little: the ratios are the result.
. /e2e-out/e2e.env                            # E2E_REPO: where the checkout is
. "$E2E_REPO/tests/e2e/guest/lib.sh"
. "$E2E_DIR/guest/cowstore.sh"
SGIO="python3 $E2E_DIR/guest/sgio.py"
GIB=$((1 << 30))
S=$(( ${E2E_BENCH_SIZE_GIB:-4} * GIB ))       # the VMDK
SB=$(( S / 512 ))                              # in blocks
BENCH=$E2E_OUT/bench.txt; : > $BENCH
say "side-by-side: VMDK ${E2E_BENCH_SIZE_GIB:-4} GiB"

step scratch mk_scratch $(( 3 * S + S / 2 + GIB ))

# ---------------------------------------------------------------- helpers
# port_mb WWN LUN read|write : MiB LIO counted on the LUN's port (initiator path)
port_mb() { cat $CFS/loopback/$1/tpgt_1/lun/lun_$2/statistics/scsi_tgt_port/$3_mbytes 2>/dev/null || echo 0; }
file_bytes() { echo $(( $(stat -c %b "$1") * 512 )); }
# fill DEV : the source VMDK [0,S), non-zero everywhere (64 MiB of random data repeated)
fill() { $SGIO fill $1 0 $SB; }
# initiator-path bytes: the block layer's sectors for dd (SG_IO passthrough is
# not counted there) plus the data-out of the passthrough commands we send
blk_bytes() { awk '{printf "%.0f\n", ($3 + $7) * 512}' /sys/block/$(basename $1)/stat; }
# measure LABEL WWN LUN DEV SPACE_FN PT_BYTES CMD... : run CMD; record seconds,
# bytes over the initiator path (block layer + PT_BYTES of passthrough data-out),
# MiB LIO counted on the LUN's port (for LIO fileio this includes XCOPY's
# internal reads and writes) and bytes the backing store grew by
declare -A T
measure() {
    local label=$1 wwn=$2 lun=$3 dev=$4 spacefn=$5 pt=$6; shift 6
    local r0 w0 s0 b0 t0 rc ini port sp
    r0=$(port_mb $wwn $lun read); w0=$(port_mb $wwn $lun write); s0=$($spacefn); b0=$(blk_bytes $dev)
    t0=$(now)
    step "$label" "$@"; rc=$?
    T[$label]=$(elapsed $t0)
    ini=$(( $(blk_bytes $dev) - b0 + pt ))
    port=$(( $(port_mb $wwn $lun read) - r0 + $(port_mb $wwn $lun write) - w0 ))
    sp=$(( $($spacefn) - s0 ))
    printf '  %-22s %8.2f s  initiator %13d B  LUN port %6d MiB  store %+13d B\n' \
        "$label" "${T[$label]}" "$ini" "$port" "$sp" | tee -a $BENCH
    return $rc
}
dd_clone() { dd if=$1 of=$1 bs=4M skip=0 seek=$S count=$S iflag=direct,count_bytes oflag=direct,seek_bytes status=none; }
xcopy_clone() { sg_xcopy if=$1 of=$1 bs=512 bpt=8192 id_usage=disable skip=0 seek=$(( 2 * SB )) count=$SB; }
# 16 MiB per command (ESXi's DataMover.MaxHWTransferSize maximum), over the dd clone
xcopy16_clone() { sg_xcopy if=$1 of=$1 bs=512 bpt=32768 id_usage=disable skip=0 seek=$SB count=$SB; }
dd_zero() { dd if=/dev/zero of=$1 bs=4M seek=$S count=$S iflag=count_bytes oflag=direct,seek_bytes status=none; }
ws_zero() { $SGIO loop $1 ws16 $(( S >> 20 )) 0 2048; }
# verification samples 64 x 1 MiB per range: reading and comparing GiBs under TCG
# takes minutes (E2E_BENCH_VERIFY_ALL=1 compares everything)
SAMPLE=$([ -n "${E2E_BENCH_VERIFY_ALL:-}" ] && echo 0 || echo 64)
clones_ok() { $SGIO same $1 0 $SB $SB --sample $SAMPLE && $SGIO same $1 0 $(( 2 * SB )) $SB --sample $SAMPLE; }
zeros_ok() { $SGIO zero $1 0 $(( 2 * SB )) --sample $SAMPLE; }

# run_backend NAME MAKE_BS_FN BS_DIR SPACE_FN DROP_FN
# one LUN of 3 x SIZE: [0,S) source VMDK, [S,2S) dd clone, [2S,3S) XCOPY clone;
# then, on a fresh LUN of 2 x SIZE: [0,S) WRITE SAME zero, [S,2S) dd zeros
run_backend() {
    local name=$1 mkbs=$2 bsdir=$3 spacefn=$4 dropfn=$5 wwn dev sg
    wwn=naa.5001405bbe0000$( [ $name = fileio ] && echo 10 || echo 20 )
    echo "== $name" | tee -a $BENCH
    step $name-bs-clone  $mkbs clone $(( 3 * S )) || return 1
    step $name-lun-clone mk_loop_lun $bsdir/clone $wwn 0 || return 1
    dev=$(loop_dev $wwn 0); sg=$(loop_dev $wwn 0 scsi_generic)
    step $name-fill      fill $dev || return 1
    echo "  clone a $((S >> 30)) GiB VMDK inside one LUN:" | tee -a $BENCH
    # XCOPY parameter list per 4 MiB command: 16 header + 2 x 32 CSCD + 28 segment
    measure $name-clone-dd    $wwn 0 $dev $spacefn 0 dd_clone $dev
    measure $name-clone-xcopy $wwn 0 $dev $spacefn $(( S / (4 << 20) * 108 )) xcopy_clone $sg
    measure $name-clone-xcopy16 $wwn 0 $dev $spacefn $(( S / (16 << 20) * 108 )) xcopy16_clone $sg
    step $name-clones-equal clones_ok $dev
    rm_loop_lun $wwn 0; rm_backstore $bsdir/clone; $dropfn clone
    step $name-bs-zero   $mkbs zero $(( 2 * S )) || return 1
    step $name-lun-zero  mk_loop_lun $bsdir/zero $wwn 1 || return 1
    dev=$(loop_dev $wwn 1); sg=$(loop_dev $wwn 1 scsi_generic)
    echo "  eager-zero $((S >> 30)) GiB:" | tee -a $BENCH
    measure $name-zero-dd $wwn 1 $dev $spacefn 0 dd_zero $dev
    measure $name-zero-ws $wwn 1 $dev $spacefn $(( S >> 20 << 9 )) ws_zero $sg
    step $name-zeros-read-zero zeros_ok $dev
    rm_loop_lun $wwn 1; rm_backstore $bsdir/zero; $dropfn zero
}

# ---------------------------------------------------------------- LIO fileio
fio_mk() { mk_fileio_bs 9 $1 $W/fio-$1.img $2 emulate_tpu=1 emulate_tpws=1; }
fio_space() { local t=0 f; for f in $W/fio-*.img; do [ -f $f ] && t=$(( t + $(file_bytes $f) )); done; echo $t; }
fio_drop() { rm -f $W/fio-$1.img; }
run_backend fileio fio_mk $CFS/core/fileio_9 fio_space fio_drop

# ---------------------------------------------------------------- cowstore
if [ ! -f "$COW_SO" ]; then
    skip cowstore-half "handler_cowstore.so not found in ${COW_HANDLER_DIR:-?}"
    echo "== cowstore: SKIPPED (handler_cowstore.so not built in ${COW_HANDLER_DIR:-?})" | tee -a $BENCH
else
    step runner-start start_runner --handler-path "$COW_HANDLER_DIR"
    step pool-create  cow_pool_create bench $(( 6 * S ))
    cow_mk() { cow_bs 9 $1 $2 bench $1; }
    cow_space() { cow_pool_bytes bench; }   # physical bytes of the pool file
    cow_drop() { cow_lun_delete bench $1; }
    run_backend cowstore cow_mk $CFS/core/user_9 cow_space cow_drop
    step pool-show cow_pool_show bench
fi

# ---------------------------------------------------------------- ratios
ratio() { [ -n "${T[$1]:-}" ] && [ -n "${T[$2]:-}" ] && echo "$(echo "scale=1; ${T[$1]} / ${T[$2]}" | bc)x" || echo "n/a"; }
{
echo "== ratios (higher = offload faster; goal for cowstore >= 100x)"
echo "  fileio   clone: dd / XCOPY            $(ratio fileio-clone-dd fileio-clone-xcopy)"
echo "  fileio   zero:  dd / WRITE SAME       $(ratio fileio-zero-dd fileio-zero-ws)"
echo "  cowstore clone: dd / XCOPY            $(ratio cowstore-clone-dd cowstore-clone-xcopy)"
echo "  cowstore zero:  dd / WRITE SAME       $(ratio cowstore-zero-dd cowstore-zero-ws)"
echo "  cowstore clone: dd / XCOPY 16 MiB     $(ratio cowstore-clone-dd cowstore-clone-xcopy16)"
echo "  clone XCOPY: fileio / cowstore        $(ratio fileio-clone-xcopy cowstore-clone-xcopy)"
echo "  zero WRITE SAME: fileio / cowstore    $(ratio fileio-zero-ws cowstore-zero-ws)"
echo "  (times include starting sg_xcopy / python; the 1 MiB WRITE SAME loop alone:"
echo "   $(grep -h '^sgio op=ws16' $LOGDIR/*-zero-ws.log 2>/dev/null | awk '{print $5, $6}' | tr '\n' ' '))"
echo "  Under TCG every SCSI command costs a fixed few hundred microseconds in the"
echo "  kernel and tcmu-runner, so an offload's ratio is bounded by (dd time per MiB)"
echo "  / (per-command cost): see tests/e2e/README.md."
} | tee -a $BENCH
sed 's/^/E2E-NOTE /' $BENCH >> $RESULTS
finish
