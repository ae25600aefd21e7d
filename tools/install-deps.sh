#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Installs every Debian 12 package cowstore needs to build, test, benchmark,
# package and run its real-kernel suite. Idempotent; needs root (apt-get).
# usage: tools/install-deps.sh [build|test|all]   (default: all)
set -euo pipefail
what=${1:-all}

build_pkgs=(
  cmake ninja-build g++ clang clang-14 libclang-rt-14-dev lld pkg-config
  libgtest-dev libgmock-dev libbenchmark-dev libyaml-cpp-dev libcli11-dev
  dpkg-dev xz-utils ca-certificates binutils ccache
)
# The real-kernel suite boots Debian's kernel under qemu and drives the stock
# tcmu-runner daemon with our handler through LIO.
e2e_pkgs=(
  qemu-system-x86 qemu-utils busybox-static tcmu-runner libtcmu2 targetcli-fb
  python3-rtslib-fb dbus sg3-utils ddpt libiscsi-bin kmod cpio bc file
  e2fsprogs util-linux iproute2
  gcc libc6-dev libiscsi-dev   # the guest compiles tests/e2e/guest/xcopy_sessions.c
)
pkg_pkgs=(debhelper devscripts lintian fakeroot rpm rpmlint clang-tidy cppcheck)

case "$what" in
  build) pkgs=("${build_pkgs[@]}") ;;
  test|all) pkgs=("${build_pkgs[@]}" "${e2e_pkgs[@]}" "${pkg_pkgs[@]}") ;;
  *) echo "usage: $0 [build|test|all]" >&2; exit 2 ;;
esac

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#pkgs[@]} packages present"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages (${missing[*]}); run as root: sudo $0 $what" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
