#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Side-by-side benchmark (not a CI gate): in one VM run, clone a "VMDK" by
# EXTENDED COPY vs dd through the initiator, and eager-zero by WRITE SAME vs
# writing zeros, on LIO fileio and on cowstore; prints times, ratios, bytes
# over the initiator path and backing-store space consumed.
#
# Then, on cowstore, 4 MiB EXTENDED COPY to the destination LU with 1/8/16/32
# in flight (ESXi's clone shape and queue depth) beside TEST UNIT READY at the
# same depth and dd of the same bytes, and 32 in flight with other tcmu-runner
# worker thread counts per LUN.
#
# usage: bench/e2e/side-by-side.sh [--size-gib N] [--only qd] [--handler-dir DIR] [--out DIR] [--timeout SECS]
#   --size-gib  VMDK size in GiB (default 4). The guest keeps everything in RAM
#               (ext4 on a tmpfs-backed loop device): it gets 3.5*N+3 GiB of memory.
#   --only qd   only the queue-depth part (cowstore; 1 GiB took 15 min at host load ~17).
#   Guest settings (environment): E2E_BENCH_QDS="1 8 16 32", E2E_BENCH_QD_THREADS="8 32 64 16 32"
#   (worker threads per LUN to try at 32 in flight, in order), E2E_BENCH_QD_POOL_FS=ext4|tmpfs,
#   E2E_BENCH_QD_TURS=1000, E2E_BENCH_QD_STRACE=1 (0: no strace pass counting fdatasyncs).
#   other options as tests/e2e/run-e2e.sh; env SKIP_APT=1 as well.
# The cowstore half is skipped, with the reason, if handler_cowstore.so is not built.
# Results: <out>/bench.txt (default build/e2e-out/side-by-side/).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
SIZE=4; ARGS=(); OUT=$REPO/build/e2e-out/side-by-side; TIMEOUT=
while [ $# -gt 0 ]; do
    case "$1" in
        --size-gib) SIZE=$2; shift 2 ;;
        --size-gib=*) SIZE=${1#*=}; shift ;;
        --only) [ "$2" = qd ] || { echo "side-by-side: --only takes 'qd'" >&2; exit 2; }
                export E2E_BENCH_ONLY=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        --timeout) TIMEOUT=$2; shift 2 ;;
        --handler-dir) ARGS+=(--handler-dir "$2"); shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "side-by-side: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
[[ "$SIZE" =~ ^[1-9][0-9]*$ ]] || { echo "side-by-side: --size-gib takes a whole number" >&2; exit 2; }
MEM=$(( (SIZE * 7 / 2 + 3) * 1024 ))
# TCG moves roughly 50-150 MB/s through tcm_loop: allow ~4 min per GiB plus boot.
TIMEOUT=${TIMEOUT:-$(( 300 + SIZE * 240 ))}
export E2E_BENCH_SIZE_GIB=$SIZE
set +e
"$REPO/tests/e2e/run-e2e.sh" --suite "$HERE/guest/side-by-side.sh" --out "$OUT" \
    --mem "$MEM" --timeout "$TIMEOUT" "${ARGS[@]}"
rc=$?
echo
echo "================ side-by-side (${SIZE} GiB VMDK) ================"
cat "$OUT/bench.txt" 2>/dev/null || echo "(no bench.txt: see $OUT/console.log)"
exit $rc
