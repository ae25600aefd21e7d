# SPDX-License-Identifier: Apache-2.0
# cowstore specifics for guest suites (sourced after lib.sh).
#
# The ONE place that knows how cowstore names LUNs (the cfgstring) and how
# pools are made and inspected. When the handler's cfgstring format or
# cowctl's command line changes, change it here only.
#
# cfgstring (docs/design/plugin.md, handler/common/cfgstring.h):
#     cowstore/<pool>/<lun>[;copy_group=<name>][;wce=0|1][;thin_on_thin=0|1]
# <pool> is the file $COWSTORE_POOL_DIR/<pool> in tcmu-runner's environment;
# the handler creates <lun> with the backstore's size if it does not exist.
# We use the ';' option separator: the kernel's configfs parser splits
# "dev_config=..." at ',' and rtslib/targetcli refuses ':'.

# Pools live on their own tmpfs by default: fdatasync is free there, and under
# TCG an ext4 journal commit per durable write (WCE=0: every write) costs ~20 ms
# and made iscsi-test-cu several times slower. A process kill (the suite's
# crash test) loses nothing either way; power-loss durability is the store's
# crash tests' job. E2E_POOL_FS=ext4 puts pools on the scratch ext4 instead.
if [ "${E2E_POOL_FS:-tmpfs}" = ext4 ]; then
    COWSTORE_POOL_DIR=${COWSTORE_POOL_DIR:-$W/pools}
else
    COWSTORE_POOL_DIR=${COWSTORE_POOL_DIR:-/run/cowstore-pools}
fi
export COWSTORE_POOL_DIR                      # for tcmu-runner and cowctl
# The build tree that holds the handler: <build>/handler/plugin -> <build>
COW_HANDLER_DIR=${E2E_HANDLER_DIR:-}
COW_BUILD_DIR=$(cd "$COW_HANDLER_DIR/../.." 2>/dev/null && pwd)
COW_SO=$COW_HANDLER_DIR/handler_cowstore.so

# cow_cfgstring POOL LUN [COPY_GROUP [MORE OPTIONS]] : the text after "dev_config=cowstore/"
# is what targetcli calls cfgstring; this returns the whole dev_config value.
# MORE OPTIONS: e.g. "thin_on_thin=0" (';'-separated).
cow_cfgstring() { echo "cowstore/$1/$2${3:+;copy_group=$3}${4:+;$4}"; }
# cow_tcli_cfgstring POOL LUN [COPY_GROUP] : the same for targetcli's cfgstring= (no subtype)
cow_tcli_cfgstring() { local c; c=$(cow_cfgstring "$@"); echo "${c#cowstore/}"; }

# cow_tool : path of cowctl (the build's, else an installed one), or nothing
cow_tool() {
    local c
    for c in "$COW_BUILD_DIR/tools/cowctl/cowctl" "$COW_BUILD_DIR/tools/cowctl" ; do
        [ -f "$c" ] && [ -x "$c" ] && { echo "$c"; return 0; }
    done
    command -v cowctl
}

# cow_pool_mount : the pools' own tmpfs (90 % of the guest's memory), once
cow_pool_mount() {
    mkdir -p "$COWSTORE_POOL_DIR"
    if [ "${E2E_POOL_FS:-tmpfs}" != ext4 ] && ! mountpoint -q "$COWSTORE_POOL_DIR"; then
        mount -t tmpfs -o size=90% tmpfs "$COWSTORE_POOL_DIR" || return 1
    fi
}
# cow_pool_create NAME SIZE [COWCTL OPTIONS...] : a pool file $COWSTORE_POOL_DIR/NAME
# (sparse) that its filesystem can hold; e.g. --soft-threshold 50. Without options
# it is cowctl's default, format 3 (64K allocation unit, 4K grain); a grain equal
# to the allocation unit makes format 2 (--allocation-unit 1M --grain 1M).
# Fails if it could outgrow the filesystem: the handler would then raise THIN
# PROVISIONING SOFT THRESHOLD REACHED (thin on thin, on by default), a unit
# attention that a suite not testing it must not meet (sg_xcopy gives up on one).
cow_pool_create() {
    local tool; tool=$(cow_tool) || { echo "no cowctl found (looked in $COW_BUILD_DIR/tools/cowctl and PATH)"; return 1; }
    cow_pool_mount || return 1
    local name=$1 size=$2; shift 2
    echo "+ $tool pool create $name --size $size $* (in $COWSTORE_POOL_DIR)"
    "$tool" pool create "$name" --size "$size" "$@" || return 1
    local out; out=$(cow_pool_field "$name" outgrows_backing) || return 1
    [ "$out" = False ] || { echo "pool $name ($size) can outgrow $COWSTORE_POOL_DIR ($(df -h --output=avail "$COWSTORE_POOL_DIR" | tail -1) free)"; return 1; }
}
# cow_pool_create_outgrowing NAME SIZE [COWCTL OPTIONS...] : a pool larger than its
# filesystem's free space, on purpose (thin on thin); fails if it is not
cow_pool_create_outgrowing() {
    local tool; tool=$(cow_tool) || { echo "no cowctl found"; return 1; }
    cow_pool_mount || return 1
    local name=$1 size=$2; shift 2
    echo "+ $tool pool create $name --size $size --overcommit $* (in $COWSTORE_POOL_DIR)"
    "$tool" pool create "$name" --size "$size" --overcommit "$@" || return 1
    local out; out=$(cow_pool_field "$name" outgrows_backing) || return 1
    [ "$out" = True ] || { echo "pool $name ($size) fits $COWSTORE_POOL_DIR: not thin on thin"; return 1; }
}
# cow_lun_create POOL LUN SIZE [COWCTL OPTIONS...] : a LUN made by cowctl before any
# backstore opens it (e.g. --overcommit: larger than the pool, which the handler's
# own create-on-open does not do); the backstore's size and block size must match
cow_lun_create() {
    local tool; tool=$(cow_tool) || { echo "no cowctl found"; return 1; }
    local pool=$1 lun=$2 size=$3; shift 3
    echo "+ $tool lun create $pool/$lun --size $size $*"
    "$tool" lun create "$pool/$lun" --size "$size" "$@"
}
# cow_pool_check NAME : the store's offline invariant checker (runner stopped)
cow_pool_check() {
    local tool; tool=$(cow_tool) || { echo "no cowctl found"; return 1; }
    "$tool" pool check "$1"
}
# cow_damage_superblocks NAME : flips one bit inside each of pool NAME's two
# superblock copies (4 KiB slots), past their magic: the store then sees a
# damaged pool, not a missing one, and must refuse it
cow_damage_superblocks() {
    python3 - "$COWSTORE_POOL_DIR/$1" <<'PY'
import sys
with open(sys.argv[1], 'r+b') as f:
    for off in (100, 4096 + 100):
        f.seek(off); b = f.read(1); f.seek(off); f.write(bytes([b[0] ^ 0x40]))
PY
}
# cow_pool_show NAME : space figures as cowctl reports them
cow_pool_show() {
    local tool; tool=$(cow_tool) || { echo "no cowctl found"; return 1; }
    "$tool" pool show "$1"
}
# cow_lun_delete POOL LUN : drop a LUN (its backstore must be gone)
cow_lun_delete() {
    local tool; tool=$(cow_tool) || { echo "no cowctl found"; return 1; }
    "$tool" lun delete "$1/$2"
}
# cow_pool_field POOL FIELD : one number from `cowctl --json pool show` (allocated,
# shared, saved_by_clones, free, ...), in bytes
cow_pool_field() {
    local tool; tool=$(cow_tool) || return 1
    "$tool" --json pool show "$1" | python3 -c "import json,sys; print(json.load(sys.stdin)['$2'])"
}
# cow_pool_bytes NAME : bytes the pool file occupies on the scratch file
# system (physical, from st_blocks): the space consumption figure that does
# not depend on any cowstore tool.
cow_pool_bytes() { echo $(( $(stat -c %b "$COWSTORE_POOL_DIR/$1") * 512 )); }

# cow_bs HBA NAME SIZE POOL LUN [COPY_GROUP [OPTIONS]] : a user:cowstore backstore via configfs,
# COW_BLOCK_SIZE-byte blocks (default 512), max transfer COW_MAX_SECTORS blocks
# (default 1 MiB worth; the kernel's default of 128 blocks = 64 KiB is slow).
cow_bs() {
    local bs=${COW_BLOCK_SIZE:-512}
    mk_user_bs "$1" "$2" "$3" "$(cow_cfgstring "$4" "$5" "${6:-}" "${7:-}")" $bs "${COW_MAX_SECTORS:-$(( (1 << 20) / bs ))}"
}
