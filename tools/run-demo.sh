#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The README's main job: install what is needed, build, and show the product's point.
#   part 1 (seconds): the copy-on-write store alone: a 20 GiB clone inside a
#          pool as a metadata operation, against copying the same bytes.
#   part 2 (1-2 minutes): a real VAAI-enabled LUN: Linux LIO -> Debian's
#          tcmu-runner loading our handler_cowstore.so -> iSCSI on 127.0.0.1 and
#          tcm_loop; its VAAI status as ESXi lists it; a clone (EXTENDED COPY)
#          and an eager-zero (WRITE SAME) against the same work through the
#          data path. On a kernel with LIO this runs on the host; on one without
#          (no target_core_user module) inside a qemu VM running Debian 12's
#          kernel (tests/e2e). See tools/demo/README.md.
# usage: sudo tools/run-demo.sh
# env: SKIP_APT=1 (no apt-get), JOBS (build jobs), DEMO_MIB (size of the cloned
#      and zeroed "VMDK", default 256), COWSTORE_DEMO_VM=1 (use the VM even if
#      this kernel has LIO), SKIP_STORE_DEMO=1 (part 2 only)
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
JOBS=${JOBS:-$(nproc)}
DEMO_MIB=${DEMO_MIB:-256}
T0=$(date +%s)
[ "$(id -u)" -eq 0 ] || { echo "run-demo: run as root (sudo $0): it installs packages and drives the kernel's SCSI target" >&2; exit 1; }
if [ -z "${SKIP_APT:-}" ]; then
  bash tools/install-deps.sh all
fi
echo "== building (cmake preset 'default') =="
cmake --preset default >/dev/null
cmake --build --preset default -j "$JOBS" >/dev/null
HANDLER_DIR=$REPO/build/default/handler/plugin
COWCTL=$REPO/build/default/tools/cowctl/cowctl
[ -f "$HANDLER_DIR/handler_cowstore.so" ] && [ -x "$COWCTL" ] || { echo "run-demo: the build has no handler_cowstore.so or cowctl" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/var/tmp}/cowstore-demo.XXXXXX")
cleanup_dirs() { rm -rf "$work"; }
trap cleanup_dirs EXIT

if [ -z "${SKIP_STORE_DEMO:-}" ]; then
  echo
  echo "== part 1: the store alone: clone 20 GiB inside one pool vs copying it =="
  build/default/tools/store-demo/store-demo --dir "$work"
fi

echo
echo "== part 2: a real VAAI-enabled cowstore LUN (LIO + tcmu-runner + handler_cowstore.so + cowctl) =="

# Can this kernel serve LIO? (target_core_user loadable; configfs)
host_has_lio() {
  [ -z "${COWSTORE_DEMO_VM:-}" ] || return 1
  [ -d /sys/module/target_core_user ] || modprobe -n -q target_core_user 2>/dev/null || return 1
  modprobe -n -q tcm_loop 2>/dev/null || [ -d /sys/module/tcm_loop ] || return 1
  return 0
}

if host_has_lio; then
  # ---------------------------------------------------------------- on this host
  echo "This kernel has LIO: serving on this host."
  for m in target_core_user tcm_loop crc32c iscsi_target_mod; do modprobe "$m" || { echo "run-demo: modprobe $m failed" >&2; exit 1; }; done
  mountpoint -q /sys/kernel/config || mount -t configfs configfs /sys/kernel/config
  export E2E_DEMO_HOST=1 E2E_DEMO_MIB=$DEMO_MIB E2E_POOL_FS=ext4   # ext4: "do not mount a tmpfs over the pool dir"
  pid=$(pgrep -x tcmu-runner | head -1 || true)
  if [ -n "$pid" ]; then
    # Never disturb a running system tcmu-runner: use it only if it already has our handler.
    hdir=$(tr '\0' ' ' < /proc/$pid/cmdline | sed -n 's/.*--handler-path[= ]\([^ ]*\).*/\1/p')
    hdir=${hdir:-$(ls -d /usr/lib/*/tcmu-runner 2>/dev/null | head -1)}
    if [ ! -f "$hdir/handler_cowstore.so" ]; then
      cat >&2 <<EOF
run-demo: a tcmu-runner (pid $pid) is already running and it has no handler_cowstore.so
(looked in $hdir). This demo does not restart a system daemon. Either install the handler and
restart the daemon yourself:
    sudo install -m 0644 $HANDLER_DIR/handler_cowstore.so $hdir/ && sudo systemctl restart tcmu-runner
or stop it (sudo systemctl stop tcmu-runner) so the demo starts its own, or run the demo in the
VM instead: sudo COWSTORE_DEMO_VM=1 $0
EOF
      exit 1
    fi
    echo "Using the running tcmu-runner (pid $pid): it loads handler_cowstore.so from $hdir."
    export E2E_DEMO_RUNNER=system
    export COWSTORE_POOL_DIR=$(tr '\0' '\n' < /proc/$pid/environ | sed -n 's/^COWSTORE_POOL_DIR=//p')
    COWSTORE_POOL_DIR=${COWSTORE_POOL_DIR:-/var/lib/cowstore/pools}
    export E2E_DEMO_POOL=demo-$$
  else
    echo "Starting tcmu-runner with --handler-path $HANDLER_DIR (stopped again at the end)."
    export COWSTORE_POOL_DIR=$work/pools
  fi
  # The guest script's helpers (tests/e2e/guest/lib.sh) write to /e2e-out and /tmp/w:
  # give them a private /e2e-out in a mount namespace of their own.
  mkdir -p "$work/out"
  made_out=; [ -d /e2e-out ] || { mkdir /e2e-out; made_out=1; }
  trap 'cleanup_dirs; [ -z "$made_out" ] || rmdir /e2e-out 2>/dev/null' EXIT
  printf 'E2E_SUITE=guest-demo\nE2E_REPO=%s\nE2E_HANDLER_DIR=%s\n' "$REPO" "$HANDLER_DIR" > "$work/out/e2e.env"
  set +e
  unshare -m --propagation private bash -c 'mount --bind "$1" /e2e-out && exec bash "$2"' _ \
      "$work/out" "$REPO/tools/demo/guest-demo.sh" 2>&1 | tee "$work/demo.log" | sed -un 's/^.*DEMO| \{0,1\}//p; /E2E-RESULT.* FAIL /p; /^    | /p'
  rc=${PIPESTATUS[0]}
  set -e
  if [ $rc -ne 0 ]; then
    cp -r "$work/out" /var/tmp/cowstore-demo-logs.$$ 2>/dev/null
    echo "run-demo: the real-LUN part failed (rc=$rc); logs kept in /var/tmp/cowstore-demo-logs.$$" >&2
    exit 1
  fi
  [ -z "${E2E_DEMO_POOL:-}" ] || rm -f "$COWSTORE_POOL_DIR/$E2E_DEMO_POOL"
else
  # ---------------------------------------------------------------- in the VM
  echo "This kernel has no LIO (no loadable target_core_user), so the demo boots Debian 12's own"
  echo "kernel under qemu (software emulation, no KVM) with this machine's / read-only, and runs the"
  echo "same daemon, handler and tools there. Emulation is slow: compare the ratios, not the times."
  OUT=$REPO/build/e2e-out/demo
  MEM=$(( DEMO_MIB * 4 + 1024 )); [ $MEM -ge 2048 ] || MEM=2048
  set +e
  E2E_DEMO_MIB=$DEMO_MIB tests/e2e/run-e2e.sh --suite tools/demo/guest-demo.sh --handler-dir "$HANDLER_DIR" \
      --out "$OUT" --mem $MEM --timeout $(( 420 + DEMO_MIB )) 2>&1 \
    | tee "$work/vm.log" | tr -d '\r' \
    | sed -un 's/^.*DEMO| \{0,1\}//p; /E2E-RESULT.* FAIL /p; /^    | /p; /^VM: /p; s/^\[run-e2e.*\] kernel \(.*\)/(VM: Debian kernel \1)/p'
  rc=${PIPESTATUS[0]}
  set -e
  cp "$work/vm.log" "$OUT/run-e2e.log" 2>/dev/null || true
  if [ $rc -ne 0 ]; then
    echo "run-demo: the real-LUN part failed (rc=$rc); logs: $OUT (run-e2e.log, console.log, logs/)" >&2
    exit 1
  fi
  echo "(VM logs: $OUT)"
fi
echo
echo "run-demo: done in $(( $(date +%s) - T0 )) s."
