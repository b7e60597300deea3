# Command-line tests of hostile and careless input (specgen_cli_test, from CMakeLists.txt).
# Each input is refused before any search runs: exit status 2 and a message that says what is
# wrong and what is accepted; never a crash, a hang, a run of hours or one that looks fine.
if(NOT TARGET specgen-run)
  return()
endif()

set(hostile ${CMAKE_CURRENT_BINARY_DIR}/hostile)
file(MAKE_DIRECTORY ${hostile})
set(run $<TARGET_FILE:specgen-run>)
set(suite ${PROJECT_SOURCE_DIR}/tasks/suite)

# Configs, written at configure time into the build tree.
function(hostile_config name text)
  file(WRITE ${hostile}/${name}.json "${text}")
endfunction()
string(REPEAT "{\"any_of\": [" 100000 deep_open)
string(REPEAT "]}" 100000 deep_close)
hostile_config(any_of_100000 "{\"trigger\": ${deep_open}\"never\"${deep_close}}")
string(REPEAT "{\"any_of\": [" 20 open20)
string(REPEAT "]}" 20 close20)
hostile_config(any_of_20 "{\"trigger\": ${open20}\"never\"${close20}}")
hostile_config(max_seconds_1e10 "{\"mode\": \"sequential\", \"budget\": {\"max_seconds\": 1e10}}")
hostile_config(seeds_1e6 "{\"strategy\": {\"parallel\": {\"seeds\": 1000000}}}")
hostile_config(samples_2e9 "{\"trigger\": {\"fence_closed\": {\"samples\": 2147483647}}}")
hostile_config(population_1e9 "{\"strategy\": {\"evolve\": {\"lanes\": 4, \"population\": 1000000000}}}")
hostile_config(interval_1e-9 "{\"pool\": {\"elastic\": {\"interval_s\": 1e-9}}}")
hostile_config(empty_phrase "{\"trigger\": {\"design_decision\": {\"phrases\": [\"\"]}}}")
hostile_config(sets_trigger "{\"trigger\": {\"fence_closed\": {\"samples\": 2}}, \"budget\": {\"max_rounds\": 2}}")
hostile_config(huge_number "{\"seed\": 1e999}")

# Each config is refused before any search runs, with the message given.
function(hostile_config_refused name expect)
  specgen_cli_test(hostile_config_${name}
    COMMAND ${run} --config ${hostile}/${name}.json --tasks 1 --out ${hostile}/out/hostile_config_${name}
    EXIT 2 EXPECT "${expect}")
endfunction()
# A config nested 100,000 deep once crashed the parser's callers (and 20,000 deep ran for a minute).
hostile_config_refused(any_of_100000 "any_of_100000.json: arrays and objects are nested more than 64 levels deep")
hostile_config_refused(any_of_20 "any_of is nested more than 16 levels deep; flatten")
# 1e10 s overflowed the deadline: every search ended at t = 0, with exit status 0.
hostile_config_refused(max_seconds_1e10 "/budget/max_seconds: must be a number in \\[0.001, 10000000\\], or 0 for none")
# Sizes of 10^6 to 2^31 ended in std::bad_alloc.
hostile_config_refused(seeds_1e6 "/strategy/parallel/seeds: must be an integer in \\[1, 256\\], got 1000000")
hostile_config_refused(samples_2e9 "/trigger/fence_closed/samples: must be an integer in \\[1, 64\\]")
hostile_config_refused(population_1e9 "/strategy/evolve/population: must be an integer in \\[1, 100000\\]")
# An epoch of a nanosecond never let the run end.
hostile_config_refused(interval_1e-9 "/pool/elastic/interval_s: must be a number in \\[0.1, 86400\\], or 0 for never")
hostile_config_refused(empty_phrase "phrases\\[0\\] is empty")
hostile_config_refused(huge_number "huge_number.json: not valid JSON: .*1e999")
# --mode sequential with a config that sets a trigger printed "sequential" and ran forks.
specgen_cli_test(hostile_mode_contradicts_config
  COMMAND ${run} --mode sequential --config ${hostile}/sets_trigger.json --tasks 1 --out ${hostile}/out/hostile_mode_contradicts_config
  EXIT 2 EXPECT "mode 'sequential' contradicts the config's trigger.*drop that key from the config")

# Numeric flags outside what a run can use. Each entry: flag;value;what the message says is accepted.
foreach(flag IN ITEMS "tasks;-1;an integer in .1, 10000." "target;nan;a number in .0.001, 1000., or 0 for none"
                      "target;inf;a number in .0.001, 1000." "target;-2;a number in .0.001, 1000."
                      "decode-rate;inf;a number in .1, 100000." "progress-every;1e-9;a number in .1, 86400."
                      "devices;1000000;an integer in .1, 1024." "rounds;2147483647;an integer in .1, 10000."
                      "seed;-1;an integer in .0, 18446744073709551615.")
  list(GET flag 0 name)
  list(GET flag 1 value)
  list(GET flag 2 accepted)
  specgen_cli_test(hostile_flag_${name}_${value}
    COMMAND ${run} --${name} ${value} --out ${hostile}/out/hostile_flag_${name}_${value}
    EXIT 2 EXPECT "--${name} ${value}: must be ${accepted}")
endforeach()

# Files that are not regular files: a FIFO blocked forever; each is refused at once.
set(fifo ${hostile}/fifo.json)
specgen_cli_test(hostile_config_fifo
  COMMAND sh -c "rm -f ${fifo} && mkfifo ${fifo} && exec ${run} --config ${fifo} --out ${hostile}/out/hostile_config_fifo"
  EXIT 2 EXPECT "fifo.json: the config is a FIFO \\(named pipe\\), not a regular file")
specgen_cli_test(hostile_config_directory
  COMMAND ${run} --config ${hostile} --out ${hostile}/out/hostile_config_directory
  EXIT 2 EXPECT "the config is a directory, not a regular file")
specgen_cli_test(hostile_openai_config_fifo
  COMMAND sh -c "rm -f ${hostile}/openai.json && mkfifo ${hostile}/openai.json && exec ${run} --backend openai --evaluator gpu --openai-config ${hostile}/openai.json --out ${hostile}/out/hostile_openai_config_fifo"
  EXIT 2 EXPECT "the config is a FIFO|built without libcurl")
# A corpus whose task directory holds a FIFO, or two files of one task name.
specgen_cli_test(hostile_corpus_task_fifo
  COMMAND sh -c "rm -rf ${hostile}/c1 && cp -r ${suite} ${hostile}/c1 && mkfifo ${hostile}/c1/tasks/zz.json && exec ${run} --corpus ${hostile}/c1 --out ${hostile}/out/hostile_corpus_task_fifo"
  EXIT 2 EXPECT "zz.json: /: the task file is a FIFO")
specgen_cli_test(hostile_corpus_duplicate_task
  COMMAND sh -c "rm -rf ${hostile}/c2 && cp -r ${suite} ${hostile}/c2 && cp ${suite}/tasks/gelu.json ${hostile}/c2/tasks/zz_gelu.json && exec ${run} --corpus ${hostile}/c2 --out ${hostile}/out/hostile_corpus_duplicate_task"
  EXIT 2 EXPECT "zz_gelu.json: /name: task 'gelu' is also defined in .*c2/tasks/gelu.json")
# Without the fix these block forever: fail after a while instead of holding up the suite.
set_tests_properties(cli.hostile_config_fifo cli.hostile_openai_config_fifo cli.hostile_corpus_task_fifo
                     cli.hostile_config_any_of_100000 cli.hostile_config_interval_1e-9 PROPERTIES TIMEOUT 60)
