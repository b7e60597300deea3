#!/usr/bin/env bash
# The project's test command: install what is missing (Debian 12), configure,
# build everything with warnings as errors, run every test. Exits with ctest's
# status. Works from any directory.
#
#   scripts/test.sh                          # build/ in the repository
#   scripts/test.sh --build-dir /tmp/b -- -R packaging -j4
#
# Environment: CMAKE_BUILD_PARALLEL_LEVEL (build jobs, default: all cores),
# CTEST_PARALLEL_LEVEL (tests run at once, default: all cores).
set -euo pipefail

usage() {
  cat <<'EOF'
usage: scripts/test.sh [--build-dir DIR] [--no-install] [-- CTEST_ARGS...]

  --build-dir DIR  build tree to configure and build (default: <repo>/build)
  --no-install     do not install missing Debian packages
  -- ARGS          passed to ctest, e.g. -- -R packaging
EOF
}

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir="$repo/build"
install_missing=1
ctest_args=()

while (($#)); do
  case "$1" in
    --build-dir)
      (($# >= 2)) || { echo "test.sh: --build-dir needs a directory" >&2; exit 2; }
      build_dir=$2
      shift 2
      ;;
    --build-dir=*) build_dir=${1#*=}; shift ;;
    --no-install) install_missing=0; shift ;;
    -h | --help) usage; exit 0 ;;
    --) shift; ctest_args=("$@"); break ;;
    *) echo "test.sh: unknown option '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
# Relative to where the caller stands, not to the repository.
case "$build_dir" in /*) ;; *) build_dir="$PWD/$build_dir" ;; esac

# shellcheck source=scripts/deps.sh
source "$repo/scripts/deps.sh"
if ((install_missing)); then install_packages "${test_packages[@]}"; fi

# The CI build: Release at -O1, without debug information, to keep CI on the
# 2-core machine well inside its time. Debug information made a heavy
# translation unit 60% slower to compile (op_common.cpp: 55 s at -O2 -g, 34 s
# at -O2), and -O2 over -O1 cost half again (engine_test.cpp: 74 s against
# 48 s). With the packaging tests' nested builds also cut down, `.ci/run` on a
# fresh clone took 892 s, where the previous tree's CI run took 1,652 s.
# The Catch2 test programs build at -O0 (SPECGEN_TEST_CXX_FLAGS): each instantiates
# the engine, and g++ spends more on optimising it than on parsing it (modes_test.cpp:
# 36 s at -O1, 26 s at -O0); the tests still run in seconds. The sanitized input
# fuzzer runs 30 s instead of 60.
# scripts/run.sh and builds by hand use the default RelWithDebInfo.
cmake_args=(-S "$repo" -B "$build_dir" -G Ninja -DSPECGEN_WERROR=ON
            -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELEASE=-O1 -DNDEBUG"
            -DSPECGEN_TEST_CXX_FLAGS=-O0 -DSPECGEN_FUZZ_SECONDS=30)
# GPU components use the toolkit when it is there; nothing requires it.
if [[ -x /usr/local/cuda/bin/nvcc ]]; then
  cmake_args+=(-DCUDAToolkit_ROOT=/usr/local/cuda)
  export PATH="/usr/local/cuda/bin:$PATH"
fi

jobs=$(nproc 2>/dev/null || echo 2)
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$jobs}
export CTEST_PARALLEL_LEVEL=${CTEST_PARALLEL_LEVEL:-$jobs}

cmake "${cmake_args[@]}"
cmake --build "$build_dir"

exec ctest --test-dir "$build_dir" --output-on-failure "${ctest_args[@]}"
