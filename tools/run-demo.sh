#!/bin/bash
# The README's main job: install what is needed, build, and show what the
# copy-on-write store is for: a 20 GiB clone inside a pool as a metadata
# operation, against copying the same bytes.
# usage: sudo tools/run-demo.sh      env: SKIP_APT=1, JOBS
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
if [ -z "${SKIP_APT:-}" ]; then
  bash tools/install-deps.sh all
fi
echo "== building (cmake preset 'default') =="
cmake --preset default >/dev/null
cmake --build --preset default -j "$JOBS" >/dev/null
echo "== store demo: clone 20 GiB inside one pool vs copying it =="
work=$(mktemp -d "${TMPDIR:-/var/tmp}/cowstore-demo.XXXXXX")
trap 'rm -rf "$work"' EXIT
build/default/tools/store-demo/store-demo --dir "$work"
