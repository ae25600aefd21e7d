# SPDX-License-Identifier: Apache-2.0
# Helpers for e2e guest suites (sourced inside the VM, bash).
#
# Results: every check is one line in /e2e-out/results.txt
#   E2E-RESULT <name> PASS|FAIL|SKIP|XFAIL|XPASS rc=<rc> <secs>s [reason]
# which run-e2e.sh on the host counts. Each step's full output goes to
# /e2e-out/logs/<NNN>-<name>.log; the console shows the result line and, on
# failure, the tail of that log.
#
# Suites are written with `set +e`: a failing step is recorded and the suite
# goes on, so one run shows every failure. `finish` prints the summary and
# exits 0 (all passed), 1 (failures) or E2E_RC_SKIP (nothing ran, with reason).

set +e
E2E_OUT=/e2e-out
RESULTS=$E2E_OUT/results.txt
LOGDIR=$E2E_OUT/logs
CFS=/sys/kernel/config/target
E2E_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)     # tests/e2e (read-only host root)
E2E_RC_SKIP=77
W=/tmp/w                                                      # scratch mount point (mk_scratch)
mkdir -p "$LOGDIR"; : >> "$RESULTS"
# Host-provided settings (run-e2e.sh writes them): E2E_SUITE, E2E_REPO, E2E_HANDLER_DIR, E2E_* ...
[ -f $E2E_OUT/e2e.env ] && . $E2E_OUT/e2e.env
E2E_T0=$(date +%s.%N)
NPASS=0; NFAIL=0; NSKIP=0; NXFAIL=0; NXPASS=0; STEPNO=0
RUNNER_PID=; DBUS_PID=

up() { cut -d' ' -f1 /proc/uptime; }
now() { date +%s.%N; }
elapsed() { echo "$(now) - $1" | bc; }
# sgio_field NAME LOG : NAME's value on the last "sgio op=..." line of LOG
# (loop_secs, per_cmd_ms: sgio.py loop's own timing, without python's start-up)
sgio_field() { sed -n "s/^sgio op=.* $1=\([0-9.]*\).*/\1/p" "$2" | tail -1; }
# blk_bytes BLOCKDEV : bytes the block layer has read and written on it
# (SG_IO passthrough is not counted there)
blk_bytes() { awk '{printf "%.0f\n", ($3 + $7) * 512}' /sys/block/$(basename $1)/stat; }
say() { echo "E2E: [$(up)s] $*"; }
# note TEXT: a line that belongs in the results (and the host's summary)
note() { echo "E2E-NOTE $*" | tee -a "$RESULTS"; }

_record() { # _record NAME STATUS RC SECS [REASON]
    printf 'E2E-RESULT %-34s %-5s rc=%-3s %6.2fs%s\n' "$1" "$2" "$3" "$4" "${5:+ $5}" | tee -a "$RESULTS"
}
_logfile() { printf '%s/%03d-%s.log' "$LOGDIR" $STEPNO "$1"; }   # after STEPNO++

# Run CMD with a time limit when it is an external program (functions and
# builtins cannot be put under timeout(1); the suite's global timeout covers them).
_run() {
    if [ "$(type -t "$1")" = file ]; then timeout -k 5 "${STEP_TIMEOUT:-300}" "$@"
    else "$@"; fi
}

# step NAME CMD... : PASS iff CMD exits 0.
step() {
    local name=$1; shift
    local log t0 rc; STEPNO=$((STEPNO + 1)); log=$(_logfile "$name"); t0=$(now)
    { echo "# $*"; _run "$@"; } > "$log" 2>&1
    rc=$?
    if [ $rc -eq 0 ]; then NPASS=$((NPASS + 1)); _record "$name" PASS $rc "$(elapsed $t0)"
    else
        NFAIL=$((NFAIL + 1)); _record "$name" FAIL $rc "$(elapsed $t0)"
        [ $rc -eq 124 ] && echo "    (timed out after ${STEP_TIMEOUT:-300}s)"
        tail -n "${STEP_LINES:-30}" "$log" | sed 's/^/    | /'
    fi
    return $rc
}
# xstep NAME REASON CMD... : a known failure. XFAIL if CMD fails, XPASS if it
# now passes (then turn it back into a step). Never fails the suite.
xstep() {
    local name=$1 reason=$2; shift 2
    local log t0 rc; STEPNO=$((STEPNO + 1)); log=$(_logfile "$name"); t0=$(now)
    { echo "# known failure: $reason"; echo "# $*"; _run "$@"; } > "$log" 2>&1
    rc=$?
    if [ $rc -eq 0 ]; then NXPASS=$((NXPASS + 1)); _record "$name" XPASS $rc "$(elapsed $t0)" "now passes: make it a step ($reason)"
    else NXFAIL=$((NXFAIL + 1)); _record "$name" XFAIL $rc "$(elapsed $t0)" "$reason"; fi
    return 0
}
# skip NAME REASON : record a check that could not run.
skip() { NSKIP=$((NSKIP + 1)); _record "$1" SKIP - 0 "$2"; }
# fails CMD... : succeeds iff CMD fails (for commands that must be refused).
fails() { "$@"; local rc=$?; [ $rc -ne 0 ] && echo "(failed as required, rc=$rc)" && return 0; echo "(succeeded but must fail)"; return 1; }
# shows REGEX CMD... : CMD succeeds and its output (stdout+stderr) matches REGEX (grep -E, case-insensitive)
shows() {
    local pat=$1 out rc; shift
    out=$("$@" 2>&1); rc=$?
    printf '%s\n' "$out"
    [ $rc -eq 0 ] || { echo "(command failed rc=$rc)"; return 1; }
    grep -qiE -- "$pat" <<< "$out" || { echo "(output does not match /$pat/)"; return 1; }
}
# fails_with REGEX CMD... : CMD fails and its output matches REGEX
fails_with() {
    local pat=$1 out rc; shift
    out=$("$@" 2>&1); rc=$?
    printf '%s\n' "$out"
    [ $rc -ne 0 ] || { echo "(command succeeded but must fail)"; return 1; }
    grep -qiE -- "$pat" <<< "$out" || { echo "(output does not match /$pat/)"; return 1; }
}

# finish : summary line, cleanup, exit status for init.sh / the host.
finish() {
    cleanup
    printf 'E2E-SUMMARY suite=%s pass=%d fail=%d skip=%d xfail=%d xpass=%d guest-script=%.1fs\n' \
        "${E2E_SUITE:-?}" $NPASS $NFAIL $NSKIP $NXFAIL $NXPASS "$(elapsed $E2E_T0)" | tee -a "$RESULTS"
    [ $NFAIL -eq 0 ] && exit 0
    exit 1
}
# skip_suite REASON : the whole suite cannot run here (not a pass, not a failure).
skip_suite() {
    skip "${E2E_SUITE:-suite}" "$1"
    echo "E2E-SKIP suite ${E2E_SUITE:-?} skipped: $1" | tee -a "$RESULTS"
    cleanup
    exit $E2E_RC_SKIP
}

wait_for() { # wait_for SECONDS CMD... : poll CMD every 0.2 s until it succeeds
    local end=$(( $(date +%s) + $1 )); shift
    while [ "$(date +%s)" -lt $end ]; do "$@" && return 0; sleep 0.2; done
    "$@"
}

# ---------------------------------------------------------------- scratch space
# mk_scratch SIZE [MOUNTPOINT] : ext4 on a loop device over a tmpfs file.
# tmpfs alone lacks fallocate modes and O_DIRECT that tcmu handlers want.
mk_scratch() {
    local size=$1 mnt=${2:-$W}
    mkdir -p /run/scratch-backing "$mnt"
    mountpoint -q /run/scratch-backing || mount -t tmpfs -o size="$size" tmpfs /run/scratch-backing || return 1
    truncate -s "$size" /run/scratch-backing/img || return 1
    mkfs.ext4 -q -F -E lazy_itable_init=1,nodiscard /run/scratch-backing/img || return 1
    mount -o loop,discard /run/scratch-backing/img "$mnt" || return 1
    mkdir -p "$mnt/log"
}

# ---------------------------------------------------------------- daemons
# start_dbus : a system bus, so targetcli can see tcmu-runner's handlers
# (org.kernel.TCMUService1) and call their check_config.
start_dbus() {
    mkdir -p /run/dbus /var/lib/dbus
    [ -s /etc/machine-id ] || dbus-uuidgen > /etc/machine-id
    DBUS_PID=$(dbus-daemon --system --fork --print-pid) || return 1
    echo "dbus-daemon pid $DBUS_PID"
}
# The runner the suite uses: Debian's installed one, or, when the host passed
# E2E_RUNNER_ROOT (run-e2e.sh --tcmu-runner SUITE/VERSION: Debian's packages
# unpacked with dpkg-deb), that release's tcmu-runner with its own libtcmu.
if [ -n "${E2E_RUNNER_ROOT:-}" ]; then
    RUNNER_BIN=$E2E_RUNNER_ROOT/usr/bin/tcmu-runner
    RUNNER_LIBDIR=$(dirname "$(ls "$E2E_RUNNER_ROOT"/usr/lib/*/libtcmu.so.2 2>/dev/null | head -n 1)")
else
    RUNNER_BIN=$(command -v tcmu-runner); RUNNER_LIBDIR=
fi
# runner_exec ARGS... : the runner (its libtcmu first on the library path).
# Not for start_runner: a function run with & is a subshell, whose PID is not
# the runner's.
runner_exec() { env ${RUNNER_LIBDIR:+LD_LIBRARY_PATH=$RUNNER_LIBDIR} "$RUNNER_BIN" "$@"; }
# runner_version : what the runner says it is ("tcmu-runner 1.5.2"; --version exits 1)
runner_version() { runner_exec --version 2>&1 | head -n 1; }
# runner_describe : version, binary, libtcmu and package, for the results
runner_describe() {
    echo "$(runner_version) ($RUNNER_BIN, libtcmu from ${RUNNER_LIBDIR:-the system}${E2E_RUNNER_PKG:+, Debian package $E2E_RUNNER_PKG})"
}
# runner_is VERSION : the running runner reports VERSION and has mapped the
# libtcmu.so.2 it came with (not the system's)
runner_is() {
    local v; v=$(runner_version); echo "$v"
    [ "$v" = "tcmu-runner $1" ] || { echo "expected tcmu-runner $1"; return 1; }
    [ -n "$RUNNER_PID" ] || { echo "no runner running"; return 1; }
    local exe; exe=$(readlink /proc/$RUNNER_PID/exe)
    echo "pid $RUNNER_PID runs $exe"
    [ "$(realpath "$exe")" = "$(realpath "$RUNNER_BIN")" ] || { echo "pid $RUNNER_PID is not $RUNNER_BIN"; return 1; }
    local lib; lib=$(grep -o '/[^ ]*libtcmu\.so[^ ]*' /proc/$RUNNER_PID/maps | sort -u)
    echo "libtcmu mapped by pid $RUNNER_PID: ${lib:-none}"
    if [ -n "$RUNNER_LIBDIR" ]; then
        [ -n "$lib" ] && ! grep -qv "^$(realpath "$RUNNER_LIBDIR")/" <<< "$(for l in $lib; do realpath "$l"; done)" \
            || { echo "not (only) $RUNNER_LIBDIR's libtcmu"; return 1; }
    fi
}

# start_runner [tcmu-runner args...] : start tcmu-runner in the background,
# logging to the scratch disk (9p writes are synchronous and slow with -d).
# Waits until it is alive and, with D-Bus running, on the bus.
start_runner() {
    mkdir -p "$W/log"
    # One simple command: bash forks and execs env, env execs the runner, so
    # $! is the runner's own PID (stop_runner signals it).
    env ${RUNNER_LIBDIR:+LD_LIBRARY_PATH=$RUNNER_LIBDIR} "$RUNNER_BIN" ${E2E_RUNNER_ARGS:-} -l "$W/log" "$@" \
        >> "$W/log/tcmu-runner.stdout" 2>&1 &
    RUNNER_PID=$!
    echo "tcmu-runner pid $RUNNER_PID ($RUNNER_BIN${RUNNER_LIBDIR:+, LD_LIBRARY_PATH=$RUNNER_LIBDIR}) args: ${E2E_RUNNER_ARGS:-} $*"
    if [ -n "$DBUS_PID" ]; then
        wait_for 30 eval 'busctl --system list 2>/dev/null | grep -q org.kernel.TCMUService1' || return 1
    else
        sleep 1
    fi
    kill -0 $RUNNER_PID
}
# stop_runner [SIGNAL] : stop the runner we started (by PID) and reap it.
stop_runner() {
    [ -n "$RUNNER_PID" ] || return 0
    kill -"${1:-TERM}" $RUNNER_PID 2>/dev/null
    local i; for i in $(seq 1 100); do kill -0 $RUNNER_PID 2>/dev/null || break; sleep 0.1; done
    kill -0 $RUNNER_PID 2>/dev/null && { echo "tcmu-runner $RUNNER_PID still alive, SIGKILL"; kill -KILL $RUNNER_PID; }
    wait $RUNNER_PID 2>/dev/null; local rc=$?
    echo "tcmu-runner $RUNNER_PID exited rc=$rc"
    RUNNER_PID=
    return 0
}
# stop_pid PID SECS : SIGTERM a process we started, SIGKILL after SECS, reap it
stop_pid() {
    kill "$1" 2>/dev/null
    local i; for i in $(seq 1 $(( $2 * 5 ))); do kill -0 "$1" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$1" 2>/dev/null && { echo "pid $1 still alive after $2 s, SIGKILL"; kill -KILL "$1"; }
    wait "$1" 2>/dev/null
}
runner_alive() { [ -n "$RUNNER_PID" ] && kill -0 $RUNNER_PID 2>/dev/null; }

# cleanup : save logs, stop what we started (by PID). Idempotent.
cleanup() {
    [ -n "$RUNNER_PID" ] && stop_runner > /dev/null
    [ -n "$DBUS_PID" ] && { kill $DBUS_PID 2>/dev/null; DBUS_PID=; }
    cp -r "$W/log/." "$LOGDIR/" 2>/dev/null
    return 0
}

# ---------------------------------------------------------------- LIO via configfs
# mk_user_bs HBA NAME SIZE DEV_CONFIG [BLOCK_SIZE [MAX_SECTORS]]
#   TCMU (user:) backstore; DEV_CONFIG is "<subtype>/<cfgstring>".
mk_user_bs() {
    local d=$CFS/core/user_$1/$2
    mkdir -p "$d" || return 1
    echo "dev_size=$3" > "$d/control" || return 1
    echo "dev_config=$4" > "$d/control" || return 1
    [ -n "${5:-}" ] && { echo "hw_block_size=$5" > "$d/control" || return 1; }
    [ -n "${6:-}" ] && { echo "hw_max_sectors=$6" > "$d/control" || return 1; }
    cat /proc/sys/kernel/random/uuid > "$d/wwn/vpd_unit_serial"
    echo 1 > "$d/enable" || return 1
    echo "user backstore $d: $(cat "$d/info" 2>/dev/null | tr '\n' ' ')"
}
# mk_fileio_bs HBA NAME FILE SIZE [ATTR=VAL...] : kernel LIO fileio backstore
mk_fileio_bs() {
    local d=$CFS/core/fileio_$1/$2 a; shift 2
    local file=$1 size=$2; shift 2
    mkdir -p "$d" || return 1
    echo "fd_dev_name=$file,fd_dev_size=$size,fd_buffered_io=1" > "$d/control" || return 1
    cat /proc/sys/kernel/random/uuid > "$d/wwn/vpd_unit_serial"
    echo 1 > "$d/enable" || return 1
    for a in "$@"; do echo "${a#*=}" > "$d/attrib/${a%%=*}" || { echo "cannot set $a"; return 1; }; done
    echo "fileio backstore $d: $(cat "$d/info" 2>/dev/null | tr '\n' ' ')"
}
# rm_backstore BACKSTORE_DIR (after its LUNs are gone)
rm_backstore() { rmdir "$1" 2>/dev/null; }

# mk_loop_lun BACKSTORE_DIR WWN [LUN] : export through tcm_loop (one SCSI host per WWN)
mk_loop_lun() {
    local t=$CFS/loopback/$2/tpgt_1 l=${3:-0}
    mkdir -p "$t/lun/lun_$l" || return 1
    [ -n "$(cat "$t/nexus" 2>/dev/null)" ] || echo "${2%?}f" > "$t/nexus" || return 1
    ln -s "$1" "$t/lun/lun_$l/$(basename "$1")" || return 1
    wait_for 20 loop_dev "$2" "$l" > /dev/null || { echo "no SCSI device for $2 lun $l"; return 1; }
    echo "tcm_loop $2 lun $l -> $(loop_dev "$2" "$l") $(loop_dev "$2" "$l" sg)"
}
# loop_dev WWN [LUN] [block|sg] : /dev path of a tcm_loop LUN (via the TPG's SCSI address)
loop_dev() {
    local addr h t n
    addr=$(cat "$CFS/loopback/$1/tpgt_1/address" 2>/dev/null) || return 1   # "host:0:tpgt"
    h=${addr%%:*}; t=${addr##*:}
    n=$(ls "/sys/bus/scsi/devices/$h:0:$t:${2:-0}/${3:-block}" 2>/dev/null | head -1)
    [ -n "$n" ] && [ -e "/dev/$n" ] && echo "/dev/$n"
}
# rm_loop_lun WWN [LUN] : unexport
rm_loop_lun() {
    local t=$CFS/loopback/$1/tpgt_1 l=${2:-0}
    rm -f "$t"/lun/lun_$l/* 2>/dev/null; rmdir "$t/lun/lun_$l" 2>/dev/null
}

# mk_iscsi_lun BACKSTORE_DIR IQN [LUN] : iSCSI target on 127.0.0.1:3260, demo mode
# (any initiator, no auth, writable).
mk_iscsi_lun() {
    local t=$CFS/iscsi/$2/tpgt_1 l=${3:-0}
    mkdir -p "$t/lun/lun_$l" || return 1
    ln -s "$1" "$t/lun/lun_$l/$(basename "$1")" || return 1
    if [ "$(cat "$t/enable")" != 1 ]; then
        mkdir -p "$t/np/127.0.0.1:3260" || return 1
        echo 0 > "$t/attrib/authentication"
        echo 1 > "$t/attrib/generate_node_acls"
        echo 1 > "$t/attrib/cache_dynamic_acls"
        echo 0 > "$t/attrib/demo_mode_write_protect"
        echo 1 > "$t/enable" || return 1
    fi
    echo "iscsi $2 lun $l -> $1"
}
iscsi_url() { echo "iscsi://127.0.0.1/$1/${2:-0}"; }

# ---------------------------------------------------------------- data helpers
# pattern_file FILE BYTE_OCTAL BYTES : a file of one repeated byte
pattern_file() { head -c "$3" /dev/zero | tr '\0' "\\$2" > "$1"; }
# read_blocks DEV LBA COUNT : raw 512-byte blocks to stdout, bypassing the page
# cache, in 1 MiB reads (one read per block costs a SCSI command each)
read_blocks() {
    dd if="$1" bs=1M skip=$(( $2 * 512 )) count=$(( $3 * 512 )) \
        iflag=direct,skip_bytes,count_bytes status=none
}
# same_as DEV LBA COUNT FILE : the blocks equal FILE
same_as() { cmp <(read_blocks "$1" "$2" "$3") "$4"; }
# all_bytes DEV LBA COUNT OCTAL : every byte of the range is OCTAL
all_bytes() { cmp <(read_blocks "$1" "$2" "$3") <(head -c $(( $3 * 512 )) /dev/zero | tr '\0' "\\$4"); }
# zeros DEV LBA COUNT : the range reads back as zeros
zeros() { cmp <(read_blocks "$1" "$2" "$3") <(head -c $(( $3 * 512 )) /dev/zero); }
