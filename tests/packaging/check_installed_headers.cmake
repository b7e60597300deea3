# Run by the packaging.installed_headers test (cmake -DPREFIX=<prefix> -P ...):
# the installed GPU headers must be exactly the public GPU surface. The worker
# side (the plan runtime, the protocol, the supervisor) lives under src/ and is
# never installed: a user's program cannot include code that only makes sense
# inside specgen-worker or behind the evaluator.
if(NOT PREFIX)
  message(FATAL_ERROR "check_installed_headers.cmake: pass -DPREFIX=<install prefix>")
endif()
set(gpu_dir ${PREFIX}/include/specgen/gpu)
if(NOT IS_DIRECTORY ${PREFIX}/include/specgen)
  message(FATAL_ERROR "no headers installed under ${PREFIX}/include/specgen")
endif()
set(worker_only runtime.hpp protocol.hpp worker_host.hpp)
foreach(header IN LISTS worker_only)
  if(EXISTS ${gpu_dir}/${header})
    message(FATAL_ERROR "worker-only header installed: ${gpu_dir}/${header}")
  endif()
endforeach()
# Built without the CUDA Toolkit the headers are still installed (the whole
# include/ tree is), so the set does not depend on the build.
file(GLOB_RECURSE installed RELATIVE ${gpu_dir} ${gpu_dir}/*)
list(SORT installed)
set(expected compiler.hpp device_info.hpp evaluation.hpp kv_store.hpp)
if(NOT installed STREQUAL expected)
  message(FATAL_ERROR "installed GPU headers: '${installed}'; the public GPU surface is '${expected}' "
                      "(a new public header belongs in this list; an internal one under src/)")
endif()
message(STATUS "installed GPU headers: ${installed}")
