# gpu_kernelbench_test: hand-written candidates for the KernelBench test
# problems (tests/kernelbench/kernels), judged against the imported tasks
# named by $SPECGEN_KB_TASKS. Its compile-only half (every source compiles
# with NVRTC, every plan parses and fits its source) needs only the CUDA
# Toolkit's headers and runs without a GPU; the GPU half is built in when
# specgen::gpu_eval exists and skips itself without a GPU or without
# $SPECGEN_KB_TASKS. Shares its corpus helpers with tests/gpu.
if(NOT TARGET specgen_gpu_compiler)
  message(STATUS "specgen: CUDA Toolkit not found; gpu_kernelbench_test is not built")
  return()
endif()

add_executable(gpu_kernelbench_test ${CMAKE_CURRENT_LIST_DIR}/gpu_kernelbench_test.cpp)
target_include_directories(gpu_kernelbench_test PRIVATE ${PROJECT_SOURCE_DIR}/tests/gpu)
target_link_libraries(gpu_kernelbench_test PRIVATE specgen_catch_main Catch2::Catch2 specgen::core
                      specgen_gpu_compiler specgen_warnings)
target_compile_definitions(gpu_kernelbench_test PRIVATE SPECGEN_KB_TEST_DIR="${CMAKE_CURRENT_LIST_DIR}")
if(TARGET specgen::gpu_eval)
  target_link_libraries(gpu_kernelbench_test PRIVATE specgen::gpu_eval)
  target_compile_definitions(gpu_kernelbench_test PRIVATE SPECGEN_WITH_GPU_EVAL
                             SPECGEN_WORKER="$<TARGET_FILE:specgen-worker>")
  add_dependencies(gpu_kernelbench_test specgen-worker)
endif()
add_test(NAME gpu_kernelbench_test COMMAND gpu_kernelbench_test)
set_tests_properties(gpu_kernelbench_test PROPERTIES TIMEOUT 900)
