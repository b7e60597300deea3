#!/usr/bin/env bash
# specgen-run --evaluator mpi under mpirun with three ranks and stand-in
# workers; once the run has verdicts, rank 2 is killed (SIGKILL). The search
# must go on with rank 1 and end normally: results.json and the journal say
# that rank 2 was lost, and every search ran all its rounds.
#
#   mpi_rank_killed.sh MPIRUN SPECGEN_RUN FAKE_WORKER STANDIN_SERVER OUT_DIR TASK_DIR
#
# The model is the stand-in server writing the suite's kernels for relu and
# gelu (the stand-in worker judges elementwise f32 tasks).
set -uo pipefail
mpirun=$1 run=$2 fake=$3 server=$4 out=$5 tasks=$6
rm -rf "$out" "$out.log"
mkdir -p "$(dirname "$out")"
"$server" --tokens-per-s 2000 -- "$mpirun" --oversubscribe --enable-recovery -np 3 "$run" --backend openai \
  --base-url 'http://127.0.0.1:{port}' --model standin/Qwen3-32B --evaluator mpi --stand-in-worker "$fake" \
  --task-files "$tasks/relu.json" "$tasks/gelu.json" --rounds 2 --out "$out" --quiet >"$out.log" 2>&1 &
job=$!
fail() {
  echo "FAIL: $*"
  kill "$job" 2>/dev/null
  cat "$out.log"
  exit 1
}

# Wait for the first verdicts, then find rank 2: the specgen-run process whose
# environment says so (its stand-in workers inherit that environment, but run
# another program).
for _ in $(seq 600); do
  [[ -f $out/journal.jsonl ]] && (($(grep -c '"type":"evaluation"' "$out/journal.jsonl") >= 3)) && break
  kill -0 "$job" 2>/dev/null || fail "the run ended before it had 3 verdicts"
  sleep 0.1
done
victim=
for pid in $(pgrep -f -- "^$run "); do
  tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=2' && victim=$pid
done
[[ -n $victim ]] || fail "no process of rank 2 found"
kill -KILL "$victim"
echo "killed rank 2 (pid $victim) after $(grep -c '"type":"evaluation"' "$out/journal.jsonl") verdicts"

# mpirun --enable-recovery may exit 0 or not after a lost rank: rank 0's output decides.
timeout 300 tail --pid="$job" -f /dev/null || fail "the run did not end within 300 s of the kill"
wait "$job"
cat "$out.log"
grep -q "MPI rank 2 lost" "$out.log" || fail "rank 0 did not say that rank 2 was lost"
grep -q "end-to-end" "$out.log" || fail "the run did not end with its summary"
[[ -f $out/results.json ]] || fail "no results.json"
grep -q '"type":"evaluator_event".*"event":"rank_lost".*"rank":2' "$out/journal.jsonl" ||
  fail "the journal has no rank_lost record for rank 2"
grep -A1 '"lost_ranks"' "$out/results.json" | grep -qx ' *2' || fail "results.json does not list rank 2 as lost"
# Every search ended (a lost rank's jobs were answered elsewhere, so none waited forever).
n=$(grep -c "\"type\":\"search_end\"" "$out/journal.jsonl")
((n == 2)) || fail "$n of 2 searches ended"
echo "PASS: the search went on without rank 2"
