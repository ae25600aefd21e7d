#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Suite "xcopy-sessions": only the multi-initiator EXTENDED COPY check of
# issue 13 (the cowstore suite runs it too), for working on it without the
# whole cowstore suite: four iSCSI sessions with distinct initiator IQNs copy
# at once with colliding list IDs in LIST ID USAGE 00b, 10b and 11b, each
# checking its data and its own RECEIVE COPY RESULTS (guest/xcopy_sessions.c).
# Then a second run with three sessions.
. "$(dirname "$0")/../guest/lib.sh"
. "$E2E_DIR/guest/cowstore.sh"
. "$E2E_DIR/guest/xcopy-sessions.sh"
[ -f "$COW_SO" ] || skip_suite "handler_cowstore.so not found in ${COW_HANDLER_DIR:-?}"
IQN_XCS=iqn.2003-01.org.cowstore.e2e:xcopy-sessions
step scratch        mk_scratch 256M
step xcs-build      xcs_build
step runner-start   start_runner --handler-path "$COW_HANDLER_DIR"
step pool-create    cow_pool_create px 512M
step xcs-target     xcs_target px 7 $IQN_XCS
step xcs-4-sessions xcs_run $IQN_XCS 4 15
step xcs-3-sessions xcs_run $IQN_XCS 3 10
step runner-alive   runner_alive
step runner-stop    stop_runner TERM
step pool-check     cow_pool_check px
finish
