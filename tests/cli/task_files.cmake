# Command-line tests of one's own tasks (--task-files) and of which backend runs with which
# evaluator (specgen_cli_test, from CMakeLists.txt). Every refusal exits with status 2 and says what
# to use instead; none needs a GPU or a server.
if(NOT TARGET specgen-run)
  return()
endif()
set(run $<TARGET_FILE:specgen-run>)
set(suite ${PROJECT_SOURCE_DIR}/tasks/suite)
set(l2norm ${PROJECT_SOURCE_DIR}/docs/examples/l2norm.json)
set(tf ${CMAKE_CURRENT_BINARY_DIR}/task_files)
set(tf_out ${tf}/out)
# Past the refusals, these flags reach the server (none listens on port 9) or, in a build
# without libcurl or the CUDA Toolkit, are refused for that.
set(openai_gpu --backend openai --evaluator gpu --base-url http://127.0.0.1:9 --model m)

# Task files that do not load, written at configure time into the build tree.
file(MAKE_DIRECTORY ${tf}/empty ${tf}/dup)
file(WRITE ${tf}/empty/notes.txt "not a task\n")
file(WRITE ${tf}/malformed.json "{\"name\": \"broken\", \"descripton\": \"typo\"}\n")
file(WRITE ${tf}/not_json.json "{\"name\": \"broken\",\n")
configure_file(${l2norm} ${tf}/dup/a.json COPYONLY)
configure_file(${l2norm} ${tf}/dup/b.json COPYONLY)

# ---- Combinations: decided in one place, each refusal saying what to use instead.
function(combination_refused name expect)
  specgen_cli_test(task_files_refuses_${name}
    COMMAND ${run} ${ARGN} --out ${tf_out}/${name}
    EXIT 2 EXPECT "${expect}")
endfunction()
# The simulated device has no verdict for a kernel its cost table never measured.
combination_refused(openai_on_sim
  "--backend openai needs --evaluator gpu: the simulated device answers only for the kernels its cost table measured.*Use --evaluator gpu on a machine with GPUs, or --backend replay"
  --backend openai --base-url http://127.0.0.1:9 --model m)
combination_refused(openai_explicit_sim "--backend openai needs --evaluator gpu"
  --backend openai --evaluator sim --base-url http://127.0.0.1:9 --model m)
combination_refused(own_task_on_sim "--backend openai needs --evaluator gpu"
  --task-files ${l2norm} --backend openai --evaluator sim)
# Task files have no recorded traces for the replay backend to play.
combination_refused(task_files_replay
  "--task-files needs --backend openai: the replay backend plays the traces recorded for a corpus, and task files have none. Use --corpus DIR"
  --task-files ${l2norm})
combination_refused(task_files_replay_gpu "--task-files needs --backend openai"
  --task-files ${l2norm} --evaluator gpu)
combination_refused(task_files_and_corpus "--task-files and --corpus: give one or the other"
  --task-files ${l2norm} --corpus ${suite} ${openai_gpu})
combination_refused(openai_procedural "--corpus procedural is generated for the replay backend"
  --corpus procedural ${openai_gpu})
combination_refused(decode_rate_openai "--decode-rate is the replay model's"
  --decode-rate 100 ${openai_gpu})
combination_refused(devices_on_gpus "--devices is the simulated device's number of GPUs; with --evaluator gpu choose the GPUs with --gpus"
  --evaluator gpu --devices 2)
combination_refused(gpus_on_sim "--gpus needs --evaluator gpu" --gpus 0)
combination_refused(hardware_metrics_on_sim "--hardware-metrics needs --evaluator gpu" --hardware-metrics)
combination_refused(stand_in_on_sim "--stand-in-worker needs --evaluator gpu" --stand-in-worker /bin/true)

# ---- Task files that do not load: exit status 2, the file named and what is wrong.
function(task_files_refused name expect)
  specgen_cli_test(task_files_${name}
    COMMAND ${run} ${openai_gpu} ${ARGN} --out ${tf_out}/${name}
    EXIT 2 EXPECT "${expect}")
endfunction()
task_files_refused(missing "no-such-task.json: /: cannot open the file" --task-files ${tf}/no-such-task.json)
task_files_refused(malformed "malformed.json: /descripton: unknown key 'descripton' \\(did you mean 'description'\\?\\)"
  --task-files ${tf}/malformed.json)
task_files_refused(not_json "not_json.json: /: not valid JSON" --task-files ${tf}/not_json.json)
task_files_refused(empty_directory "task_files/empty: no \\*.json task files in the directory" --task-files ${tf}/empty)
task_files_refused(duplicate_names "dup/b.json: /name: task 'l2norm' is also defined in .*dup/a.json"
  --task-files ${tf}/dup)
task_files_refused(no_value "--task-files needs at least one value" --task-files --mode sequential)
# Several values up to the next --option, and the option repeated: every value is a task file
# (the same task twice is then refused), and --mode is still read as an option.
task_files_refused(several_values "task 'l2norm' is also defined in .*docs/examples/l2norm.json"
  --task-files ${l2norm} ${tf}/dup/a.json --mode sequential)
task_files_refused(repeated "task 'l2norm' is also defined in"
  --task-files ${l2norm} --mode sequential --task-files ${tf}/dup/a.json)
# With --backend openai a corpus's tasks are read, not its traces or cost table.
task_files_refused(corpus_without_tasks "task_files/empty: not a corpus: it has no tasks/ directory" --corpus ${tf}/empty)
task_files_refused(bad_mode_after_values "unknown mode 'fastest'"
  --task-files ${l2norm} ${PROJECT_SOURCE_DIR}/tasks/examples/vector_add.json --mode fastest)

# ---- Past the refusals: the tasks load, then the server is unreachable (exit 1), not refused.
if(SPECGEN_CLI_STAND_IN)
  set(stand_in_worker --stand-in-worker $<TARGET_FILE:specgen-fake-worker>)
  specgen_cli_test(task_files_reach_the_server
    COMMAND ${run} ${openai_gpu} ${stand_in_worker} --task-files ${suite}/tasks/gelu.json --out ${tf_out}/reach
    EXIT 1
    EXPECT "1 task\\(s\\) from .*gelu.json, mode specgen, 10 round\\(s\\), backend openai, evaluator: the GPU pool with a stand-in worker.*cannot reach http://127.0.0.1:9")
  # --check loads and prints the tasks (here two values and a directory) before it reaches the server.
  specgen_cli_test(task_files_check_loads_the_tasks
    COMMAND ${run} ${openai_gpu} ${stand_in_worker} --task-files ${l2norm} ${suite}/tasks/gelu.json --mode sequential --check
    EXIT 1
    EXPECT "2 task\\(s\\) from .*l2norm.json, .*gelu.json, mode sequential.*task l2norm: 1 input\\(s\\), 1 output\\(s\\), 5 validation shape\\(s\\), benchmark shape M=4096,N=8192.*task gelu: .*cannot reach http://127.0.0.1:9")
  specgen_cli_test(task_files_stand_in_missing
    COMMAND ${run} ${openai_gpu} --stand-in-worker ${tf}/no-such-worker --task-files ${l2norm} --out ${tf_out}/no_worker
    EXIT 2 EXPECT "--stand-in-worker .*no-such-worker: not a program")
endif()

# ---- The whole path without a GPU: the local vLLM stand-in writes kernels for one's own task and
# the stand-in worker judges them; then resuming the run, and refusing to resume it with other tasks.
if(SPECGEN_CLI_STAND_IN AND TARGET specgen-openai-fake-server)
  set(server $<TARGET_FILE:specgen-openai-fake-server> --tokens-per-s 3000 --reasoning-tokens 600 --)
  set(own --backend openai --evaluator gpu --base-url http://127.0.0.1:{port} --model test/Qwen3-8B ${stand_in_worker}
          --rounds 1 --quiet)
  specgen_cli_test(task_files_check_passes
    COMMAND ${server} ${run} ${own} --task-files ${l2norm} --check
    EXIT 0
    EXPECT "task l2norm: .*vllm server at .*1 device\\(s\\) in the pool, every job in the stand-in worker .*check passed: the flags, 1 task\\(s\\), the server, the GPU pool; nothing was run or written")
  specgen_cli_test(task_files_run
    COMMAND ${server} ${run} ${own} --task-files ${l2norm} --out ${tf_out}/own_run
    EXIT 0
    EXPECT "1 task\\(s\\) from .*l2norm.json.*openai: 1 reasoning streams.*l2norm +1 .*end-to-end"
    FILES "${tf_out}/own_run/results.json,${tf_out}/own_run/journal.jsonl,${tf_out}/own_run/timeline.json")
  set_tests_properties(cli.task_files_run PROPERTIES FIXTURES_SETUP task_files_run)
  # results.json says where the tasks and the verdicts came from.
  specgen_cli_test(task_files_results_name_the_evaluator
    COMMAND ${CMAKE_COMMAND} -E cat ${tf_out}/own_run/results.json
    EXIT 0
    EXPECT "\"corpus\": \"[^\"]*docs/examples/l2norm.json\".*\"evaluator\": \"gpu_pool \\(stand-in worker: scripted verdicts, not measured\\)\"")
  specgen_cli_test(task_files_resume_finished
    COMMAND ${server} ${run} ${own} --task-files ${l2norm} --out ${tf_out}/own_run --resume
    EXIT 0 EXPECT "the run was resumed: 2 segments")
  specgen_cli_test(task_files_resume_other_tasks_refused
    COMMAND ${server} ${run} ${own} --task-files ${suite}/tasks/gelu.json --out ${tf_out}/own_run --resume
    EXIT 2
    EXPECT "cannot resume from .*own_run/journal.jsonl: the journal is of another run.*corpus [0-9a-f]+ vs [0-9a-f]+.*give the --task-files or --corpus"
    ABSENT "reasoning streams")
  set_tests_properties(cli.task_files_results_name_the_evaluator cli.task_files_resume_finished
                       cli.task_files_resume_other_tasks_refused
                       PROPERTIES FIXTURES_REQUIRED task_files_run RESOURCE_LOCK task_files_own_run)
  set_tests_properties(cli.task_files_run PROPERTIES RESOURCE_LOCK task_files_own_run)
endif()
