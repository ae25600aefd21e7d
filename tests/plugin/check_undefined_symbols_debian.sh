#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Runs check_undefined_symbols.sh against one of Debian's tcmu-runner
# releases, fetched and unpacked by tools/fetch-tcmu-runner-debs.sh.
#
# usage: check_undefined_symbols_debian.sh PLUGIN REPO_ROOT CACHE_DIR SUITE VERSION
# exit:  as check_undefined_symbols.sh; 77 (skipped, reason printed) when the
#        packages cannot be had here.
set -eu
SO=$1
ROOT=$2
CACHE=$3
SUITE=$4
VERSION=$5

if ! out=$(sh "$ROOT/tools/fetch-tcmu-runner-debs.sh" "$CACHE" "$SUITE" "$VERSION" 2>&1); then
    echo "SKIP: tcmu-runner $VERSION ($SUITE) not available, so the plugin's symbols were NOT"
    echo "      checked against it. Reason:"
    echo "$out" | tail -n 5 | sed 's/^/      /'
    exit 77
fi
libtcmu=$(ls "$CACHE"/root/usr/lib/*/libtcmu.so.2 | head -n 1)
echo "tcmu-runner $VERSION ($SUITE): $CACHE/root/usr/bin/tcmu-runner, $libtcmu"
exec sh "$ROOT/tests/plugin/check_undefined_symbols.sh" "$SO" "$CACHE/root/usr/bin/tcmu-runner" "$libtcmu"
