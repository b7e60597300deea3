#!/usr/bin/env bash
# The evaluator's checks on the GPU machine, in steps that fit the machine's
# 10-minute calls (a second call finds the first one's build in /tmp):
#
#   scripts/device/evaluator.sh build ctest corpus=0     # first call: build, every test, the corpus once
#   scripts/device/evaluator.sh corpus=1 corpus=2 latency # second call: the corpus on two more seeds, latency
#
# corpus=K runs tests/gpu's adversarial corpus with SPECGEN_SEED_OFFSET=K (every validation and
# profiling seed shifted by 100 K) and keeps its verdict tables; latency runs `specgen-bench
# gpu-latency --reps 2` on tasks/examples (the validation before and after the repeated-call
# check and the shared-memory poison, side by side); suite runs the bundled suite's verdict
# test alone and keeps its table; smemfault runs smem_race_fault/run.sh (a racy reduction on
# poisoned shared memory, outside specgen). The build uses check.sh (Debian packages from
# .debs/, see there). Results under $OUT.
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${OUT:-$repo/device-out}
build=/tmp/specgen-build
prefix=/tmp/specgen-prefix
mkdir -p "$out"
rc=0
for step in "$@"; do
  echo "== $step ($(date -u +%T))"
  case $step in
    build)
      "$repo/scripts/device/check.sh" --no-tests || exit 1
      ;;
    ctest)
      export LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
      (cd "$build" && ctest -j"$(nproc)" --output-on-failure -E 'packaging|gpu_adversarial_test' > "$out/ctest.log" 2>&1)
      r=$?; ((rc == 0)) && rc=$r
      tail -8 "$out/ctest.log"
      ;;
    corpus=*)
      k=${step#corpus=}
      export LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
      (cd "$build/tests/gpu" && SPECGEN_SEED_OFFSET=$k timeout 480 ./gpu_adversarial_test > "$out/adversarial-seed$k.log" 2>&1)
      r=$?; ((rc == 0)) && rc=$r
      echo "rc=$r"; grep -E "wrong verdicts|NOT AS EXPECTED|<-- WRONG|test cases" "$out/adversarial-seed$k.log" | head -20
      ;;
    latency)
      export LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
      timeout 400 "$build/benchmarks/specgen-bench" gpu-latency --reps 2 --tasks "$repo/tasks/examples" \
        --json "$out/gpu-latency.json" > "$out/gpu-latency.txt" 2>&1
      r=$?; ((rc == 0)) && rc=$r
      echo "rc=$r"; tail -14 "$out/gpu-latency.txt"
      ;;
    suite)
      export LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
      (cd "$build/tests/suite" && timeout 300 ./suite_test > "$out/suite.log" 2>&1)
      r=$?; ((rc == 0)) && rc=$r
      echo "rc=$r"; grep -E "wrong verdicts|<-- WRONG|test cases" "$out/suite.log" | head -20
      ;;
    smemfault)
      OUT=$out "$repo/scripts/device/smem_race_fault/run.sh"
      ;;
    *) echo "unknown step '$step'"; exit 2 ;;
  esac
done
exit $rc
