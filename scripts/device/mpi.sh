#!/usr/bin/env bash
# The MPI evaluation pool on the GPU machine, in steps (a later call finds the
# build in /tmp while the machine stays warm):
#
#   scripts/device/mpi.sh build tests bench      # build (check.sh, no tests), the MPI tests, specgen-mpi-bench
#   scripts/device/mpi.sh search                 # the same search on the local GPU pool and through MPI
#
# Results under $OUT. The machine's mpirun runs as root when told (OMPI_ALLOW_RUN_AS_ROOT).
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${OUT:-$repo/device-out}
build=/tmp/specgen-build
prefix=/tmp/specgen-prefix
mkdir -p "$out"
export LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
rc=0
note() { r=$1; ((rc == 0)) && rc=$r; echo "rc=$r"; }
for step in "$@"; do
  echo "== $step ($(date -u +%T))"
  case $step in
    build)
      { command -v mpirun; mpirun --version | head -1; command -v mpicxx; } > "$out/mpi-env.txt" 2>&1
      cat "$out/mpi-env.txt"
      "$repo/scripts/device/check.sh" --no-tests || exit 1
      grep -i "mpi" "$out/configure.log" | head -5
      ;;
    tests)
      (cd "$build" && ctest -j4 --output-on-failure -R '^mpi_|cli.run_mpi' > "$out/mpi-ctest.log" 2>&1); note $?
      tail -14 "$out/mpi-ctest.log"
      ;;
    bench)
      # Dispatch overhead and evaluations per second, 1 to 8 worker ranks of two stand-in devices;
      # the MPI threads' waiting at its defaults (idle_poll 100 us), at 250 us, and never sleeping (0).
      for run in "10000" "1000" "10000 --idle-poll-us 250" "10000 --idle-poll-us 0" "1000 --idle-poll-us 0"; do
        read -r lat rest <<< "$run"
        tag=$lat; [[ -n $rest ]] && tag="$lat-idle${rest##* }"
        # shellcheck disable=SC2086
        timeout 200 mpirun --bind-to none -np 9 "$build/src/mpi/specgen-mpi-bench" --mode scaling --jobs 500 \
          --latency-us $lat --devices 2 $rest --json "$out/mpi-scaling-$tag.json" > "$out/mpi-scaling-$tag.txt" 2>&1
        note $?; echo "-- $run"; cat "$out/mpi-scaling-$tag.txt"
      done
      ;;
    search)
      # The suite's first 8 tasks, recorded kernels (the replay model at 700 tokens/s), judged on GPU 0:
      # by the local GPU pool, by one MPI worker rank and by two worker ranks sharing the GPU, all
      # started unbound (mpirun binds 1-2 ranks to one core; docs/distributed.md).
      run="$build/examples/specgen-run"
      common=(--backend replay --tasks 8 --rounds 3 --decode-rate 700 --quiet)
      for v in "local" "mpi1 --bind-to none -np 2" "mpi2 --bind-to none -np 3"; do
        read -r tag rest <<< "$v"
        if [[ $tag == local ]]; then
          timeout 140 "$run" --evaluator gpu --gpus 0 "${common[@]}" --out "/tmp/s-$tag" > "$out/search-$tag.txt" 2>&1
        else
          # shellcheck disable=SC2086
          timeout 140 mpirun $rest "$run" --evaluator mpi "${common[@]}" --out "/tmp/s-$tag" > "$out/search-$tag.txt" 2>&1
        fi
        note $?; grep -E "rank [0-9]|warning|end-to-end" "$out/search-$tag.txt"
        cp "/tmp/s-$tag/results.json" "$out/search-$tag.json"
        python3 - "/tmp/s-$tag/journal.jsonl" "$tag" <<'PY'
import json, sys, collections
busy = collections.defaultdict(float); n = collections.Counter()
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("type") == "evaluation" and "stage" in r:
        busy[r["stage"]] += r.get("busy_ns", 0) / 1e9; n[r["stage"]] += 1
print(sys.argv[2], "per stage (jobs, busy s, s/job):", {k: (n[k], round(busy[k], 1), round(busy[k] / n[k], 3)) for k in n})
PY
      done
      ;;
    *) echo "unknown step $step"; rc=2 ;;
  esac
done
exit $rc
