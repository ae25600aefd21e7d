#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# ctest driver for README.md's command blocks (tests/readme/readme_blocks.py).
#
# usage: readme_test.sh host    README COWCTL   host blocks in a scratch dir, then
#                                                the objects they made are there
#        readme_test.sh mutants README COWCTL REPO
#                                               edits that break a block fail the test:
#                                               the runner, the linter and the checker
#                                               must each catch theirs
# The vm blocks run in the e2e VM: tests/e2e/suites/readme.sh.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BLOCKS="python3 $HERE/readme_blocks.py"
what=$1 README=$2 COWCTL=$3
SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/readme-test.XXXXXX")
trap 'rm -rf "$SCRATCH"' EXIT
mkdir -p "$SCRATCH/bin" "$SCRATCH/run"
ln -s "$COWCTL" "$SCRATCH/bin/cowctl"
# The reader's cowctl is the build's; pools go to the scratch dir, not /var/lib.
export PATH="$SCRATCH/bin:$PATH" COWSTORE_POOL_DIR="$SCRATCH/run/pools" COWSTORE_RUN_DIR="$SCRATCH/run/sock"
fail=0
ok()  { echo "ok: $*"; }
bad() { echo "FAILED: $*"; fail=1; }

# run_host FILE : the host blocks of FILE, in a fresh scratch dir
run_host() {
    rm -rf "$SCRATCH/run"; mkdir -p "$SCRATCH/run"
    $BLOCKS run "$1" --mode host --cwd "$SCRATCH/run"
}
# mutant NAME PYTHON_EXPR : README with the edit applied (s is the text)
mutant() {
    python3 -c "import sys; s=open(sys.argv[1]).read(); t=$2; assert t != s, 'the edit changed nothing'; open(sys.argv[2],'w').write(t)" \
        "$README" "$SCRATCH/$1.md" || { bad "mutant $1 could not be made (README changed?)"; return 1; }
}
# expect_fail NAME REGEX CMD... : CMD fails and says REGEX
expect_fail() {
    local name=$1 pat=$2 out rc; shift 2
    out=$("$@" 2>&1); rc=$?
    if [ $rc -ne 0 ] && grep -qE -- "$pat" <<< "$out"; then ok "$name: refused ($(grep -E -- "$pat" <<< "$out" | head -n 1))"
    else bad "$name: rc=$rc, expected a failure saying /$pat/"; printf '%s\n' "$out" | tail -n 15 | sed 's/^/    | /'; fi
}

case $what in
host)
    if run_host "$README"; then ok "host blocks ran"; else bad "host blocks"; fi
    # What the blocks claim to make is there (a block can exit 0 and make nothing).
    for l in ds1 ds2; do
        if cowctl lun list tank 2>&1 | grep -qw "$l"; then ok "tank/$l exists"; else bad "tank/$l was not created"; fi
    done
    if [ -f "$COWSTORE_POOL_DIR/tank" ]; then ok "pool file in the pool dir"; else bad "no pool file $COWSTORE_POOL_DIR/tank"; fi
    ;;
mutants)
    REPO=$4
    # A LUN in a pool that does not exist (the README once exported a LUN it
    # never made): the runner stops there and names the README line.
    mutant nopool "s.replace('cowctl lun create tank/ds2', 'cowctl lun create tank2/ds2', 1)" &&
        expect_fail "lun in a missing pool" "README.md:[0-9]+: this command failed .*tank2/ds2" run_host "$SCRATCH/nopool.md"
    # A failure in the middle of a block is not hidden by a later success.
    mutant midblock "s.replace('cowctl lun create tank/ds1 --size 500G', 'cowctl lun create tank/ds1 --size 500Q', 1)" &&
        expect_fail "bad size mid-block" "this command failed .*500Q" run_host "$SCRATCH/midblock.md"
    # A block nobody said how to test.
    mutant unmarked "s.replace('<!-- readme-test: host vm -->\n', '', 1)" &&
        expect_fail "unmarked block" "without a '<!-- readme-test" $BLOCKS lint "$SCRATCH/unmarked.md"
    mutant badmode "s.replace('<!-- readme-test: host vm -->', '<!-- readme-test: host laptop -->', 1)" &&
        expect_fail "unknown mode" "unknown readme-test mode 'laptop'" $BLOCKS lint "$SCRATCH/badmode.md"
    # The commands that are only checked: a renamed script, a preset or mode that is not there.
    mutant script "s.replace('\ntools/run-tests.sh\n', '\ntools/run-test.sh\n', 1)" &&
        expect_fail "missing script" "run-test.sh is not an executable script" $BLOCKS check "$SCRATCH/script.md" --repo "$REPO"
    mutant preset "s.replace('ctest --preset default', 'ctest --preset release', 1)" &&
        expect_fail "missing preset" "no such test preset" $BLOCKS check "$SCRATCH/preset.md" --repo "$REPO"
    mutant depsmode "s.replace('tools/install-deps.sh build', 'tools/install-deps.sh compile', 1)" &&
        expect_fail "install-deps mode" "has no mode 'compile'" $BLOCKS check "$SCRATCH/depsmode.md" --repo "$REPO"
    mutant syntax "s.replace('\ntools/run-demo.sh\n', '\ntools/run-demo.sh (\n', 1)" &&
        expect_fail "shell syntax" "shell syntax" $BLOCKS check "$SCRATCH/syntax.md" --repo "$REPO"
    ;;
*) echo "usage: $0 host|mutants README COWCTL [REPO]" >&2; exit 2 ;;
esac
exit $fail
