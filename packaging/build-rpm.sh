#!/bin/bash
# Checks packaging/rpm/cowstore.spec: parses it with rpmspec, lints it with
# rpmlint when installed, builds the source RPM, and (with --binary, on a
# Fedora-family host that has the BuildRequires) the binary RPMs.
# usage: packaging/build-rpm.sh [--out DIR] [--tcmu TARBALL] [--binary]
# Ends with "N passed, N failed".
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
OUT=$ROOT/build/rpm; TCMU=${COWSTORE_TCMU_TARBALL:-}; BINARY=
while [ $# -gt 0 ]; do
    case "$1" in
        --out) OUT=$2; shift 2 ;;
        --tcmu) TCMU=$2; shift 2 ;;
        --binary) BINARY=1; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "build-rpm: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
SPEC=$HERE/rpm/cowstore.spec
pass=0; fail=0
check() { if "${@:2}" >/dev/null 2>&1; then pass=$((pass + 1)); echo "ok: $1"; else fail=$((fail + 1)); echo "FAILED: $1"; fi; }

VERSION=$(sed -n 's/^project(cowstore VERSION \([0-9.]*\).*/\1/p' "$ROOT/CMakeLists.txt")
check "spec parses" rpmspec -P "$SPEC"
check "spec version matches CMakeLists.txt" bash -c "[ \"\$(rpmspec -q --srpm --qf '%{version}' '$SPEC')\" = '$VERSION' ]"
if command -v rpmlint >/dev/null; then check "rpmlint" rpmlint "$SPEC"; else echo "skip: rpmlint not installed"; fi
if [ -z "$TCMU" ]; then
    TCMU=$(ls "$ROOT"/build/*/_deps/tcmu/apt/download/tcmu_1.5.4.orig.tar.xz "$ROOT"/build/deb/cowstore_*.orig-tcmu.tar.xz 2>/dev/null | head -1 || true)
fi
if [ -n "$TCMU" ] && command -v rpmbuild >/dev/null; then
    rm -rf "$OUT"; mkdir -p "$OUT/SOURCES"
    git -C "$ROOT" archive --format=tar --prefix="cowstore-$VERSION/" HEAD | xz -6 > "$OUT/SOURCES/cowstore-$VERSION.tar.xz"
    cp "$TCMU" "$OUT/SOURCES/tcmu_1.5.4.orig.tar.xz"
    check "source rpm" rpmbuild --define "_topdir $OUT" -bs "$SPEC"
    if [ -n "$BINARY" ]; then check "binary rpms" rpmbuild --define "_topdir $OUT" -bb "$SPEC"; fi
else
    echo "skip: source rpm (no tcmu tarball or no rpmbuild)"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
