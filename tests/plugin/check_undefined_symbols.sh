#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Checks that dlopen(handler_cowstore.so) inside Debian's stock tcmu-runner
# can never fail on a missing symbol: every symbol the plugin needs
# (nm -D --undefined-only, strong ones; weak ones may stay unresolved) must
# be exported by /usr/bin/tcmu-runner, libtcmu.so.2, or one of the C/C++
# runtime libraries the plugin itself links (with the same symbol version),
# and the plugin may link no other library. Also checks that it exports
# handler_init and nothing else.
#
# usage: check_undefined_symbols.sh PLUGIN [RUNNER [LIBTCMU]]
# exit:  0 ok, 1 problems (listed), 77 skipped (tcmu-runner not installed)
set -eu
SO=$1
RUNNER=${2:-/usr/bin/tcmu-runner}
LIBTCMU=${3:-/usr/lib/x86_64-linux-gnu/libtcmu.so.2}
LIBDIRS="/lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /lib64 /usr/lib64"

for f in "$RUNNER" "$LIBTCMU"; do
    if [ ! -e "$f" ]; then
        echo "SKIP: $f not found (apt-get install tcmu-runner libtcmu2)"
        exit 77
    fi
done
[ -f "$SO" ] || { echo "FAIL: $SO not found"; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# name@VERSION (or bare name) of every defined dynamic symbol of a file.
defined() { nm -D --defined-only "$1" | awk 'NF >= 3 { s = $3; sub(/@@/, "@", s); print s }'; }

status=0
: >"$tmp/provided"
defined "$RUNNER" >>"$tmp/provided"
defined "$LIBTCMU" >>"$tmp/provided"

# The runtime libraries the plugin may depend on (DT_NEEDED).
for lib in $(readelf -d "$SO" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    case $lib in
        libc.so.6|libm.so.6|libgcc_s.so.1|libstdc++.so.6|ld-linux-x86-64.so.2|libpthread.so.0|libdl.so.2) ;;
        *) echo "FAIL: unexpected dependency $lib (the daemon may not have it)"; status=1; continue ;;
    esac
    path=
    for d in $LIBDIRS; do [ -e "$d/$lib" ] && { path=$d/$lib; break; }; done
    [ -n "$path" ] || { echo "FAIL: dependency $lib not found in $LIBDIRS"; status=1; continue; }
    defined "$path" >>"$tmp/provided"
done
sort -u "$tmp/provided" -o "$tmp/provided"

nm -D --undefined-only "$SO" | awk '$1 == "U" { print $2 }' | sort -u >"$tmp/needed"
missing=$(comm -23 "$tmp/needed" "$tmp/provided")
if [ -n "$missing" ]; then
    echo "FAIL: symbols nothing in the daemon provides (dlopen would fail):"
    echo "$missing" | sed 's/^/  /'
    status=1
fi

exported=$(defined "$SO" | sed 's/@.*//' | sort -u | tr '\n' ' ')
if [ "$exported" != "handler_init " ]; then
    echo "FAIL: exports '$exported', expected only handler_init"
    status=1
fi

if [ $status -eq 0 ]; then
    echo "OK: $(wc -l <"$tmp/needed") undefined symbols, all provided by tcmu-runner, libtcmu.so.2 or the runtime; only handler_init exported"
fi
exit $status
