#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Builds the Debian source and binary packages of cowstore from the
# committed tree, runs lintian, and installs the result into a scratch root.
#
# usage: packaging/build-deb.sh [--out DIR] [--install-root DIR] [--worktree]
#   --out           where the packages go (default build/deb)
#   --install-root  unpack the built .debs there and check the installed files
#   --worktree      package the work tree as it is (tracked and untracked,
#                   not ignored) instead of the committed HEAD
# One upstream tarball, no tcmu-runner source: dpkg-buildpackage needs no
# network. Ends with "N passed, N failed" (checks of this script).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
OUT=$ROOT/build/deb; INSTALL_ROOT=; WORKTREE=
while [ $# -gt 0 ]; do
    case "$1" in
        --out) OUT=$2; shift 2 ;;
        --install-root) INSTALL_ROOT=$2; shift 2 ;;
        --worktree) WORKTREE=1; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "build-deb: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
VERSION=$(sed -n 's/^project(cowstore VERSION \([0-9.]*\).*/\1/p' "$ROOT/CMakeLists.txt")
DEBVER=$(dpkg-parsechangelog -l "$HERE/debian/changelog" -S Version)
[ "${DEBVER%-*}" = "$VERSION" ] || { echo "build-deb: debian/changelog says $DEBVER, CMakeLists.txt $VERSION" >&2; exit 1; }
pass=0; fail=0
check() { # check DESCRIPTION CMD...
    if "${@:2}" >/dev/null 2>&1; then pass=$((pass + 1)); echo "ok: $1"
    else fail=$((fail + 1)); echo "FAILED: $1"; fi
}

# 1. The upstream tarball and the unpacked source tree.
rm -rf "$OUT"; mkdir -p "$OUT"
SRC=$OUT/cowstore-$VERSION
if [ -n "$WORKTREE" ]; then
    (cd "$ROOT" && git ls-files -z -co --exclude-standard -- . ':!packaging/debian' ':!build' |
        tar --null -T - --transform "s,^,cowstore-$VERSION/," -cf -) | xz -T0 -6 > "$OUT/cowstore_$VERSION.orig.tar.xz"
else
    git -C "$ROOT" archive --format=tar --prefix="cowstore-$VERSION/" HEAD -- . ':!packaging/debian' ':!build' |
        xz -T0 -6 > "$OUT/cowstore_$VERSION.orig.tar.xz"
fi
tar -C "$OUT" -xf "$OUT/cowstore_$VERSION.orig.tar.xz"
cp -r "$HERE/debian" "$SRC/debian"
cp "$HERE/systemd/cowstore-restore.service" "$SRC/debian/cowstore.cowstore-restore.service"
for u in service timer; do
    cp "$HERE/systemd/cowstore-metrics.$u" "$SRC/debian/cowstore.cowstore-metrics.$u"
done

# 2. Source package, then the binaries from a clean unpack of it.
(cd "$OUT" && dpkg-source -b "cowstore-$VERSION") >&2
check "source package" test -f "$OUT/cowstore_$DEBVER.dsc"
rm -rf "$SRC"
(cd "$OUT" && dpkg-source -x "cowstore_$DEBVER.dsc" "cowstore-$VERSION") >&2
(cd "$SRC" && dpkg-buildpackage -us -uc -b -j"${JOBS:-2}") >&2
ARCH=$(dpkg --print-architecture)
for p in cowstore cowstore-handler; do
    check "$p deb built" test -f "$OUT/${p}_${DEBVER}_$ARCH.deb"
done
check "source package has one upstream tarball (no tcmu component)" \
    bash -c "! ls '$OUT'/cowstore_$VERSION.orig-*.tar.* >/dev/null 2>&1"
check "handler depends on tcmu-runner (>= 1.5.2), no upper bound" bash -c \
    "dep=\$(dpkg-deb -f '$OUT/cowstore-handler_${DEBVER}_$ARCH.deb' Depends); echo \"\$dep\" | grep -q 'tcmu-runner (>= 1.5.2)' && ! echo \"\$dep\" | grep -q 'tcmu-runner (<'"

# 3. lintian on everything; errors and warnings fail.
if command -v lintian >/dev/null; then
    lintian --fail-on error,warning --info "$OUT/cowstore_$DEBVER.dsc" "$OUT"/*_"$DEBVER"_"$ARCH".deb \
        | tee "$OUT/lintian.txt" >&2 || true
    check "lintian clean (errors, warnings)" \
        lintian --fail-on error,warning "$OUT/cowstore_$DEBVER.dsc" "$OUT"/*_"$DEBVER"_"$ARCH".deb
fi

# 4. Install into a scratch root and check the files land where they must.
if [ -n "$INSTALL_ROOT" ]; then
    rm -rf "$INSTALL_ROOT"; mkdir -p "$INSTALL_ROOT"
    for d in "$OUT"/*_"$DEBVER"_"$ARCH".deb; do dpkg-deb -x "$d" "$INSTALL_ROOT"; done
    MA=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
    check "cowctl installed" test -x "$INSTALL_ROOT/usr/sbin/cowctl"
    check "cowctl runs" "$INSTALL_ROOT/usr/sbin/cowctl" --help
    check "handler in tcmu-runner's directory" test -f "$INSTALL_ROOT/usr/lib/$MA/tcmu-runner/handler_cowstore.so"
    check "handler exports handler_init" bash -c "nm -D --defined-only '$INSTALL_ROOT/usr/lib/$MA/tcmu-runner/handler_cowstore.so' | grep -qw handler_init"
    check "man page" test -f "$INSTALL_ROOT/usr/share/man/man8/cowctl.8.gz"
    check "bash completion" test -f "$INSTALL_ROOT/usr/share/bash-completion/completions/cowctl"
    check "restore unit" test -f "$INSTALL_ROOT/lib/systemd/system/cowstore-restore.service"
    check "metrics service and timer" test -f "$INSTALL_ROOT/lib/systemd/system/cowstore-metrics.service" -a \
        -f "$INSTALL_ROOT/lib/systemd/system/cowstore-metrics.timer"
    check "config dir" test -d "$INSTALL_ROOT/etc/cowstore"
    check "pool dir" test -d "$INSTALL_ROOT/var/lib/cowstore/pools"
    check "no tcmu-runner file installed" bash -c "! dpkg-deb -c '$OUT/cowstore-handler_${DEBVER}_$ARCH.deb' | grep -qE 'libtcmu|\.h$'"
fi
echo "packages in $OUT"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
