#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Suite "cowstore": handler_cowstore.so in Debian's stock tcmu-runner (the
# installed 1.5.4, or with run-e2e.sh --tcmu-runner bullseye/1.5.2-6 Debian
# 11's 1.5.2 with its own libtcmu), through real LIO (target_core_user),
# tcm_loop and iSCSI on 127.0.0.1.
#
#  1. every VAAI primitive with sg3_utils on tcm_loop disks, data verified
#     afterwards: sg_vpd (bl, lbpv, di, tpc), sg_readcap -l, sg_write_same
#     (pattern, --unmap, --16/--10, NDOB), sg_unmap, sg_get_lba_status,
#     sg_compare_and_write (success; miscompare with the byte offset in the
#     sense INFORMATION field), sg_xcopy inside one LUN and across two LUNs of
#     one copy group (refused outside it), the same with ddpt's xcopy (one XCOPY
#     per run: ddpt 0.97 repeats skip=/seek= in every further one), sg_copy_results,
#     sg_opcodes
#  2. per-command figures from one process (guest/sgio.py)
#  3. targetcli /backstores/user:cowstore over the guest's system D-Bus
#  4. persistence: restart tcmu-runner; SIGKILL it mid-write; every
#     acknowledged write must read back; the pool checks clean. A pool with
#     both superblock copies damaged: its backstore's enable fails, the pool
#     file is untouched, the runner serves on
#  5. thin provisioning through SG_IO: exhaustion (DATA PROTECT 27/07, acked data
#     intact, UNMAP gives space back), the soft-threshold unit attention 38/07
#     exactly once, also on a quiet LUN of the same pool; a 4096-byte-block LUN
#     (readcap, dd, WRITE SAME UNMAP, CAW)
#  6. several iSCSI initiators (distinct IQNs) copying at once with colliding
#     EXTENDED COPY list IDs in every LIST ID USAGE (guest/xcopy_sessions.c)
#  7. iscsi-test-cu families on cowstore and on LIO fileio side by side,
#     cowstore gated on tests/e2e/icu-baseline-cowstore.txt
# Exits 77 (skipped, with the reason) when handler_cowstore.so is not built.
. "$(dirname "$0")/../guest/lib.sh"
. "$E2E_DIR/guest/icu.sh"
. "$E2E_DIR/guest/cowstore.sh"
. "$E2E_DIR/guest/xcopy-sessions.sh"
SGIO="python3 $E2E_DIR/guest/sgio.py"
ACKW="python3 $E2E_DIR/guest/ackwriter.py"
CAW_50000=8900000000000000c350000000010000        # COMPARE AND WRITE, LBA 50000, 1 block

# zeros_at DEV LBA COUNT [LBA COUNT...] : every range reads back as zeros
zeros_at() { local d=$1; shift; while [ $# -ge 2 ]; do zeros $d $1 $2 || { echo "not zeros: $1+$2"; return 1; }; shift 2; done; }
# same_as_pat DEV FILE SRC_LBA COUNT [SRC_LBA COUNT...] [--at DST_LBA...] : the device's
# ranges equal the FILE's blocks (at the same LBAs, or at the --at LBAs, in order)
same_as_pat() {
    local d=$1 f=$2 src=() cnt=() dst=() i; shift 2
    while [ $# -ge 2 ] && [ "$1" != --at ]; do src+=($1); cnt+=($2); shift 2; done
    [ "${1:-}" = --at ] && { shift; dst=("$@"); }
    for i in "${!src[@]}"; do
        same_as $d ${dst[$i]:-${src[$i]}} ${cnt[$i]} <(dd if=$f bs=512 skip=${src[$i]} count=${cnt[$i]} status=none) \
            || { echo "differs: ${cnt[$i]} blocks at ${dst[$i]:-${src[$i]}} (file block ${src[$i]})"; return 1; }
    done
}

[ -f "$COW_SO" ] || skip_suite "handler_cowstore.so not found in ${COW_HANDLER_DIR:-?} (build it: cmake --preset default && cmake --build --preset default, or pass --handler-dir)"
say "suite cowstore: handler $COW_SO, pool dir $COWSTORE_POOL_DIR"
[ -x "$RUNNER_BIN" ] || skip_suite "no tcmu-runner executable (${RUNNER_BIN:-not installed})"
note "runner: $(runner_describe)"

# ------------------------------------------------------------ set-up
step scratch        mk_scratch 1500M
step dbus           start_dbus
step runner-start   start_runner --handler-path "$COW_HANDLER_DIR"
[ -n "${E2E_RUNNER_VERSION:-}" ] && step runner-version runner_is "$E2E_RUNNER_VERSION"
step handler-on-bus shows "user:cowstore" targetcli ls /backstores
# 1G: every pool of this suite fits the tmpfs under it (cow_pool_create checks), so
# no check meets the thin-on-thin unit attention except the one made for it below.
# E2E_P0_OPTS: cowctl options for this pool, which serves a, b and c (none: the
# defaults, a format 3 pool; CI's 1.5.2 run gives "--allocation-unit 1M --grain 1M",
# a format 2 pool).
step pool-create    cow_pool_create p0 1G ${E2E_P0_OPTS:-}
GIB=1073741824
step bs-a           cow_bs 1 a $GIB p0 a g1
step bs-b           cow_bs 1 b $GIB p0 b g1
step bs-c           cow_bs 1 c $((256 << 20)) p0 c          # no copy group
# one tcm_loop target, three LUNs (the nexus does not matter to TCMU: the
# handler sees no initiator; the copy group alone decides)
LW=naa.50014059c0000a00
step loop-a         mk_loop_lun $CFS/core/user_1/a $LW 0
step loop-b         mk_loop_lun $CFS/core/user_1/b $LW 1
step loop-c         mk_loop_lun $CFS/core/user_1/c $LW 2
A=$(loop_dev $LW 0); SA=$(loop_dev $LW 0 scsi_generic)
B=$(loop_dev $LW 1); SB=$(loop_dev $LW 1 scsi_generic)
C=$(loop_dev $LW 2); SC=$(loop_dev $LW 2 scsi_generic)
say "LUN a=$A ($SA) b=$B ($SB) c=$C ($SC)"
if [ -z "$A" ] || [ -z "$B" ] || [ -z "$C" ]; then
    say "LUNs did not appear; nothing else can run"; finish
fi

# ------------------------------------------------------------ what initiators see
step sg_inq-3pc     shows "3PC=1" sg_inq $A
step vaai-fields    $SGIO vaai $SA --require
step sg_vpd-bl      shows "Maximum compare and write length: [1-9]" sg_vpd -p bl $A
step sg_vpd-lbpv    bash -c "out=\$(sg_vpd -p lbpv $A); echo \"\$out\"
                      for f in 'LBPU\): 1' 'LBPWS\): 1' 'LBPWS10\): 1' 'LBPRZ\): 1' 'Provisioning type: 2'; do
                        grep -qE \"\$f\" <<< \"\$out\" || { echo \"missing: \$f\"; exit 1; }; done"
step sg_vpd-di      shows "designator type: NAA" sg_vpd -p di $A
step sg_vpd-tpc     sg_vpd -p tpc $A
step sg_readcap     shows "lbpme=1, lbprz=1" sg_readcap -l $A
step sg_readcap-a   shows "Last LBA=2097151" sg_readcap -l $A
step sg_opcodes     bash -c "out=\$(sg_opcodes $A); echo \"\$out\"
                      for op in '^ *83 ' '^ *84 ' '^ *89 ' '^ *93 ' '^ *41 ' '^ *42 ' '^ *9e +12'; do
                        grep -qiE \"\$op\" <<< \"\$out\" || { echo \"opcode not listed: \$op\"; exit 1; }; done"

# ------------------------------------------------------------ data path
step mk-pattern     dd if=/dev/urandom of=$W/pat bs=1M count=8 status=none
step dd-write       dd if=$W/pat of=$A bs=1M oflag=direct status=none
step dd-verify      same_as $A 0 16384 $W/pat
step fresh-zeros    zeros $A 16384 2048

# ------------------------------------------------------------ WRITE SAME
pattern_file $W/blk-ab 253 512
pattern_file $W/blk-cd 315 512
head -c 512 /dev/zero > $W/blk-00
step ws16-pattern   sg_write_same --16 --lba=40960 --num=2048 --in=$W/blk-ab $A
step ws16-verify    all_bytes $A 40960 2048 253
step ws16-edges     zeros_at $A 40959 1 43008 1
step ws10-pattern   sg_write_same --10 --lba=45056 --num=8 --in=$W/blk-cd $A
step ws10-verify    all_bytes $A 45056 8 315
# UNMAP bit over data written by dd: whole allocation units and unaligned ends
step ws16-unmap     sg_write_same --16 --unmap --lba=0 --num=2048 --in=$W/blk-00 $A
step ws16-unmap-z   zeros $A 0 2048
step ws16-unmap-odd sg_write_same --16 --unmap --lba=4097 --num=100 --in=$W/blk-00 $A
step ws16-odd-z     zeros $A 4097 100
step ws16-odd-keep  same_as_pat $A $W/pat 4096 1 4197 1
step ws10-unmap     sg_write_same --10 --unmap --lba=6144 --num=2048 --in=$W/blk-00 $A
step ws10-unmap-z   zeros $A 6144 2048
step ws16-ndob      sg_write_same --16 --ndob --lba=8192 --num=2048 $A
step ws16-ndob-z    zeros $A 8192 2048
step ws16-rest      same_as_pat $A $W/pat 10240 6144

# ------------------------------------------------------------ UNMAP, GET LBA STATUS
step sg_unmap       sg_unmap --force --lba=10240 --num=2048 $A
step unmap-z        zeros $A 10240 2048
step sg_unmap-odd   sg_unmap --force --lba=12289,12400 --num=10,3 $A
step unmap-odd-z    zeros_at $A 12289 10 12400 3
step unmap-keep     same_as_pat $A $W/pat 12299 101 12403 1981
step lba-status-dealloc shows "deallocated|unmapped" sg_get_lba_status --lba=10240 $A
step lba-status-mapped  shows "(^|[^a-z])mapped" sg_get_lba_status --lba=14336 $A

# ------------------------------------------------------------ COMPARE AND WRITE
# LBA 50000 was never written: it compares equal to zeros
cat $W/blk-00 $W/blk-ab > $W/caw-1
step caw-unwritten  sg_compare_and_write --in=$W/caw-1 --lba=50000 --num=1 $A
step caw-verify     all_bytes $A 50000 1 253
# miscompare: the compare half differs from the block (0xAB) at byte 100
cp $W/blk-ab $W/cmp-bad; printf '\x00' | dd of=$W/cmp-bad bs=1 seek=100 conv=notrunc status=none
cat $W/cmp-bad $W/blk-cd > $W/caw-bad
step caw-miscompare fails_with "miscompare" sg_compare_and_write --in=$W/caw-bad --lba=50000 --num=1 $A
step caw-sense-100  $SGIO cmd $SA $CAW_50000 --out $W/caw-bad --expect 0e/1d/00 --info 100
cp $W/blk-ab $W/cmp-bad2; printf '\x00' | dd of=$W/cmp-bad2 bs=1 seek=511 conv=notrunc status=none
cat $W/cmp-bad2 $W/blk-cd > $W/caw-bad2
step caw-sense-511  $SGIO cmd $SA $CAW_50000 --out $W/caw-bad2 --expect 0e/1d/00 --info 511
step caw-unchanged  all_bytes $A 50000 1 253
cat $W/blk-ab $W/blk-cd > $W/caw-2
step caw-success    $SGIO cmd $SA $CAW_50000 --out $W/caw-2 --expect GOOD
step caw-written    all_bytes $A 50000 1 315

# ------------------------------------------------------------ EXTENDED COPY
step mk-pattern2    dd if=/dev/urandom of=$W/pat2 bs=1M count=8 status=none
step pat2-write     dd if=$W/pat2 of=$A bs=1M seek=$((200000 * 512)) oflag=direct,seek_bytes status=none
step xcopy-same     sg_xcopy if=$SA of=$SA bs=512 bpt=8192 skip=200000 seek=300000 count=16384 id_usage=disable
step xcopy-same-v   same_as $A 300000 16384 $W/pat2
step xcopy-src-kept same_as $A 200000 16384 $W/pat2
# LIST ID USAGE: as sg_xcopy chooses from our limits, 10b (discard), 00b (hold, then
# RECEIVE COPY RESULTS COPY STATUS for that list ID)
step xcopy-default  sg_xcopy if=$SA of=$SA bs=512 skip=200000 seek=320000 count=2048
step xcopy-discard  sg_xcopy if=$SA of=$SA bs=512 skip=200000 seek=322048 count=2048 id_usage=discard list_id=6
step xcopy-hold     sg_xcopy if=$SA of=$SA bs=512 skip=200000 seek=324096 count=2048 id_usage=hold list_id=7
step xcopy-listid-v same_as_pat $A $W/pat2 0 2048 0 2048 0 2048 --at 320000 322048 324096
step copy-results-params shows "CSCD|target descriptor" sg_copy_results --params $SA
step copy-results-status shows "completed|status" sg_copy_results --status --list_id=7 $SA
# unaligned to the allocation unit, overlapping ranges inside one LUN
step xcopy-odd      sg_xcopy if=$SA of=$SA bs=512 skip=200001 seek=340003 count=3001 id_usage=disable
step xcopy-odd-v    same_as_pat $A $W/pat2 1 3001 --at 340003
# aligned to the 1 MiB allocation unit: a metadata clone. Two 8 MiB copies
# must not grow the pool file (physical bytes on its tmpfs) by more than 2 MiB;
# where cowctl can read the served pool, its shared space must grow by >= 8 MiB.
step pat2-aligned   dd if=$W/pat2 of=$A bs=1M seek=$((1024000 * 512)) oflag=direct,seek_bytes status=none
PHYS0=$(cow_pool_bytes p0); SHARED0=$(cow_pool_field p0 shared 2>/dev/null)
step xcopy-aligned  sg_xcopy if=$SA of=$SA bs=512 bpt=8192 skip=1024000 seek=1126400 count=16384 id_usage=disable
step xcopy-aligned-ab sg_xcopy if=$SA of=$SB bs=512 bpt=8192 skip=1024000 seek=1126400 count=16384 id_usage=disable
step xcopy-aligned-v same_as_pat $A $W/pat2 0 16384 --at 1126400
step xcopy-aligned-ab-v same_as $B 1126400 16384 $W/pat2
xcopy_is_metadata() {
    local ph sh; ph=$(cow_pool_bytes p0); sh=$(cow_pool_field p0 shared 2>/dev/null)
    echo "pool p0 file: $PHYS0 -> $ph bytes; cowctl shared: ${SHARED0:-n/a} -> ${sh:-n/a}"
    [ $(( ph - PHYS0 )) -lt $((2 << 20)) ] || { echo "the copies grew the pool: data was copied"; return 1; }
    if [ -n "$SHARED0" ] && [ -n "$sh" ]; then
        [ $(( sh - SHARED0 )) -ge $((8 << 20)) ] || { echo "shared space did not grow by 8 MiB"; return 1; }
    fi
}
step xcopy-is-metadata xcopy_is_metadata
# across LUNs of copy group g1
step xcopy-a-to-b   sg_xcopy if=$SA of=$SB bs=512 bpt=8192 skip=200000 seek=0 count=16384 id_usage=disable
step xcopy-a-to-b-v same_as $B 0 16384 $W/pat2
step xcopy-b-to-a   sg_xcopy if=$SB of=$SA bs=512 skip=0 seek=360000 count=2048 id_usage=disable
step xcopy-b-to-a-v same_as $A 360000 2048 <(head -c $((2048 * 512)) $W/pat2)
# c is in no copy group: refused both ways, with COPY TARGET DEVICE NOT REACHABLE
step xcopy-a-to-c-refused fails sg_xcopy if=$SA of=$SC bs=512 skip=200000 seek=0 count=2048 id_usage=disable
step xcopy-refused-sense  shows "asc=0x0d ascq=0x02" fails $SGIO loop $SA xcopy 1 200000 2048 --dst $SC --dst-lba 0
step xcopy-c-to-a-refused fails sg_xcopy if=$SC of=$SA bs=512 skip=0 seek=380000 count=2048 id_usage=disable
step xcopy-c-untouched    zeros $C 0 2048
# ddpt 0.97 EXTENDED COPY: sent to the destination (oflag=xcopy, --xcopy) and to the
# source (iflag=xcopy), LIST ID USAGE 11b/10b/00b, the DC and CAT bits. Each run is ONE
# XCOPY (bpt=count; ddpt_one checks "1 xcopy command done"): ddpt cannot do more than one
# correctly. Its do_xcopy_lid1() advances in/out iterators it never reads, while
# a_xcopy_lid1_cmd() puts op->i_sgli.lowest_lba and op->o_sgli.lowest_lba (skip=, seek=)
# into every segment descriptor, so a copy of more than bpt blocks (bpt defaults to our
# MAXIMUM SEGMENT LENGTH, capped at 65535) repeats its first bpt blocks at seek= and
# leaves the rest uncopied, exiting 0 ("ddpt -vvv" prints the same src_lba per command).
# LBAs 800000+ of a: 600000-731071 belong to the SIGKILL test below.
ddpt_one() { shows "^1 xcopy command done" ddpt bs=512 "$@"; }
note "ddpt 0.97 multi-command xcopy not tested: a_xcopy_lid1_cmd() sends skip=/seek= as the LBAs of every XCOPY, so only copies of <= bpt blocks (one command) are correct"
step ddpt-same      ddpt_one if=$SA of=$SA bpt=16384 skip=200000 seek=800000 count=16384 oflag=xcopy
step ddpt-same-v    same_as $A 800000 16384 $W/pat2
step ddpt-to-src    ddpt_one if=$SA of=$SA bpt=3001 skip=200001 seek=820003 count=3001 iflag=xcopy
step ddpt-to-src-v  same_as_pat $A $W/pat2 1 3001 --at 820003
step ddpt-default   ddpt_one if=$SA of=$SA bpt=2048 skip=200000 seek=830000 count=2048 --xcopy
step ddpt-hold      ddpt_one if=$SA of=$SA bpt=2048 skip=200000 seek=832048 count=2048 oflag=xcopy id_usage=hold list_id=8
step ddpt-discard   ddpt_one if=$SA of=$SA bpt=2048 skip=200000 seek=834096 count=2048 oflag=xcopy id_usage=discard list_id=9
step ddpt-disable   ddpt_one if=$SA of=$SA bpt=2048 skip=200000 seek=836144 count=2048 iflag=xcopy id_usage=disable
step ddpt-dc        ddpt_one if=$SA of=$SA bpt=2048 skip=200000 seek=838192 count=2048 oflag=xcopy,dc
step ddpt-cat       ddpt_one if=$SA of=$SA bpt=2048 skip=200000 seek=840240 count=2048 iflag=xcopy,cat
step ddpt-lid-v     same_as_pat $A $W/pat2 0 2048 0 2048 0 2048 0 2048 0 2048 0 2048 --at 830000 832048 834096 836144 838192 840240
step ddpt-src-kept  same_as $A 200000 16384 $W/pat2
# across a and b (copy group g1), the command sent to either LUN, both ways
step ddpt-a-to-b    ddpt_one if=$SA of=$SB bpt=16384 skip=1024000 seek=800768 count=16384 oflag=xcopy
step ddpt-a-to-b-v  same_as $B 800768 16384 $W/pat2
step ddpt-a-to-b-src ddpt_one if=$SA of=$SB bpt=16384 skip=200000 seek=820000 count=16384 iflag=xcopy
step ddpt-a-to-b-src-v same_as $B 820000 16384 $W/pat2
step ddpt-b-to-a    ddpt_one if=$SB of=$SA bpt=2048 skip=0 seek=860000 count=2048 oflag=xcopy
step ddpt-b-to-a-src ddpt_one if=$SB of=$SA bpt=2048 skip=0 seek=862048 count=2048 iflag=xcopy
step ddpt-b-to-a-v  same_as_pat $A $W/pat2 0 2048 0 2048 --at 860000 862048
# to and from c (no copy group): 0D/02 COPY TARGET DEVICE NOT REACHABLE, whichever LUN
# gets the command; c untouched
step ddpt-a-to-c-refused     fails_with "copy target device not reachable" ddpt -v bs=512 if=$SA of=$SC skip=200000 seek=4096 count=2048 oflag=xcopy
step ddpt-a-to-c-src-refused fails_with "copy target device not reachable" ddpt -v bs=512 if=$SA of=$SC skip=200000 seek=6144 count=2048 iflag=xcopy
step ddpt-c-to-a-refused     fails_with "copy target device not reachable" ddpt -v bs=512 if=$SC of=$SA skip=0 seek=880000 count=2048 oflag=xcopy
step ddpt-c-to-a-src-refused fails_with "copy target device not reachable" ddpt -v bs=512 if=$SC of=$SA skip=0 seek=882048 count=2048 iflag=xcopy
step ddpt-c-untouched        zeros $C 0 8192

# ------------------------------------------------------------ per-command figures (one process)
step sgio-tur       $SGIO loop $SA tur 200
step sgio-write16   $SGIO loop $SA write16 100 500000 8
step sgio-caw       $SGIO loop $SA caw 100 52000
step sgio-ws16-unmap $SGIO loop $SA ws16 100 1048576 2048 --unmap
step sgio-ws16-zero $SGIO loop $SA ws16 100 1048576 2048
step sgio-xcopy-1m  $SGIO loop $SA xcopy 100 200000 2048 --dst-lba 1300000
step sgio-xcopy-ab  $SGIO loop $SA xcopy 100 200000 2048 --dst $SB --dst-lba 300000
# 1 MiB XCOPY aligned to the allocation unit (metadata clones), as ESXi's are
step sgio-xcopy-au  $SGIO loop $SA xcopy 100 1024000 2048 --dst-lba 1433600
step sgio-xcopy-au-ab $SGIO loop $SA xcopy 100 1024000 2048 --dst $SB --dst-lba 1433600
grep -h "^sgio " $LOGDIR/*-sgio-*.log 2>/dev/null | sed 's/^/E2E-NOTE /' >> $RESULTS

# ------------------------------------------------------------ targetcli (system D-Bus)
step tcli-bs        targetcli /backstores/user:cowstore create name=t0 size=64M cfgstring="$(cow_tcli_cfgstring p0 t0 g1)"
step tcli-bad-path  fails_with "must not|outside|invalid" targetcli /backstores/user:cowstore create name=tbad size=64M cfgstring=../../etc/passwd
step tcli-bad-pool  fails_with "does not exist|no such|not found" targetcli /backstores/user:cowstore create name=tbad2 size=64M cfgstring="$(cow_tcli_cfgstring nosuchpool x)"
TW=naa.50014059c0000b00
step tcli-loop      targetcli /loopback create $TW
step tcli-looplun   targetcli /loopback/$TW/luns create /backstores/user:cowstore/t0
step tcli-disk      wait_for 20 loop_dev $TW
step tcli-readcap   shows "Last LBA=131071" sg_readcap $(loop_dev $TW)
step tcli-ls        shows "t0" targetcli ls /backstores/user:cowstore
step tcli-xcopy-a-to-t0 sg_xcopy if=$SA of=$(loop_dev $TW 0 scsi_generic) bs=512 skip=200000 seek=0 count=2048 id_usage=disable
step tcli-xcopy-v   same_as $(loop_dev $TW) 0 2048 <(head -c $((2048 * 512)) $W/pat2)

# ------------------------------------------------------------ persistence
step mk-pattern3    dd if=/dev/urandom of=$W/pat3 bs=1M count=4 status=none
step pat3-write     dd if=$W/pat3 of=$A bs=1M seek=$((400000 * 512)) oflag=direct,seek_bytes status=none
step runner-stop    stop_runner TERM
step runner-restart start_runner --handler-path "$COW_HANDLER_DIR"
step reopen-pat3    wait_for 30 same_as $A 400000 8192 $W/pat3
step reopen-xcopy   same_as $A 300000 16384 $W/pat2
step reopen-b       same_as $B 0 16384 $W/pat2
step reopen-caw     all_bytes $A 50000 1 315
step reopen-unmap   zeros $A 10240 2048
# SIGKILL while a writer is mid-stream; acknowledged writes must survive
: > $W/ack.log
$ACKW write $A 600000 16384 $W/ack.log --seconds 60 > $LOGDIR/ackwriter.out 2>&1 &
ACKW_PID=$!
sleep 2
say "acknowledged before SIGKILL: $(wc -l < $W/ack.log)"
step runner-kill9   stop_runner KILL
step runner-after-kill start_runner --handler-path "$COW_HANDLER_DIR"
sleep 3
stop_pid $ACKW_PID 90
say "acknowledged in total: $(wc -l < $W/ack.log); $(cat $LOGDIR/ackwriter.out)"
step kill9-acked    $ACKW verify $A 600000 16384 $W/ack.log
step kill9-older    same_as $A 400000 8192 $W/pat3
step kill9-b        same_as $B 0 16384 $W/pat2

# ------------------------------------------------------------ a damaged pool
# Both superblock copies of a pool damaged while the runner serves others:
# its backstore's enable fails (the handler refuses the pool with EIO and
# says why in the runner's log), the daemon lives on and goes on serving
# the other pool's LUNs, and the damaged pool file is not changed.
step dmg-pool       cow_pool_create dmg 64M
step dmg-lun        cow_lun_create dmg v 8M
step dmg-break      cow_damage_superblocks dmg
DMG_SUM=$(sha256sum < $COWSTORE_POOL_DIR/dmg)
step dmg-enable-fails fails cow_bs 9 dmgv $((8 << 20)) dmg v
step dmg-runner-alive runner_alive
step dmg-reason     shows "cannot open pool .*/dmg: Corruption.*cowctl pool check dmg" cat $W/log/tcmu-runner.log
step dmg-untouched  bash -c "[ \"\$(sha256sum < $COWSTORE_POOL_DIR/dmg)\" = '$DMG_SUM' ]"
step dmg-others     same_as $A 400000 8192 $W/pat3
step dmg-check      fails_with "corrupt|damaged" cow_pool_check dmg
rm_backstore $CFS/core/user_9/dmgv

# ------------------------------------------------------------ thin provisioning, 4096-byte blocks
# Own pools (1 MiB allocation unit) and LUNs on a second tcm_loop target. Data
# goes through the sg nodes from one process (sgio.py): the sd driver retries
# UNIT ATTENTIONs on its own I/O, so only SG_IO shows them to the test.
TPW=naa.50014059c0000d00
# Exhaustion: a 64 MiB pool under a 256 MiB LUN (overcommitted). 1 MiB WRITE(16)s
# of distinct data until one fails: CHECK CONDITION, DATA PROTECT, SPACE ALLOCATION
# FAILED WRITE PROTECT (07/27/07); every acknowledged chunk must read back (the
# default 80 % soft threshold's unit attention on the way is printed and the WRITE
# repeated). Then UNMAP the first 8 MiB: writing 4 MiB there succeeds again.
step tp-pool        cow_pool_create tp 64M --allocation-unit 1M
step tp-lun         cow_lun_create tp big 256M --overcommit
step tp-bs          cow_bs 3 tpbig $((256 << 20)) tp big
step tp-loop        mk_loop_lun $CFS/core/user_3/tpbig $TPW 0
TP=$(loop_dev $TPW 0); STP=$(loop_dev $TPW 0 scsi_generic)
step tp-fill-to-full $SGIO pattern $STP 0 256 --seed 11 --until-fail 07/27/07 --state $W/tp-acked
say "exhaustion: $(cat $W/tp-acked 2>/dev/null) MiB acknowledged in the 64 MiB pool"
head -c $((1 << 20)) $W/pat > $W/tp-1m
step tp-still-full  $SGIO cmd $STP 8a000000000000064000000008000000 --out $W/tp-1m --expect 07/27/07   # 1 MiB at LBA 409600
step tp-unmap       sg_unmap --force --lba=0 --num=16384 $TP
step tp-unmap-z     zeros $TP 0 16384
step tp-write-after-unmap $SGIO pattern $STP 0 4 --seed 12
step tp-unmapped-rest-z zeros $TP 8192 8192
step tp-acked-intact $SGIO pattern $STP 0 0 --seed 11 --verify-only --state $W/tp-acked --first 8
# Soft threshold: a 64 MiB pool warning at 50 %. After each 1 MiB WRITE(16), a
# TEST UNIT READY: exactly one gets UNIT ATTENTION 06/38/07 (THIN PROVISIONING
# SOFT THRESHOLD REACHED), and the one after it is GOOD.
# Observed (Debian 6.1, stock tcmu-runner 1.5.4): the attention comes on the
# first command after the WRITE that crossed the threshold, whatever it is; in
# tp-fill-to-full above the default 80 % one landed on a WRITE(16) (logged and
# repeated there). Had that WRITE come through /dev/sdX, the midlayer would have
# retried it and the attention would be gone unseen: hence SG_IO only, with the
# probe right after each write. Here it fired after 22 MiB of data, half of the
# 44 MiB that the same-sized pool tp accepted before 27/07.
step soft-pool      cow_pool_create ts 64M --allocation-unit 1M --soft-threshold 50
step soft-bs        cow_bs 4 tssoft $((48 << 20)) ts soft
step soft-loop      mk_loop_lun $CFS/core/user_4/tssoft $TPW 1
SSOFT=$(loop_dev $TPW 1 scsi_generic)
# A second LUN of the same pool that is never written: the threshold is the
# pool's, so it must report the crossing too (once, on its next command).
step soft2-bs       cow_bs 4 tsquiet $((8 << 20)) ts quiet
step soft2-loop     mk_loop_lun $CFS/core/user_4/tsquiet $TPW 3
SQUIET=$(loop_dev $TPW 3 scsi_generic)
step soft2-ready    wait_for 10 sg_turs $SQUIET       # attach-time attentions consumed
# LIO tells the other LUNs of the target that its LUN inventory changed
# (06/3F/0E REPORTED LUNS DATA HAS CHANGED): consume that on soft, too
step soft-ready     wait_for 10 sg_turs $SSOFT
# 34 MiB: well past the threshold, well short of the ~44 MiB such a pool holds
step soft-ua-once   $SGIO softua $SSOFT 0 34
step soft2-ua       fails_with "soft threshold" sg_turs -v $SQUIET
step soft2-ua-once  sg_turs $SQUIET
# Thin on thin: an 8 GiB pool on the pools' tmpfs (90 % of the guest's 2 GiB), so the
# filesystem cannot hold the pool's growth. The first allocation (1 s interval, on by
# default) finds it short: exactly one TEST UNIT READY gets 06/38/07 while the
# shortfall lasts (not one per second, not one per command), WRITEs never do, and
# I/O goes on. A LUN of the same pool with thin_on_thin=0 reports nothing.
step tot-pool       cow_pool_create_outgrowing tot 8G --allocation-unit 1M
step tot-bs         cow_bs 4 totloud $((64 << 20)) tot loud
step tot-loop       mk_loop_lun $CFS/core/user_4/totloud $TPW 4
STOT=$(loop_dev $TPW 4 scsi_generic)
step tot-off-bs     cow_bs 4 totoff $((16 << 20)) tot off "" thin_on_thin=0
step tot-off-cfg    shows "thin_on_thin=0" cat $CFS/core/user_4/totoff/info
step tot-off-loop   mk_loop_lun $CFS/core/user_4/totoff $TPW 5
STOTOFF=$(loop_dev $TPW 5 scsi_generic)
step tot-off-ready  wait_for 10 sg_turs $STOTOFF      # attach-time attentions consumed
step tot-ready      wait_for 10 sg_turs $STOT
step tot-ua-once    $SGIO softua $STOT 0 6
step tot-off-quiet  sg_turs -v $STOTOFF
# written and read back with no unit attention on the way (pattern prints each one)
no_ua() { local out rc; out=$("$@"); rc=$?; echo "$out"; [ $rc = 0 ] && ! grep -qi "unit attention" <<< "$out"; }
step tot-io-after   no_ua $SGIO pattern $STOT 16384 4 --seed 13
step tot-off-io     no_ua $SGIO pattern $STOTOFF 0 2 --seed 14
step tot-still-once sg_turs -v $STOT
step tot-off-still  sg_turs -v $STOTOFF
# 4096-byte logical blocks (in p0). same_as/zeros/all_bytes count 512-byte units.
COW_BLOCK_SIZE=4096 step 4k-bs cow_bs 5 k4 $((64 << 20)) p0 k4
step 4k-loop        mk_loop_lun $CFS/core/user_5/k4 $TPW 2
K4=$(loop_dev $TPW 2); SK4=$(loop_dev $TPW 2 scsi_generic)
step 4k-readcap     shows "Logical block length=4096 bytes" sg_readcap -l $K4
step 4k-readcap-last shows "Last LBA=16383" sg_readcap -l $K4
step 4k-mk-pattern  dd if=/dev/urandom of=$W/pat4k bs=1M count=4 status=none
step 4k-dd-write    dd if=$W/pat4k of=$K4 bs=1M oflag=direct status=none
step 4k-dd-verify   same_as $K4 0 8192 $W/pat4k
head -c 4096 /dev/zero > $W/blk4k-00
# WRITE SAME(16) UNMAP: 4 KiB LBAs 256..511 (one allocation unit) and 600..604 (unaligned)
step 4k-ws16-unmap  sg_write_same --16 --unmap --lba=256 --num=256 --xferlen=4096 --in=$W/blk4k-00 $K4
step 4k-ws16-unmap-odd sg_write_same --16 --unmap --lba=600 --num=5 --xferlen=4096 --in=$W/blk4k-00 $K4
step 4k-ws16-z      zeros_at $K4 2048 2048 4800 40
step 4k-ws16-keep   same_as_pat $K4 $W/pat4k 0 2048 4096 704 4840 3352
# COMPARE AND WRITE, 1 block of 4096 bytes: on never-written LBA 2000 (compares
# with zeros), then over it, then a miscompare at byte 100 of the block
pattern_file $W/blk4k-ab 253 4096; pattern_file $W/blk4k-cd 315 4096
cat $W/blk4k-00 $W/blk4k-ab > $W/caw4k-1; cat $W/blk4k-ab $W/blk4k-cd > $W/caw4k-2
cp $W/blk4k-cd $W/cmp4k-bad; printf '\x00' | dd of=$W/cmp4k-bad bs=1 seek=100 conv=notrunc status=none
cat $W/cmp4k-bad $W/blk4k-ab > $W/caw4k-bad
CAW4K_2000=890000000000000007d0000000010000
step 4k-caw         $SGIO cmd $SK4 $CAW4K_2000 --out $W/caw4k-1 --expect GOOD
step 4k-caw-v       all_bytes $K4 16000 8 253
step 4k-caw-2       $SGIO cmd $SK4 $CAW4K_2000 --out $W/caw4k-2 --expect GOOD
step 4k-caw-2-v     all_bytes $K4 16000 8 315
step 4k-caw-miscompare $SGIO cmd $SK4 $CAW4K_2000 --out $W/caw4k-bad --expect 0e/1d/00 --info 100
step 4k-caw-unchanged all_bytes $K4 16000 8 315
step 4k-caw-neighbours zeros_at $K4 15992 8 16008 8

# ------------------------------------------------------------ several initiators, one list ID (issue 13)
# Four iSCSI sessions with their own initiator IQNs send EXTENDED COPY at once
# with the same list IDs in 00b, 10b and 11b; none may be refused, each checks
# its data and what RECEIVE COPY RESULTS tells it (guest/xcopy_sessions.c).
IQN_XCS=iqn.2003-01.org.cowstore.e2e:xcopy-sessions
step xcs-build      xcs_build
step xcs-target     xcs_target p0 6 $IQN_XCS
step xcs-sessions   xcs_run $IQN_XCS 4 15

# ------------------------------------------------------------ iscsi-test-cu, cowstore vs LIO fileio
ICU_FAMILIES=${E2E_ICU_FAMILIES:-SCSI.Inquiry,SCSI.ReadCapacity10,SCSI.ReadCapacity16,SCSI.Read6,SCSI.Read10,SCSI.Read12,SCSI.Read16,SCSI.Write10,SCSI.Write12,SCSI.Write16,SCSI.Verify10,SCSI.Verify12,SCSI.Verify16,SCSI.WriteVerify10,SCSI.WriteVerify12,SCSI.WriteVerify16,SCSI.CompareAndWrite,SCSI.WriteSame10,SCSI.WriteSame16,SCSI.Unmap,SCSI.GetLBAStatus,SCSI.ExtendedCopy,SCSI.ReceiveCopyResults,SCSI.ReportSupportedOpcodes,SCSI.ModeSense6,SCSI.TestUnitReady,SCSI.StartStopUnit,SCSI.PreventAllow,iSCSI.iSCSIResiduals}
IQN_COW=iqn.2003-01.org.cowstore.e2e:cowstore
IQN_FIO=iqn.2003-01.org.cowstore.e2e:fileio
# 32 MiB max transfer: libiscsi's WriteSame16.Unmap WRITEs 65536 blocks in one
# command whenever MAXIMUM WRITE SAME LENGTH allows it (ours: 1Mi blocks)
COW_MAX_SECTORS=65536 step bs-icu cow_bs 1 icu $((256 << 20)) p0 icu
step iscsi-cowstore mk_iscsi_lun $CFS/core/user_1/icu $IQN_COW
step bs-fileio      mk_fileio_bs 2 fio $W/fileio.img $((256 << 20)) emulate_tpu=1 emulate_tpws=1
step iscsi-fileio   mk_iscsi_lun $CFS/core/fileio_2/fio $IQN_FIO
step icu-cowstore   icu_run cowstore $(iscsi_url $IQN_COW) "$ICU_FAMILIES"
step icu-fileio     icu_run fileio $(iscsi_url $IQN_FIO) "$ICU_FAMILIES"
step icu-baseline   icu_gate cowstore $E2E_DIR/icu-baseline-cowstore.txt
icu_table cowstore fileio
# the goal: everything LIO fileio passes, except failures kept in the baseline
step icu-not-worse-than-fileio bash -c "join <(sort $E2E_OUT/icu-cowstore.tsv) <(sort $E2E_OUT/icu-fileio.tsv) |
    awk '\$2==\"FAIL\" && \$3==\"PASS\" {print \$1}' | sort |
    comm -23 - <(sed 's/#.*//' $E2E_DIR/icu-baseline-cowstore.txt | awk 'NF{print \$1}' | sort) |
    sed 's/^/fileio passes, cowstore fails (not in the baseline): /' | grep . && exit 1; exit 0"

# ------------------------------------------------------------ shut down, check the pool offline
step runner-alive   runner_alive
step runner-stop-final stop_runner TERM
step pool-check     cow_pool_check p0
step pool-check-tp  cow_pool_check tp       # filled to exhaustion, then partly unmapped
step pool-check-ts  cow_pool_check ts
step pool-check-tot cow_pool_check tot
step pool-show      cow_pool_show p0
step pool-saved-by-clones bash -c "v=\$($(cow_tool) --json pool show p0 | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"saved_by_clones\"])'); echo saved_by_clones=\$v; [ \$v -ge $((8 << 20)) ]"   # a->b aligned clone survives to the end
note "pool p0 file occupies $(cow_pool_bytes p0) bytes on the scratch fs"
finish
