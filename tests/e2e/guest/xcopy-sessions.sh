# SPDX-License-Identifier: Apache-2.0
# Several iSCSI initiators copying at once with colliding EXTENDED COPY list
# IDs (issue 13), for guest suites (sourced after lib.sh and cowstore.sh).
#
# xcs_build : compiles guest/xcopy_sessions.c against Debian's libiscsi
#             (libiscsi-dev; the guest sees the host's compiler and headers)
#             into $W/xcopy_sessions
# xcs_target POOL HBA IQN : two 64 MiB cowstore LUs of one copy group in POOL
#             (backstores user_HBA/xs0, xs1), exported as LUN 0 and 1 of the
#             demo-mode iSCSI target IQN on 127.0.0.1:3260
# xcs_run IQN [SESSIONS [ROUNDS]] : the check (default 4 sessions, 15 rounds);
#             each session logs in with its own initiator IQN. What it checks:
#             guest/xcopy_sessions.c's header.
XCS_BIN=$W/xcopy_sessions

xcs_build() {
    local src=$E2E_DIR/guest/xcopy_sessions.c
    [ -f /usr/include/iscsi/iscsi.h ] || { echo "libiscsi-dev is not installed on the host (run-e2e.sh installs it)"; return 1; }
    gcc -O2 -Wall -Wextra -Werror -o "$XCS_BIN" "$src" -liscsi -lpthread
}

xcs_target() {
    local pool=$1 hba=$2 iqn=$3
    cow_bs "$hba" xs0 $((64 << 20)) "$pool" xs0 xs || return 1
    cow_bs "$hba" xs1 $((64 << 20)) "$pool" xs1 xs || return 1
    mk_iscsi_lun $CFS/core/user_$hba/xs0 "$iqn" 0 || return 1
    mk_iscsi_lun $CFS/core/user_$hba/xs1 "$iqn" 1
}

xcs_run() {
    local iqn=$1 out rc
    out=$(timeout -k 5 "${XCS_TIMEOUT:-600}" "$XCS_BIN" 127.0.0.1:3260 "$iqn" "${2:-4}" "${3:-15}" 2>&1); rc=$?
    printf '%s\n' "$out"
    local summary; summary=$(printf '%s\n' "$out" | grep '^xcopy_sessions:' | tail -1)
    [ -n "$summary" ] && note "$summary"
    return $rc
}
