#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Fetches a released tcmu-runner (packages `tcmu-runner` and `libtcmu2`) from
# Debian's archive with apt's own tools, verified by apt against the signed
# Release file, and unpacks both with dpkg-deb -x: a runner to test
# handler_cowstore.so in without installing anything. Default: 1.5.2-6 from
# bullseye (Debian 11), the oldest tcmu-runner cowstore supports.
#
# usage: tools/fetch-tcmu-runner-debs.sh DESTDIR [SUITE VERSION]
#   Leaves DESTDIR/root/usr/bin/tcmu-runner,
#   DESTDIR/root/usr/lib/<multiarch>/libtcmu.so.2 (and the handlers Debian
#   ships) and DESTDIR/VERSION (the version, once everything verified).
#   Exits non-zero with the reason on stderr when they cannot be had.
#
# apt runs with a private sources list, lists, cache and state directory
# under DESTDIR/apt: /etc/apt and /var/lib/apt are never written. The mirror
# is the machine's own Debian mirror (its first `deb` entry ending in
# /debian) unless COWSTORE_DEBIAN_MIRROR names one.
set -eu

die() { echo "fetch-tcmu-runner-debs: $*" >&2; exit 1; }

[ $# -eq 1 ] || [ $# -eq 3 ] || die "usage: $0 DESTDIR [SUITE VERSION]"
DEST=$1
SUITE=${2:-bullseye}
VERSION=${3:-1.5.2-6}
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
APT_ETC=${COWSTORE_APT_ETC:-/etc/apt}
mkdir -p "$DEST"
DEST=$(cd "$DEST" && pwd)

if [ -f "$DEST/VERSION" ] && [ "$(cat "$DEST/VERSION")" = "$VERSION" ] &&
   [ -x "$DEST/root/usr/bin/tcmu-runner" ]; then
    exit 0
fi

for tool in apt-get dpkg-deb dpkg; do
    command -v $tool >/dev/null 2>&1 || die "$tool not found (not a Debian-like system?)"
done
[ -f "$KEYRING" ] || die "$KEYRING not found (apt-get install debian-archive-keyring)"

mirror=${COWSTORE_DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
    # One-line and deb822 entries alike: the first URI ending in /debian.
    mirror=$(cat "$APT_ETC/sources.list" "$APT_ETC"/sources.list.d/*.list \
                 "$APT_ETC"/sources.list.d/*.sources 2>/dev/null |
             grep -v '^[[:space:]]*#' | grep -o 'https\?://[^[:space:]]*/debian/\?' |
             head -n 1 | sed 's,/$,,')
fi
[ -n "$mirror" ] || die "no Debian mirror in $APT_ETC (set COWSTORE_DEBIAN_MIRROR)"
ARCH=$(dpkg --print-architecture)

APT=$DEST/apt
rm -rf "$APT" "$DEST/root" "$DEST/VERSION"
mkdir -p "$APT/sources.list.d" "$APT/lists/partial" "$APT/cache/archives/partial" \
         "$APT/state" "$APT/download"
: >"$APT/state/status"
echo "deb [signed-by=$KEYRING arch=$ARCH] $mirror $SUITE main" >"$APT/sources.list"

set -- -o "Dir::Etc::SourceList=$APT/sources.list" \
       -o "Dir::Etc::SourceParts=$APT/sources.list.d" \
       -o "Dir::State=$APT/state" \
       -o "Dir::State::Lists=$APT/lists" \
       -o "Dir::State::status=$APT/state/status" \
       -o "Dir::Cache=$APT/cache" \
       -o "APT::Sandbox::User=$(id -un)" \
       -o "Debug::NoLocking=true"

apt-get -q "$@" --error-on=any update >"$APT/update.log" 2>&1 ||
    { cat "$APT/update.log" >&2; die "apt-get update ($mirror $SUITE, private lists) failed"; }

(cd "$APT/download" && apt-get -q "$@" download "tcmu-runner=$VERSION" "libtcmu2=$VERSION") \
    >"$APT/download.log" 2>&1 ||
    { cat "$APT/download.log" >&2; die "apt-get download tcmu-runner=$VERSION libtcmu2=$VERSION ($SUITE) failed"; }

mkdir -p "$DEST/root"
for pkg in tcmu-runner libtcmu2; do
    deb=$(ls "$APT/download/${pkg}_"*.deb 2>/dev/null | head -n 1)
    [ -n "$deb" ] || die "no $pkg .deb downloaded"
    got=$(dpkg-deb -f "$deb" Version)
    [ "$got" = "$VERSION" ] || die "$deb is version $got, expected $VERSION"
    dpkg-deb -x "$deb" "$DEST/root" || die "dpkg-deb -x $deb failed"
done
[ -x "$DEST/root/usr/bin/tcmu-runner" ] || die "no usr/bin/tcmu-runner in the tcmu-runner package"
ls "$DEST"/root/usr/lib/*/libtcmu.so.2 >/dev/null 2>&1 || die "no libtcmu.so.2 in libtcmu2"
echo "$VERSION" >"$DEST/VERSION"
echo "fetch-tcmu-runner-debs: tcmu-runner $VERSION ($SUITE) unpacked in $DEST/root"
