#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Compiles tests/plugin/abi_vs_tcmu_runner_1_5_4.cc against tcmu-runner
# 1.5.4's real headers: our own declaration of the ABI (handler/plugin/
# tcmu_abi.h) must match them field by field. The build itself never needs
# these headers; this test fetches them (Debian's source package `tcmu`,
# tools/fetch-tcmu-headers.sh, sha256-verified) or takes an extracted tree.
#
# usage: check_abi_against_tcmu_headers.sh CXX REPO_ROOT CACHE_DIR [TCMU_TREE]
# exit:  0 match, 1 mismatch (the compiler's message names the field),
#        77 skipped: the headers cannot be had here (the reason is printed)
set -eu
CXX=$1
ROOT=$2
CACHE=$3
TREE=${4:-}

if [ -z "$TREE" ]; then
    if ! out=$(sh "$ROOT/tools/fetch-tcmu-headers.sh" "$CACHE" 2>&1); then
        echo "SKIP: tcmu-runner 1.5.4 headers not available on this machine, so our ABI"
        echo "      declaration was NOT compared with them. Reason:"
        echo "$out" | tail -n 5 | sed 's/^/      /'
        echo "      (needs Debian's archive reachable by apt, or -DCOWSTORE_TCMU_SOURCE=<extracted tcmu-runner-1.5.4 tree>)"
        exit 77
    fi
    TREE=$CACHE/tcmu-1.5.4
fi
[ -f "$TREE/tcmu-runner.h" ] || { echo "FAIL: $TREE has no tcmu-runner.h"; exit 1; }
if [ -f "$TREE/CMakeLists.txt" ] && ! grep -q '^set(VERSION 1\.5\.4)' "$TREE/CMakeLists.txt"; then
    echo "FAIL: $TREE is not tcmu-runner 1.5.4 ($(grep '^set(VERSION' "$TREE/CMakeLists.txt"))"
    exit 1
fi

if "$CXX" -std=c++20 -fsyntax-only -Wall -Wextra -Werror -I"$ROOT" \
        -isystem "$TREE" -isystem "$TREE/ccan" "$ROOT/tests/plugin/abi_vs_tcmu_runner_1_5_4.cc"; then
    echo "OK: handler/plugin/tcmu_abi.h matches tcmu-runner 1.5.4's headers ($TREE)"
else
    echo "FAIL: handler/plugin/tcmu_abi.h differs from tcmu-runner 1.5.4's headers ($TREE)"
    exit 1
fi
