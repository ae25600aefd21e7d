#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Fetches tcmu-runner 1.5.4's source from Debian (source package `tcmu`) and
# extracts it, so handler_cowstore.so can be compiled against the exact
# headers the stock Debian daemon was built from. Nothing of tcmu-runner is
# kept in this repository; see docs/design/plugin.md.
#
# usage: tools/fetch-tcmu-headers.sh DESTDIR
#   Leaves DESTDIR/tcmu-1.5.4/ (the extracted tree) and DESTDIR/tcmu-1.5.4.ok
#   (a stamp holding the verified sha256). Exits non-zero with a message on
#   stderr when the source cannot be obtained or does not verify.
#
# The deb-src entries are derived from the machine's own apt configuration
# (every enabled `deb` entry, with the same options, Signed-By included, or
# apt refuses the entry) and written into DESTDIR/apt together with apt's
# lists and cache: /etc/apt and /var/lib/apt are never written.
set -eu

ORIG=tcmu_1.5.4.orig.tar.xz
SHA256=9dd159ce9692550731728b30b788ecf7adaa3cfdcd74f868e1caaa6e723ba5d7
TREE=tcmu-1.5.4
APT_ETC=${COWSTORE_APT_ETC:-/etc/apt}   # for tests of this script only

die() { echo "fetch-tcmu-headers: $*" >&2; exit 1; }

[ $# -eq 1 ] || die "usage: $0 DESTDIR"
DEST=$1
mkdir -p "$DEST"
DEST=$(cd "$DEST" && pwd)

if [ -f "$DEST/$TREE.ok" ] && [ "$(cat "$DEST/$TREE.ok")" = "$SHA256" ] &&
   [ -f "$DEST/$TREE/tcmu-runner.h" ]; then
    exit 0
fi

command -v apt-get >/dev/null 2>&1 || die "apt-get not found (not a Debian-like system?)"
command -v sha256sum >/dev/null 2>&1 || die "sha256sum not found"

APT=$DEST/apt
rm -rf "$APT"
mkdir -p "$APT/sources.list.d" "$APT/lists/partial" "$APT/cache/archives/partial" "$APT/download"

# One-line format: every enabled `deb` line becomes a `deb-src` line.
for f in "$APT_ETC/sources.list" "$APT_ETC"/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    sed -n 's/^[[:space:]]*deb[[:space:]]/deb-src /p' "$f"
done >"$APT/sources.list"

# deb822 format: stanzas whose Types include `deb` are copied with
# `Types: deb-src`; every other field (Signed-By, possibly multi-line) is kept.
n=0
for f in "$APT_ETC"/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    n=$((n + 1))
    awk '
        function flush() {
            if (nlines > 0 && has_deb && !disabled) {
                for (i = 1; i <= nlines; i++) print lines[i]
                print ""
            }
            nlines = 0; has_deb = 0; disabled = 0
        }
        /^[[:space:]]*#/ { next }
        /^[[:space:]]*$/ { flush(); next }
        {
            line = $0
            if (tolower($0) ~ /^types:/) {
                v = $0; sub(/^[^:]*:/, "", v)
                if (v ~ /(^|[[:space:]])deb([[:space:]]|$)/) has_deb = 1
                line = "Types: deb-src"
            } else if (tolower($0) ~ /^enabled:[[:space:]]*no/) {
                disabled = 1
            }
            lines[++nlines] = line
        }
        END { flush() }
    ' "$f" >"$APT/sources.list.d/src$n.sources"
done

if ! grep -q . "$APT/sources.list" && ! cat "$APT"/sources.list.d/*.sources 2>/dev/null | grep -q .; then
    die "no enabled 'deb' entry in $APT_ETC/sources.list or $APT_ETC/sources.list.d/"
fi

set -- -o "Dir::Etc::SourceList=$APT/sources.list" \
       -o "Dir::Etc::SourceParts=$APT/sources.list.d" \
       -o "Dir::State::Lists=$APT/lists" \
       -o "Dir::Cache=$APT/cache" \
       -o "APT::Sandbox::User=$(id -un)" \
       -o "Debug::NoLocking=true"

apt-get -q "$@" update >"$APT/update.log" 2>&1 ||
    { cat "$APT/update.log" >&2; die "apt-get update (deb-src only, private lists) failed"; }

(cd "$APT/download" && apt-get -q "$@" source --download-only tcmu) >"$APT/source.log" 2>&1 ||
    { cat "$APT/source.log" >&2; die "apt-get source --download-only tcmu failed"; }

[ -f "$APT/download/$ORIG" ] ||
    die "the archive's tcmu source is not version 1.5.4 (got: $(ls "$APT/download" | tr '\n' ' '))"

got=$(sha256sum "$APT/download/$ORIG" | cut -d' ' -f1)
[ "$got" = "$SHA256" ] || die "$ORIG: sha256 $got, expected $SHA256"

rm -rf "$DEST/$TREE" "$DEST/$TREE.ok"
tar -C "$DEST" -xf "$APT/download/$ORIG" || die "cannot extract $ORIG"
[ -f "$DEST/$TREE/tcmu-runner.h" ] || die "$ORIG does not contain $TREE/tcmu-runner.h"
echo "$SHA256" >"$DEST/$TREE.ok"
echo "fetch-tcmu-headers: tcmu-runner 1.5.4 source in $DEST/$TREE (sha256 verified)"
