#!/usr/bin/env bash
# The GPU KV store on the GPU machine: its tests, then kv-bandwidth, kv-prefix
# and kv-stress on one GPU and, when two are visible, across both
# (docs/kv-store.md). About 2-3 minutes on an H200 pair.
#
#   scripts/device/kv.sh BUILD_DIR OUT_DIR [--e2e]
#
# BUILD_DIR is a configured tree of this repository with at least these targets built:
#   cmake --build BUILD_DIR --target gpu_kv_test gpu_kv_host_test specgen-kv-peer kv_test specgen-bench
# (scripts/device/check.sh shows how to configure on the GPU machine.)
# OUT_DIR receives four files: summary.txt (environment, test tail, every
# benchmark table), tests.log, kv.json (every benchmark's JSON under one
# object) and raw.tgz (the individual logs and JSON files).
# --e2e also runs the live ablation step `e2e-live --modes +priority,+kv --kv gpu`
# on four tasks and two rounds, with each mode's journal (about 6 minutes more on
# one H200; not counted above).
set -uo pipefail
build=$(cd "${1:?usage: kv.sh BUILD_DIR OUT_DIR [--e2e]}" && pwd)
out=${2:?usage: kv.sh BUILD_DIR OUT_DIR [--e2e]}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
mkdir -p "$out"
raw=$(mktemp -d)
bench="$build/benchmarks/specgen-bench"
started=$(date +%s)
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)

{
  echo "== $(date -u +%FT%TZ) $(uname -srm), $gpus GPU(s)"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,memory.used,compute_mode --format=csv 2>&1
  nvidia-smi topo -m 2>&1 | head -12
} > "$raw/env.txt"

rc=0
# The tests: host-only ones and the GPU ones (each GPU case SKIPs with a WARN
# what the machine lacks); gpu_kv_test again with per-case durations.
(cd "$build" && timeout 150 ctest --output-on-failure -R '^(kv_test|gpu_kv_host_test|gpu_kv_test)$') > "$raw/tests.log" 2>&1 || rc=1
(cd "$build/src/gpu/kv" && timeout 150 ./gpu_kv_test --durations yes) > "$raw/gpu_kv_test.log" 2>&1 || rc=1

# run NAME VISIBLE_GPUS ARGS...: one benchmark, its table in NAME.txt and JSON in NAME.json.
run() {
  local name=$1 visible=$2
  shift 2
  echo "== $name (CUDA_VISIBLE_DEVICES=$visible): specgen-bench $*" >> "$raw/bench.txt"
  CUDA_VISIBLE_DEVICES=$visible timeout 120 "$bench" "$@" --json "$raw/$name.json" > "$raw/$name.txt" 2>&1
  local r=$?
  cat "$raw/$name.txt" >> "$raw/bench.txt"
  echo "rc=$r" >> "$raw/bench.txt"
  ((r == 0)) || rc=1
}
run kv-bandwidth-1gpu 0 kv-bandwidth
run kv-prefix-1gpu 0 kv-prefix
if ((gpus >= 2)); then
  run kv-bandwidth-2gpu 0,1 kv-bandwidth
  run kv-prefix-2gpu 0,1 kv-prefix
  run kv-stress 0,1 kv-stress --threads 4 --iterations 2000
else
  run kv-stress 0 kv-stress --threads 4 --iterations 2000
fi
if [[ " $* " == *" --e2e "* ]]; then
  (cd "$repo" && CUDA_VISIBLE_DEVICES=$( ((gpus >= 2)) && echo 0,1 || echo 0) timeout 900 "$bench" e2e-live \
     --modes +priority,+kv --kv gpu --live-tasks 4 --rounds 2 --journal-dir "$raw/journals" \
     --json "$raw/e2e-live-kv.json") > "$raw/e2e-live-kv.txt" 2>&1 || rc=1
  cat "$raw/e2e-live-kv.txt" >> "$raw/bench.txt"
fi

# One JSON object of every result, keyed by file name.
python3 - "$raw" > "$out/kv.json" <<'EOF' || echo '{}' > "$out/kv.json"
import json, pathlib, sys
d = pathlib.Path(sys.argv[1])
print(json.dumps({p.stem: json.loads(p.read_text()) for p in sorted(d.glob("*.json"))}, indent=1))
EOF
{
  cat "$raw/env.txt"
  echo
  echo "== tests (rc so far: $rc)"
  tail -8 "$raw/tests.log"
  grep -E "^[0-9.]+ s: " "$raw/gpu_kv_test.log" || true
  grep -m1 -A2 "no GPU" "$raw/gpu_kv_test.log" || true
  grep -m1 "one GPU:" "$raw/gpu_kv_test.log" || true
  echo
  cat "$raw/bench.txt"
  echo
  echo "== done in $(( $(date +%s) - started )) s, rc=$rc"
} > "$out/summary.txt"
cp "$raw/tests.log" "$out/tests.log"
tar -czf "$out/raw.tgz" -C "$raw" .
rm -rf "$raw"
tail -3 "$out/summary.txt"
exit $rc
