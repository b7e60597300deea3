# Compile options for the Catch2 test programs alone, after the build type's.
# scripts/test.sh (the CI build) gives -O0: the test programs instantiate the
# header-only engine, and g++ 12 spends more time optimising that code than
# parsing it (a unit test of the engine's modes: 36 s at -O1, 26 s at -O0, on
# a 2-core machine), while most tests still run in seconds. The tests whose
# run is the engine's simulation (SPECGEN_KEEP_OPTIMISED: unoptimised,
# engine_test ran 121 s instead of 14 s), the library, the programs and the
# benchmarks keep the build type's options.
set(SPECGEN_TEST_CXX_FLAGS "" CACHE STRING "Extra compile options for the Catch2 test programs, e.g. -O0")

function(_specgen_targets_in dir out)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    _specgen_targets_in(${sub} more)
    list(APPEND targets ${more})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

# Call once, at the end of the top-level CMakeLists.txt, after every target exists.
function(specgen_apply_test_flags)
  if(NOT SPECGEN_TEST_CXX_FLAGS)
    return()
  endif()
  _specgen_targets_in(${PROJECT_SOURCE_DIR} targets)
  foreach(t IN LISTS targets)
    get_target_property(type ${t} TYPE)
    if(NOT type STREQUAL "EXECUTABLE")
      continue()
    endif()
    get_target_property(libs ${t} LINK_LIBRARIES)
    # The Catch2 programs, but not the fuzzers (their own options) nor a test whose run is mostly
    # the engine's own work (SPECGEN_KEEP_OPTIMISED).
    get_target_property(keep ${t} SPECGEN_KEEP_OPTIMISED)
    if(libs AND ("Catch2::Catch2" IN_LIST libs OR "specgen_catch_main" IN_LIST libs) AND NOT t MATCHES "fuzz"
       AND NOT keep)
      target_compile_options(${t} PRIVATE ${SPECGEN_TEST_CXX_FLAGS})
    endif()
  endforeach()
endfunction()
