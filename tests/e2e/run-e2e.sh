#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# cowstore real-kernel end-to-end harness: host entry point.
#
# Boots Debian 12's stock kernel under qemu TCG (no KVM, no LIO on the host),
# with the host's / read-only over 9p, and runs one guest suite against real
# LIO (target_core_user, tcm_loop, iSCSI on 127.0.0.1), Debian's tcmu-runner
# and real initiator tools. See tests/e2e/README.md.
#
# usage: tests/e2e/run-e2e.sh [--suite NAME|PATH] [--handler-dir DIR] [--out DIR]
#                             [--timeout SECS] [--mem MIB] [--smp N|auto] [--shell]
#                             [--tcmu-runner SUITE/VERSION]
#   --suite       stock (default) | cowstore | smoke | path to a guest script
#   --handler-dir where handler_cowstore.so is (default build/default/handler/plugin)
#   --tcmu-runner run the suite in another Debian release's tcmu-runner instead of the
#                 installed one, e.g. bullseye/1.5.2-6 (Debian 11, the oldest we support):
#                 tools/fetch-tcmu-runner-debs.sh fetches tcmu-runner and libtcmu2 with
#                 apt (private state, cached in the cache dir) and unpacks them; the guest
#                 runs that runner with its own libtcmu (LD_LIBRARY_PATH). If they cannot
#                 be had, the run is skipped (exit 77) with the reason.
#   --out         results and logs (default build/e2e-out/<suite>)
#   --timeout     host-side hard limit for the VM in seconds (default 900)
#   --mem         guest memory in MiB (default 2048)
#   --smp         guest vCPUs (default auto: 2 on an idle host, 1 when the host's load
#                 average exceeds half its cores: under contention multi-threaded TCG
#                 with 2 vCPUs ran the stock suite 2.7x slower than 1 vCPU)
#   --shell       drop into a guest shell after the suite (interactive debugging)
# env: SKIP_APT=1 (do not apt-get install), COWSTORE_E2E_CACHE (kernel + initramfs
#      cache, default build/e2e-cache), COWSTORE_E2E_KPKG (kernel package),
#      E2E_* variables are passed through to the guest (e.g. E2E_RUNNER_ARGS=-d).
# exit: 0 all passed; 1 failures; 77 suite skipped (e.g. handler not built);
#       123 guest script not runnable; 124 host timeout; 125 guest timeout or
#       signal; 126 guest init failure; 99 no rc.
# The last line printed is always "N passed, N failed, N skipped".
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)

SUITE=stock; HANDLER_DIR=; OUT=; TIMEOUT=900; RUNNER_SPEC=; MEM=${E2E_MEM:-2048}; SHELL_AFTER=; SMP=${E2E_SMP:-auto}
while [ $# -gt 0 ]; do
    case "$1" in
        --suite) SUITE=$2; shift 2 ;;
        --suite=*) SUITE=${1#*=}; shift ;;
        --handler-dir) HANDLER_DIR=$2; shift 2 ;;
        --handler-dir=*) HANDLER_DIR=${1#*=}; shift ;;
        --out) OUT=$2; shift 2 ;;
        --out=*) OUT=${1#*=}; shift ;;
        --timeout) TIMEOUT=$2; shift 2 ;;
        --timeout=*) TIMEOUT=${1#*=}; shift ;;
        --mem) MEM=$2; shift 2 ;;
        --mem=*) MEM=${1#*=}; shift ;;
        --smp) SMP=$2; shift 2 ;;
        --smp=*) SMP=${1#*=}; shift ;;
        --shell) SHELL_AFTER=1; shift ;;
        --tcmu-runner) RUNNER_SPEC=$2; shift 2 ;;
        --tcmu-runner=*) RUNNER_SPEC=${1#*=}; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "run-e2e: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done

if [ -f "$SUITE" ]; then SCRIPT=$(realpath "$SUITE"); SUITE=$(basename "$SUITE" .sh)
elif [ -f "$HERE/suites/$SUITE.sh" ]; then SCRIPT=$HERE/suites/$SUITE.sh
else echo "run-e2e: no suite '$SUITE' (have: $(cd "$HERE/suites" && ls *.sh | sed 's/\.sh$//' | tr '\n' ' '))" >&2; exit 2; fi
HANDLER_DIR=$(realpath -m "${HANDLER_DIR:-$REPO/build/default/handler/plugin}")
CACHE=$(realpath -m "${COWSTORE_E2E_CACHE:-$REPO/build/e2e-cache}")
OUT=$(realpath -m "${OUT:-$REPO/build/e2e-out/$SUITE${RUNNER_SPEC:+-${RUNNER_SPEC#*/}}}")
case "$SCRIPT$HANDLER_DIR" in *" "*) echo "run-e2e: paths with spaces are not supported (kernel command line)" >&2; exit 2 ;; esac

T0=$(date +%s.%N)
# CI reads the last line: print it even when the harness itself breaks.
SUMMARY_DONE=
trap '[ -n "$SUMMARY_DONE" ] || { echo "run-e2e: harness error before the suite ran (see above)"; echo "0 passed, 1 failed, 0 skipped"; }' EXIT
t() { printf '[run-e2e %6.1fs] %s\n' "$(echo "$(date +%s.%N) - $T0" | bc)" "$*"; }

if [ -z "${SKIP_APT:-}" ]; then
    # Everything the host and the guest (which runs the host's binaries) need.
    PKGS="qemu-system-x86 qemu-utils busybox-static kmod cpio bc file e2fsprogs util-linux
          tcmu-runner targetcli-fb python3-rtslib-fb dbus sg3-utils ddpt libiscsi-bin python3 iproute2
          gcc libc6-dev libiscsi-dev"
    missing=
    for p in $PKGS; do
        dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null | grep -q '^ii' || missing="$missing $p"
    done
    if [ -n "$missing" ]; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends $PKGS
        t "installed:$missing"
    fi
fi

RUNNER_ROOT=; RUNNER_VERSION=
if [ -n "$RUNNER_SPEC" ]; then
    case $RUNNER_SPEC in */?*) ;; *) echo "run-e2e: --tcmu-runner takes SUITE/VERSION, e.g. bullseye/1.5.2-6" >&2; exit 2 ;; esac
    rsuite=${RUNNER_SPEC%%/*}; rversion=${RUNNER_SPEC#*/}
    RUNNER_CACHE=$CACHE/tcmu-runner-$rversion
    if ! why=$("$REPO/tools/fetch-tcmu-runner-debs.sh" "$RUNNER_CACHE" "$rsuite" "$rversion" 2>&1); then
        echo "$why" | tail -n 8
        echo "run-e2e: SKIPPED: tcmu-runner $rversion ($rsuite) cannot be had from Debian's archive here, so the suite '$SUITE' was NOT run against it"
        SUMMARY_DONE=1
        echo "0 passed, 0 failed, 1 skipped"
        exit 77
    fi
    RUNNER_ROOT=$RUNNER_CACHE/root
    RUNNER_VERSION=${rversion%-*}     # what the runner itself prints (1.5.2-6 -> 1.5.2)
    t "tcmu-runner $rversion ($rsuite) in $RUNNER_ROOT"
fi

eval "$("$HERE/vm/fetch-kernel.sh" "$CACHE")"      # sets KVER, KROOT
INITRD=$CACHE/initramfs-$KVER.cpio.gz
"$HERE/vm/mkinitramfs.sh" "$KVER" "$KROOT" "$INITRD"
t "kernel $KVER, initramfs ready"

if [ "$SMP" = auto ]; then
    SMP=$(awk -v n="$(nproc)" '{print ($1 > n / 2) ? 1 : 2}' /proc/loadavg)
    t "guest vCPUs: $SMP (host load average $(cut -d' ' -f1 /proc/loadavg) on $(nproc) cores)"
fi

# Fresh out dir; the guest sees it as /e2e-out (writable 9p share).
rm -rf "$OUT"; mkdir -p "$OUT/logs"
{
    echo "E2E_SUITE=$SUITE"
    echo "E2E_REPO=$REPO"
    echo "E2E_HANDLER_DIR=$HANDLER_DIR"
    echo "E2E_MEM=$MEM"
    echo "E2E_HOST_TIMEOUT=$TIMEOUT"
    echo "E2E_SMP=$SMP"
    if [ -n "$RUNNER_ROOT" ]; then
        echo "E2E_RUNNER_ROOT=$RUNNER_ROOT"
        echo "E2E_RUNNER_VERSION=$RUNNER_VERSION"
        echo "E2E_RUNNER_PKG='tcmu-runner $rversion ($rsuite)'"
    fi
    env | grep -E '^E2E_[A-Z0-9_]+=' | grep -vE '^E2E_(SUITE|REPO|HANDLER_DIR|MEM|HOST_TIMEOUT|RUNNER_ROOT|RUNNER_VERSION|RUNNER_PKG)=' \
        | sed -E "s/^([^=]+)=(.*)$/\1='\2'/" || true
} > "$OUT/e2e.env"

# The guest kills its own script 30 s before the host kills the VM, so that
# dmesg and the results still get written; the host timeout is the backstop.
GUEST_TIMEOUT=$(( TIMEOUT > 60 ? TIMEOUT - 30 : TIMEOUT ))
set +e
KERNEL=$KROOT/boot/vmlinuz-$KVER INITRD=$INITRD OUTDIR=$OUT TIMEOUT=$TIMEOUT MEM=$MEM SMP=$SMP \
    "$HERE/vm/run-vm.sh" "$SCRIPT" e2e.timeout=$GUEST_TIMEOUT \
    e2e.tmpfs=${E2E_TMPFS:-1g} e2e.expose="$REPO,$HANDLER_DIR${RUNNER_ROOT:+,$RUNNER_ROOT}" ${SHELL_AFTER:+e2e.shell=1} 2>&1 | tee "$OUT/console.log"
rc=${PIPESTATUS[0]}
set -e

# Summary from the guest's results.txt ("E2E-RESULT <name> <STATUS> ...").
R=$OUT/results.txt; touch "$R"
count() { grep -cE "^E2E-RESULT +[^ ]+ +$1( |$)" "$R" || true; }
np=$(count PASS); nf=$(count FAIL); ns=$(count SKIP); nx=$(count XFAIL); nxp=$(count XPASS)
echo
echo "================ e2e suite '$SUITE' ================"
grep -E "^E2E-(RESULT +[^ ]+ +(FAIL|XFAIL|XPASS|SKIP)|NOTE|TABLE)" "$R" | sed 's/^E2E-//' || true
case $rc in
    0|1|77) ;;
    123) echo "VM: the guest script could not run (not found / not executable, see console.log)"; nf=$((nf+1)) ;;
    124) echo "VM: host-side timeout after ${TIMEOUT}s"; nf=$((nf+1)) ;;
    125) echo "VM: guest script timed out or was killed"; nf=$((nf+1)) ;;
    126) echo "VM: guest init failed (see console.log)"; nf=$((nf+1)) ;;
    *)   echo "VM: abnormal exit rc=$rc"; nf=$((nf+1)) ;;
esac
[ $rc -eq 1 ] && [ "$nf" -eq 0 ] && { echo "guest reported failure without a failed step"; nf=1; }
echo "pass=$np fail=$nf skip=$ns xfail(known, counted as skipped)=$nx xpass=$nxp rc=$rc"
echo "logs: $OUT (console.log, dmesg.txt, results.txt, logs/)"
t "done"
SUMMARY_DONE=1
echo "$((np + nxp)) passed, $nf failed, $((ns + nx)) skipped"
exit $rc
