# Fails when a comment or a document cites a repository file that is not there, or points a reader
# outside the repository. Run as `cmake -DSOURCE_DIR=<repository> -P check_doc_paths.cmake` (the
# ctest `doc_paths`).
#
# Scanned: the sources and documents under include/, src/, examples/, benchmarks/, docs/*.md (the
# result archives under docs/results/ are data) and README.md. Checked:
#   - a backticked path under one of the repository's top-level folders, `docs/policies.md` or
#     `src/gpu/eval/`, relative to the repository (placeholders and globs, `tasks/<task>.json`,
#     are skipped; a `:line` suffix is dropped);
#   - a Markdown link to a relative path, `[policies](policies.md)`, relative to the document;
#   - no mention of notes that are not in the repository or of work items: DESIGN.md, PAPER.md,
#     ../shared, /work/, "issue <number>".
if(NOT SOURCE_DIR)
  message(FATAL_ERROR "usage: cmake -DSOURCE_DIR=<repository> -P check_doc_paths.cmake")
endif()

set(top "(include|src|scripts|tests|docs|examples|benchmarks|tasks|cmake|\\.ci)")
set(exts "*.hpp;*.h;*.cpp;*.c;*.cu;*.cuh;*.md;*.txt;*.cmake;*.sh;*.py;*.json")
set(files "")
foreach(dir include src examples benchmarks)
  foreach(ext IN LISTS exts)
    file(GLOB_RECURSE found ${SOURCE_DIR}/${dir}/${ext})
    list(APPEND files ${found})
  endforeach()
endforeach()
file(GLOB docs ${SOURCE_DIR}/docs/*.md)
list(APPEND files ${docs} ${SOURCE_DIR}/README.md)
list(REMOVE_DUPLICATES files)
list(SORT files)

set(problems 0)
macro(problem file what)
  file(RELATIVE_PATH rel ${SOURCE_DIR} ${file})
  message(STATUS "${rel}: ${what}")
  math(EXPR problems "${problems} + 1")
endmacro()

foreach(file IN LISTS files)
  file(READ ${file} text)
  # Keep CMake's list handling away from the text: no `;`, then (after the links) no brackets.
  string(REPLACE ";" "," text "${text}")
  if(file MATCHES "\\.md$")
    get_filename_component(base ${file} DIRECTORY)
    string(REGEX MATCHALL "\\]\\([^)# \n]+[)#]" links "${text}")
    string(REGEX REPLACE "[)#](;|$)" "\\1" links "${links}")
    string(REPLACE "](" "" links "${links}")  # a `]` would keep the list from splitting
    foreach(path IN LISTS links)
      if(path MATCHES "^[a-z]+:")
        continue()  # https:, mailto:
      endif()
      get_filename_component(target ${path} ABSOLUTE BASE_DIR ${base})
      if(NOT EXISTS ${target})
        problem(${file} "links to ${path}, which the repository does not have")
      endif()
    endforeach()
  endif()

  string(REPLACE "[" "<" text "${text}")
  string(REPLACE "]" ">" text "${text}")

  string(REGEX MATCHALL "`${top}/[^` \n]*`" cited "${text}")
  foreach(c IN LISTS cited)
    string(REGEX REPLACE "^`(.*)`$" "\\1" path "${c}")
    if(path MATCHES "[<>*{}]|\\.\\.\\.")
      continue()  # a placeholder or a glob
    endif()
    string(REGEX REPLACE ":[0-9]+(-[0-9]+)?$" "" path "${path}")
    if(NOT EXISTS ${SOURCE_DIR}/${path})
      problem(${file} "cites `${path}`, which the repository does not have")
    endif()
  endforeach()

  foreach(banned "DESIGN\\.md" "PAPER\\.md" "\\.\\./shared" "/work/" "[Ii]ssue #?[0-9]+")
    string(REGEX MATCHALL "${banned}" hits "${text}")
    foreach(h IN LISTS hits)
      problem(${file} "mentions \"${h}\", which readers of the repository cannot follow")
    endforeach()
  endforeach()
endforeach()

list(LENGTH files scanned)
if(problems GREATER 0)
  message(FATAL_ERROR "${problems} problem(s) in ${scanned} files")
endif()
message(STATUS "doc_paths: ${scanned} files, every cited path exists")
