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
    kernelbench)
      # The KernelBench test problems: imported on this GPU (stored references, the eager
      # baseline timed both ways), then the hand-written kernels judged against them.
      export LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
      export SPECGEN_XXHASH_LIB="$prefix/usr/lib/x86_64-linux-gnu/libxxhash.so.0"
      kb="$out/kernelbench"
      mkdir -p "$kb"
      python3 -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.cuda.is_available())'
      timeout 400 python3 "$repo/tools/kernelbench/import_kernelbench.py" "$repo"/tests/kernelbench/problems/level*/*.py \
        --out /tmp/kb-tasks --device cuda --json-summary "$kb/import.json" > "$kb/import.log" 2>&1
      r=$?; ((rc == 0)) && rc=$r
      echo "import rc=$r"; tail -12 "$kb/import.log"
      tar -czf "$kb/tasks.tgz" -C /tmp/kb-tasks $(cd /tmp/kb-tasks && ls *.json) 2>/dev/null
      (cd "$build/tests/kernelbench" && SPECGEN_KB_TASKS=/tmp/kb-tasks SPECGEN_KB_RESULTS="$kb/judge.json" \
        timeout 400 ./gpu_kernelbench_test > "$kb/judge.log" 2>&1)
      r=$?; ((rc == 0)) && rc=$r
      echo "judge rc=$r"; tail -25 "$kb/judge.log"
      ;;
    kernelbench-public)
      # KernelBench's own level-1 and level-2 problems, when a copy lies in .debs/kernelbench_public
      # (never committed): each must import or fail with a reason. No timing; 4 at a time.
      export SPECGEN_XXHASH_LIB="$prefix/usr/lib/x86_64-linux-gnu/libxxhash.so.0"
      [[ -e $SPECGEN_XXHASH_LIB ]] || dpkg -x "$repo"/.debs/libxxhash0_*.deb "$prefix"  # without the build step
      kb=/tmp/kb-public-out
      rm -rf "$kb" /tmp/kb-public
      mkdir -p "$kb"
      # The bundled test problems first (a check of the importer on this PyTorch), then KernelBench's.
      ls "$repo"/tests/kernelbench/problems/level*/*.py "$repo"/.debs/kernelbench_public/level[12]/*.py 2>/dev/null | \
        timeout 330 xargs -P 4 -I{} sh -c 'n=$(basename "$(dirname "{}")")_$(basename "{}" .py); timeout 90 python3 "$0" "{}" --out /tmp/kb-public/$n --device cuda --no-timing --seeds 2 --max-store-mb 1024 --json-summary "$1/$n.json" > "$1/$n.log" 2>&1; echo "$n rc=$?" >> "$1/rc.txt"; du -sb /tmp/kb-public/$n >> "$1/sizes.txt" 2>/dev/null; rm -rf /tmp/kb-public/$n' \
        "$repo/tools/kernelbench/import_kernelbench.py" "$kb"
      echo "problems: $(wc -l < "$kb/rc.txt" 2>/dev/null)"; awk '{print $2}' "$kb/rc.txt" | sort | uniq -c
      tar -czf "$out/kernelbench-public.tgz" -C "$kb" .
      ;;
    smemfault)
      OUT=$out "$repo/scripts/device/smem_race_fault/run.sh"
      ;;
    *) echo "unknown step '$step'"; exit 2 ;;
  esac
done
exit $rc
