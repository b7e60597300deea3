cmake_minimum_required(VERSION 3.20)
# The header-only core reads time only through the clock it is given
# (clock.hpp's clocks are the ones a run injects). Fails on any other read of a
# system clock under include/specgen.
# Usage: cmake -DSOURCE_DIR=<repo> -P no_real_clock.cmake
file(GLOB_RECURSE headers "${SOURCE_DIR}/include/specgen/*.hpp")
set(found "")
foreach(h IN LISTS headers)
  if(h MATCHES "/include/specgen/clock\\.hpp$")
    continue()
  endif()
  file(STRINGS "${h}" lines REGEX "system_clock|steady_clock::now|high_resolution_clock")
  foreach(l IN LISTS lines)
    string(STRIP "${l}" l)
    list(APPEND found "${h}: ${l}")
  endforeach()
endforeach()
if(found)
  list(JOIN found "\n  " text)
  message(FATAL_ERROR "a header of the core reads a system clock; take the time from the injected clock:\n  ${text}")
endif()
list(LENGTH headers n)
message(STATUS "no system clock read in ${n} headers but clock.hpp")
