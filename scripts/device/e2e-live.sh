#!/usr/bin/env bash
# The live end-to-end subset on the GPU machine: sequential against specgen on
# the four suite tasks with the least reasoning, two rounds, the replay model at
# 70 tokens/s and the real GPU pool, each beside its virtual twin
# (docs/benchmarks.md, "End to end: live on the H200"). About 9 minutes on one H200.
#
#   scripts/device/e2e-live.sh BUILD_DIR OUT_DIR
#
# BUILD_DIR is a configured tree of this repository with specgen-bench and
# specgen-worker built (scripts/device/check.sh shows how to configure there);
# a warm machine still holds the build of the previous call in /tmp. OUT_DIR
# receives e2e-live.txt, e2e-live-h200.json, env.txt and journals/ (one journal
# per mode); tar it into one file before it leaves the machine.
set -uo pipefail
build=$(cd "${1:?usage: e2e-live.sh BUILD_DIR OUT_DIR}" && pwd)
out=${2:?usage: e2e-live.sh BUILD_DIR OUT_DIR}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bench=$build/benchmarks/specgen-bench
[ -x "$bench" ] || { echo "e2e-live.sh: $bench is not built" >&2; exit 1; }
mkdir -p "$out/journals"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/env.txt" 2>&1
cd "$repo"
timeout 585 "$bench" e2e-live --live-tasks 4 --rounds 2 --max-seconds 285 \
  --journal-dir "$out/journals" --json "$out/e2e-live-h200.json" > "$out/e2e-live.txt" 2>&1
rc=$?
tail -8 "$out/e2e-live.txt"
exit $rc
