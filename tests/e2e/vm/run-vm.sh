#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Boot the e2e guest under qemu TCG and return the guest script's exit status.
#
# usage: run-vm.sh GUEST_SCRIPT [extra kernel args...]
# env (required): KERNEL, INITRD, OUTDIR (writable share, seen as /e2e-out)
# env (optional): TIMEOUT host-side hard limit in s (default 900), MEM MiB (2048), SMP (2)
# exit: guest rc; 124 host timeout; 125 guest timeout/killed; 99 no exit code reported
set -uo pipefail
SCRIPT=${1:?usage: run-vm.sh GUEST_SCRIPT [kernel args]}; shift
: "${KERNEL:?}" "${INITRD:?}" "${OUTDIR:?}"
TIMEOUT=${TIMEOUT:-900}
mkdir -p "$OUTDIR"
start=$(date +%s.%N)
# stdin from /dev/null: qemu must never wait on (or put into raw mode) a CI terminal
timeout -k 10 "$TIMEOUT" \
qemu-system-x86_64 -accel tcg,thread=multi -cpu max -smp "${SMP:-2}" -m "${MEM:-2048}" \
    -nographic -no-reboot -nic none \
    -kernel "$KERNEL" -initrd "$INITRD" \
    -append "console=ttyS0 panic=-1 quiet loglevel=4 e2e.script=$SCRIPT $*" \
    -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
    -virtfs local,path="$OUTDIR",mount_tag=out,security_model=none,multidevs=remap \
    -device isa-debug-exit,iobase=0xf4,iosize=0x04 </dev/null
qrc=$?
end=$(date +%s.%N)
if [ $qrc -eq 124 ] || [ $qrc -eq 137 ]; then rc=124; echo "E2E-HOST: host-side TIMEOUT after ${TIMEOUT}s, VM killed"
elif [ $((qrc & 1)) -eq 1 ]; then rc=$((qrc >> 1))
else rc=99; echo "E2E-HOST: guest did not report an exit code (qemu rc=$qrc)"; fi
printf 'E2E-HOST: guest rc=%d, VM wall %.1fs\n' "$rc" "$(echo "$end - $start" | bc)"
exit $rc
