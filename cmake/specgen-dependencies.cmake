# The find_dependency() lines of the installed specgen-config.cmake, derived
# from what the exported targets link rather than written by hand, so a
# compiled target added later (CUDA runtime, libcurl backend) cannot ship a
# package that forgets its dependency.
#
# Every namespaced imported target an exported target links (also through
# $<LINK_ONLY:...>, which is how a static library's private dependencies reach
# the export) must map to the package that defines it. A new dependency is one
# line here; an unmapped one stops the configure and says so.
set(SPECGEN_DEPENDENCY_PACKAGES
  "fmt=fmt"
  "nlohmann_json=nlohmann_json 3.10"
  "CUDA=CUDAToolkit"
  "CURL=CURL"
  "Threads=Threads"
  "PkgConfig=PkgConfig"
  "MPI=MPI COMPONENTS CXX")

# specgen_find_dependency_lines(<out-var> <target>...)
# Sets <out-var> to the find_dependency() calls, one per package, in first-use order.
function(specgen_find_dependency_lines out)
  set(packages "")
  foreach(target IN LISTS ARGN)
    get_target_property(links ${target} INTERFACE_LINK_LIBRARIES)
    if(NOT links)
      continue()
    endif()
    string(REGEX MATCHALL "[A-Za-z0-9_]+::" namespaces "${links}")
    list(REMOVE_DUPLICATES namespaces)
    foreach(ns IN LISTS namespaces)
      string(REGEX REPLACE "::$" "" ns "${ns}")
      if(ns STREQUAL "specgen")
        continue()
      endif()
      set(package "")
      foreach(entry IN LISTS SPECGEN_DEPENDENCY_PACKAGES)
        if(entry MATCHES "^${ns}=(.+)$")
          set(package "${CMAKE_MATCH_1}")
        endif()
      endforeach()
      if(package STREQUAL "")
        message(FATAL_ERROR "specgen: exported target '${target}' links '${ns}::...', but no "
          "package is known for the namespace '${ns}'. Add \"${ns}=<find_package arguments>\" "
          "to SPECGEN_DEPENDENCY_PACKAGES in cmake/specgen-dependencies.cmake.")
      endif()
      list(APPEND packages "${package}")
    endforeach()
  endforeach()
  list(REMOVE_DUPLICATES packages)
  set(lines "")
  foreach(package IN LISTS packages)
    string(APPEND lines "find_dependency(${package})\n")
  endforeach()
  set(${out} "${lines}" PARENT_SCOPE)
endfunction()
