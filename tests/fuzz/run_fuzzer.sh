#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# run_fuzzer.sh FUZZER SEED_DIR WORK_DIR: fuzzes for $FUZZ_SECONDS (default 60)
# starting from the seed corpus; new inputs go to WORK_DIR. libFuzzer's final
# stats line (stat::number_of_executed_units) reports the executions. Memory is
# bounded (-rss_limit_mb, -malloc_limit_mb): an input that makes a target
# allocate without bound is a finding, as is one that runs past -timeout.
set -e
fuzzer=$1 seeds=$2 work=$3
mkdir -p "$work"
exec "$fuzzer" -max_total_time="${FUZZ_SECONDS:-60}" -print_final_stats=1 -rss_limit_mb=2048 -malloc_limit_mb=512 \
  -timeout=30 "$work" "$seeds"
