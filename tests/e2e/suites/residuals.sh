#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Suite "residuals": libiscsi's iSCSI.iSCSIResiduals family (READ/WRITE whose
# iSCSI expected data transfer length differs from the CDB's) on three
# backstores in one VM: cowstore, Debian's stock handler_qcow in the same
# tcmu-runner, and LIO's in-kernel fileio. It shows which failures are
# TCMU's (cowstore and qcow fail alike) and which would be ours; the
# cowstore suite keeps the shared ones in icu-baseline-cowstore.txt.
# Step residuals-same-as-qcow fails if cowstore fails a test qcow passes.
. "$(dirname "$0")/../guest/lib.sh"
. "$E2E_DIR/guest/icu.sh"
. "$E2E_DIR/guest/cowstore.sh"

[ -f "$COW_SO" ] || skip_suite "handler_cowstore.so not found in ${COW_HANDLER_DIR:-?}"
QCOW_SO=$(ls /usr/lib/*/tcmu-runner/handler_qcow.so 2>/dev/null | head -n 1)
[ -n "$QCOW_SO" ] || skip_suite "Debian's handler_qcow.so not installed (tcmu-runner package)"
note "runner: $(runner_describe)"
FAMILY=iSCSI.iSCSIResiduals

step scratch        mk_scratch 800M
# Both handlers in one runner: --handler-path loads only the handlers in DIR.
mkdir -p $W/handlers && ln -sf "$QCOW_SO" "$COW_SO" $W/handlers/
step runner-start   start_runner --handler-path $W/handlers
step pool-create    cow_pool_create p0 1G
step bs-cowstore    cow_bs 1 c $((64 << 20)) p0 c
step iscsi-cowstore mk_iscsi_lun $CFS/core/user_1/c iqn.2003-01.org.cowstore.e2e:res-cowstore
step qemu-img       qemu-img create -q -f qcow2 $W/q.qcow2 64M
step bs-qcow        mk_user_bs 0 q $((64 << 20)) qcow/$W/q.qcow2
step iscsi-qcow     mk_iscsi_lun $CFS/core/user_0/q iqn.2003-01.org.cowstore.e2e:res-qcow
step bs-fileio      mk_fileio_bs 2 f $W/fileio.img $((64 << 20))
step iscsi-fileio   mk_iscsi_lun $CFS/core/fileio_2/f iqn.2003-01.org.cowstore.e2e:res-fileio
step icu-cowstore   icu_run cowstore $(iscsi_url iqn.2003-01.org.cowstore.e2e:res-cowstore) $FAMILY
step icu-qcow       icu_run qcow $(iscsi_url iqn.2003-01.org.cowstore.e2e:res-qcow) $FAMILY
step icu-fileio     icu_run fileio $(iscsi_url iqn.2003-01.org.cowstore.e2e:res-fileio) $FAMILY
icu_table cowstore qcow
icu_table cowstore fileio
for l in cowstore qcow fileio; do
    note "$l fails: $(awk '$2=="FAIL"{print $1}' $E2E_OUT/icu-$l.tsv | sort | tr '\n' ' ')"
done
step residuals-same-as-qcow bash -c "join <(sort $E2E_OUT/icu-cowstore.tsv) <(sort $E2E_OUT/icu-qcow.tsv) |
    awk '\$2==\"FAIL\" && \$3!=\"FAIL\" {print \"cowstore fails, qcow does not: \" \$1; bad=1} END {exit bad}'"
step runner-alive   runner_alive
finish
