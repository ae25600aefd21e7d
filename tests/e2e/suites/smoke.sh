#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Harness self-check: the guest boots, sees the host root and the modules,
# can reach configfs and write results. ~10 s.
. "$(dirname "$0")/../guest/lib.sh"
say "kernel $(uname -r), suite ${E2E_SUITE:-?}, repo ${E2E_REPO:-?}"
step mounts       bash -c 'mount | grep -E " / |9p|overlay"'
step modules      bash -c 'lsmod | grep -E "^(target_core_user|tcm_loop|iscsi_target_mod|target_core_file) "'
step configfs     test -d $CFS/core
step modprobe     modprobe -n -v target_core_user
step no-load-errs bash -c '! dmesg | grep -iE "unable to load|crypto_alloc"'
step scratch      mk_scratch 64M
finish
