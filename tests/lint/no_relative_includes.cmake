cmake_minimum_required(VERSION 3.20)
# No component includes another's files by a relative path ("../x.hpp"): the
# source tree's own headers are included by their path under src/
# ("gpu/loader/driver.hpp"), through the build-only specgen_internal target,
# so a moved file breaks the build where it is named, not by accident.
# Usage: cmake -DSOURCE_DIR=<repo> -P no_relative_includes.cmake
set(found "")
foreach(dir include src examples benchmarks tests)
  file(GLOB_RECURSE files "${SOURCE_DIR}/${dir}/*.hpp" "${SOURCE_DIR}/${dir}/*.cpp" "${SOURCE_DIR}/${dir}/*.h"
       "${SOURCE_DIR}/${dir}/*.c")
  foreach(f IN LISTS files)
    file(STRINGS "${f}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*[\"<]\\.\\./")
    foreach(l IN LISTS lines)
      string(STRIP "${l}" l)
      list(APPEND found "${f}: ${l}")
    endforeach()
  endforeach()
endforeach()
if(found)
  list(JOIN found "\n  " text)
  message(FATAL_ERROR "relative includes across folders; include by the path under src/ or include/:\n  ${text}")
endif()
message(STATUS "no relative includes")
