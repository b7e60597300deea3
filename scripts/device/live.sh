#!/usr/bin/env bash
# Live searches with a served model on the GPU machine: sequential against specgen on the eight
# suite tasks with the least reasoning, three rounds, the stand-in model server over HTTP (the
# OpenAI backend, token-id forks, a model that answers its prompts' feedback) and the real GPU
# pool, each beside its twins on the simulated clock at the low, middle and high ends of the
# published decode-contention band (docs/benchmarks.md, "Live with a served model").
#
#   scripts/device/live.sh BUILD_DIR OUT_DIR [TOKENS_PER_S]
#
# BUILD_DIR is a configured tree of this repository (scripts/device/check.sh shows how); the
# benchmark is built there if it is not yet. TOKENS_PER_S is the stand-in's decode speed per
# stream (default 140: at 70 the sequential run alone takes about as long as one device call may).
# OUT_DIR receives live.txt, live-h200.json, env.txt and journals/ (one journal per mode, with
# every prompt); tar it into one file before it leaves the machine.
set -uo pipefail
build=$(cd "${1:?usage: live.sh BUILD_DIR OUT_DIR [TOKENS_PER_S]}" && pwd)
out=${2:?usage: live.sh BUILD_DIR OUT_DIR [TOKENS_PER_S]}
rate=${3:-140}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bench=$build/benchmarks/specgen-bench
[ -x "$bench" ] || cmake --build "$build" -j"$(nproc)" --target specgen-bench specgen-worker > "$out/build-bench.log" 2>&1 \
  || { echo "live.sh: cannot build specgen-bench"; tail -20 "$out/build-bench.log"; exit 1; }
mkdir -p "$out/journals"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/env.txt" 2>&1
cd "$repo"
timeout 585 "$bench" e2e-live --server standin --live-tasks 8 --rounds 3 --tokens-per-s "$rate" --contention middle \
  --max-seconds 280 --journal-dir "$out/journals" --json "$out/live-h200.json" > "$out/live.txt" 2>&1
rc=$?
tail -14 "$out/live.txt"
exit $rc
