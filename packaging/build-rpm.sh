#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Checks packaging/rpm/cowstore.spec: parses it with rpmspec, lints it with
# rpmlint (packaging/rpm/rpmlint.toml lists each accepted finding with its
# reason; any other error or warning fails), builds the source RPM and the
# binary RPMs (cowstore, cowstore-handler) from the checkout's HEAD (no
# tcmu-runner source is needed), checks the handler lands in
# %{_libdir}/tcmu-runner and requires tcmu-runner >= 1.5.2 with no upper
# bound, and lints what it built.
# On a host without Fedora's macro packages (Debian 12: `rpm` has rpmbuild,
# no %cmake or systemd macros, no rpm database of the BuildRequires) the
# binary build loads packaging/rpm/macros.non-fedora and skips the
# BuildRequires check (--nodeps): the Debian build dependencies stand in.
# usage: packaging/build-rpm.sh [--out DIR] [--no-binary]
#        [--jobs N]   (default 1)
# Ends with "N passed, N failed".
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
OUT=$ROOT/build/rpm; BINARY=1; JOBS=1
while [ $# -gt 0 ]; do
    case "$1" in
        --out) OUT=$2; shift 2 ;;
        --binary) BINARY=1; shift ;;      # the default; kept for old callers
        --no-binary) BINARY=; shift ;;
        --jobs) JOBS=$2; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "build-rpm: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
SPEC=$HERE/rpm/cowstore.spec
LINTRC=$HERE/rpm/rpmlint.toml
pass=0; fail=0
LOG=$(mktemp); trap 'rm -f "$LOG"' EXIT
# check NAME CMD...: runs CMD quietly; on failure shows the tail of its output.
check() {
    if "${@:2}" >"$LOG" 2>&1; then pass=$((pass + 1)); echo "ok: $1"
    else fail=$((fail + 1)); echo "FAILED: $1"; tail -n 40 "$LOG" | sed 's/^/    /'; fi
}
# lint FILE...: rpmlint with our filters; clean means 0 errors and 0 warnings.
lint() {
    local out rc=0
    out=$(rpmlint -c "$LINTRC" "$@" 2>&1) || rc=$?
    echo "$out"
    [ "$rc" -eq 0 ] && grep -q ' 0 errors, 0 warnings' <<<"$out"
}

VERSION=$(sed -n 's/^project(cowstore VERSION \([0-9.]*\).*/\1/p' "$ROOT/CMakeLists.txt")
check "spec parses" rpmspec -P "$SPEC"
check "spec version matches CMakeLists.txt" bash -c "[ \"\$(rpmspec -q --srpm --qf '%{version}' '$SPEC')\" = '$VERSION' ]"
if command -v rpmlint >/dev/null; then
    check "rpmlint spec" lint "$SPEC"
else
    echo "skip: rpmlint not installed (tools/install-deps.sh installs it)"
fi
if command -v rpmbuild >/dev/null; then
    rm -rf "$OUT"; mkdir -p "$OUT/SOURCES"
    git -C "$ROOT" archive --format=tar --prefix="cowstore-$VERSION/" HEAD | xz -6 > "$OUT/SOURCES/cowstore-$VERSION.tar.xz"
    check "source rpm" rpmbuild --define "_topdir $OUT" -bs "$SPEC"
    if command -v rpmlint >/dev/null; then check "rpmlint source rpm" lint "$OUT"/SRPMS/*.src.rpm; fi
    if [ -n "$BINARY" ]; then
        extra=(--define "cowstore_jobs $JOBS" --define "_smp_build_ncpus $JOBS")
        if [ -z "$(rpm --eval '%{?cmake:yes}')" ]; then
            extra+=(--nodeps --load="$HERE/rpm/macros.non-fedora")
            echo "note: no Fedora rpm macros here: building with packaging/rpm/macros.non-fedora, --nodeps"
        fi
        check "binary rpms" rpmbuild --define "_topdir $OUT" "${extra[@]}" -bb "$SPEC"
        H=$(ls "$OUT"/RPMS/*/cowstore-handler-"$VERSION"-*.rpm 2>/dev/null | head -n 1)
        LIBDIR=$(rpm --eval '%{_libdir}')
        check "handler in %{_libdir}/tcmu-runner ($LIBDIR/tcmu-runner)" \
            bash -c "rpm -qlp '$H' | grep -qx '$LIBDIR/tcmu-runner/handler_cowstore.so'"
        check "handler requires tcmu-runner >= 1.5.2, no upper bound" bash -c \
            "r=\$(rpm -qp --requires '$H' | grep '^tcmu-runner'); [ \"\$r\" = 'tcmu-runner >= 1.5.2' ]"
        check "LICENSE shipped as %license" bash -c "rpm -qlp --licensefiles '$H' | grep -q '/LICENSE\$'"
        if command -v rpmlint >/dev/null && ls "$OUT"/RPMS/*/*.rpm >/dev/null 2>&1; then
            check "rpmlint binary rpms" lint "$OUT"/RPMS/*/*.rpm
        fi
    fi
else
    echo "skip: source and binary rpms (no rpmbuild)"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
