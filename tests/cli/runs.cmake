# Command-line tests of resuming, output directories and exit statuses (specgen_cli_test, from CMakeLists.txt).
# Scripts given to sh may hold neither '|' nor ';' (specgen_cli_test splits commands on them).
if(NOT TARGET specgen-run)
  return()
endif()
set(run $<TARGET_FILE:specgen-run>)
set(suite ${PROJECT_SOURCE_DIR}/tasks/suite)

# A finished one-task run that the resume tests below try to continue with other flags.
specgen_cli_test(runs_base
  COMMAND ${run} --tasks 1 --rounds 1 --out ${work}/runs_base --quiet
  EXIT 0 EXPECT "end-to-end")
set_tests_properties(cli.runs_base PROPERTIES FIXTURES_SETUP runs_base)
# Resuming runs_base with other flags is refused, saying what differs and what to do.
function(resume_refused name what)
  specgen_cli_test(resume_refuses_${name}
    COMMAND ${run} --tasks 1 --rounds 1 --out ${work}/runs_base --quiet --resume ${ARGN}
    EXIT 2
    EXPECT "cannot resume from .*runs_base/journal.jsonl: the journal is of another run.*${what}.*the run started with, or run without --resume into a new --out")
  # One at a time: each takes runs_base's output-directory lock, and a second would be refused for that.
  set_tests_properties(cli.resume_refuses_${name} PROPERTIES FIXTURES_REQUIRED runs_base RESOURCE_LOCK runs_base)
endfunction()
resume_refused(other_seed "seed 1 vs 2" --seed 2)
resume_refused(other_mode "config /trigger" --mode sequential)
resume_refused(other_rounds "config /budget/max_rounds 1 vs 2" --rounds 2)
resume_refused(other_corpus "corpus [0-9a-f]+ vs [0-9a-f]+" --corpus procedural)
specgen_cli_test(resume_without_journal
  COMMAND ${run} --tasks 1 --rounds 1 --out ${work}/runs_nothing_to_resume --quiet --resume
  EXIT 2 EXPECT "nothing to resume: there is no journal .*runs_nothing_to_resume/journal.jsonl")

# Journals that no run may continue: another format, and two runs' records in one file.
file(WRITE ${work}/runs_old_format/journal.jsonl
  "{\"type\":\"run_start\",\"t_ns\":0,\"t\":0,\"config\":{},\"seed\":1,\"version\":\"0.1.0\"}\n")
specgen_cli_test(resume_refuses_other_format
  COMMAND ${run} --tasks 1 --rounds 1 --out ${work}/runs_old_format --quiet --resume
  EXIT 2 EXPECT "journal.jsonl: line 1: the journal is in format 1 \\(written by specgen 0.1.0\\), and this specgen reads format 2")
file(WRITE ${work}/runs_two_runs/journal.jsonl
  "{\"type\":\"run_start\",\"t_ns\":0,\"t\":0,\"config\":{},\"corpus\":\"a\",\"format\":2,\"seed\":1,\"segment\":0,\"version\":\"0.1.0\"}\n"
  "{\"type\":\"run_start\",\"t_ns\":5,\"t\":5e-09,\"config\":{},\"corpus\":\"a\",\"format\":2,\"seed\":2,\"segment\":1,\"version\":\"0.1.0\"}\n")
specgen_cli_test(resume_refuses_two_runs_in_one_journal
  COMMAND ${run} --tasks 1 --rounds 1 --out ${work}/runs_two_runs --quiet --resume
  EXIT 2 EXPECT "journal.jsonl: line 2: run_start of run [0-9a-f]+, but line 1 started run [0-9a-f]+ \\(seed 1 vs 2\\)")

# A run killed after its first search ended, then resumed: results.json covers the whole run, so the
# finished search keeps its end time and the utilisation says which segment it covers.
set(d ${work}/runs_killed)
specgen_cli_test(resume_results_cover_the_whole_run
  COMMAND sh -c "rm -rf ${d} && ${run} --tasks 2 --rounds 2 --out ${d} --quiet && n=$(awk '/\"type\":\"search_end\"/ && !n {n = NR} END {print n}' ${d}/journal.jsonl) && head -n $n ${d}/journal.jsonl > ${d}/cut && mv ${d}/cut ${d}/journal.jsonl && ${run} --tasks 2 --rounds 2 --out ${d} --quiet --resume && ! grep -q '\"end_seconds\": 0.0' ${d}/results.json && cat ${d}/results.json"
  EXIT 0
  EXPECT "the run was resumed: 2 segments.*\"pool_utilization_covers\": \"last segment\".*\"segments\": \\[.*\"completed\": false")

# One run per output directory: a second one fails at once and names the holder (here flock(1),
# standing in for a running specgen-run, with its process id in the lock file as specgen-run writes it).
find_program(SPECGEN_FLOCK flock)
if(SPECGEN_FLOCK)
  set(d ${work}/runs_locked)
  specgen_cli_test(second_run_on_one_out_is_refused
    COMMAND sh -c "mkdir -p ${d} && echo first run > ${d}/journal.jsonl && echo $$ > ${d}/.specgen.lock && exec ${SPECGEN_FLOCK} ${d}/.specgen.lock ${run} --tasks 1 --rounds 1 --out ${d} --quiet"
    EXIT 2 EXPECT "the output directory .*runs_locked is in use by another run \\(process [0-9]+\\)"
    FILES "${d}/journal.jsonl")
endif()

# Exit status 1 when every stream of a search failed: here a task of the corpus has no replay trace.
set(c ${work}/runs_corpus_missing_trace)
file(COPY ${suite}/tasks/gelu.json ${suite}/tasks/gelu.cu ${suite}/tasks/relu.json ${suite}/tasks/relu.cu DESTINATION ${c}/tasks)
file(COPY ${suite}/traces/gelu.json DESTINATION ${c}/traces)
file(COPY ${suite}/cost_table.json DESTINATION ${c})
specgen_cli_test(every_stream_of_a_search_failed
  COMMAND ${run} --corpus ${c} --rounds 2 --out ${work}/runs_missing_trace --quiet
  EXIT 1
  EXPECT "2 stream\\(s\\) failed: search 1 \\(relu\\): 2.*specgen-run: error: every stream of search 1 \\(relu\\) failed, so it produced nothing; the first error: replay: no trace recorded for task \"relu\""
  FILES "${work}/runs_missing_trace/results.json")
