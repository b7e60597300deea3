#!/usr/bin/env bash
# Build and test on the GPU machine (Ubuntu 24.04, CUDA 13, g++ 13, no package
# registry). The Debian packages the build needs travel as .deb files in .debs/
# (fetch them here with `apt-get download libfmt-dev libfmt9 nlohmann-json3-dev libcli11-dev libxxhash-dev
# catch2 libopenmpi-dev` inside .debs/) and are unpacked into a private prefix. Results go to
# $OUT (or ./device-out).
#
# To build exactly the committed tree (not a working copy with work in
# progress), ship `git archive HEAD` and run the copy:
#   git archive -o .debs/head.tar HEAD          # here; .debs/ is carried
#   mkdir -p /tmp/src && tar -xf .debs/head.tar -C /tmp/src && ln -s "$PWD/.debs" /tmp/src/.debs \
#     && /tmp/src/scripts/device/check.sh --bench   # on the GPU machine
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${OUT:-$repo/device-out}
prefix=/tmp/specgen-prefix
build=/tmp/specgen-build
mkdir -p "$out" "$prefix"
for f in "$repo"/.debs/*.deb; do dpkg -x "$f" "$prefix"; done
export LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
{
  echo "== $(date -u +%FT%TZ) $(uname -srm)"
  g++ --version | head -1
  cmake --version | head -1
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
} > "$out/env.txt" 2>&1
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
# SPECGEN_WERROR=OFF for measurement runs: the machine's g++ 13 warns where CI's g++ 12 does not
# (count the warnings in build.log and fix them in the tree).
# MPI: the machine's Open MPI (mpirun) without its headers; Debian's libopenmpi-dev from .debs/
# gives them, and FindMPI is told where, without a compiler wrapper.
mpi=()
if ! command -v mpicxx >/dev/null && [[ -f $prefix/usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h ]]; then
  libmpi=$(ls /usr/lib/x86_64-linux-gnu/libmpi.so.40* 2>/dev/null | head -1)
  [[ -n $libmpi ]] && mpi=(-DMPI_CXX_SKIP_MPICXX=ON -DMPI_CXX_HEADER_DIR="$prefix/usr/lib/x86_64-linux-gnu/openmpi/include"
                          -DMPI_CXX_LIB_NAMES=mpi -DMPI_mpi_LIBRARY="$libmpi")
fi
cmake -S "$repo" -B "$build" "${generator[@]}" -DSPECGEN_WERROR="${SPECGEN_WERROR:-ON}" -DCMAKE_PREFIX_PATH="$prefix/usr" \
  -DCUDAToolkit_ROOT=/usr/local/cuda "${mpi[@]}" > "$out/configure.log" 2>&1 || { echo "configure failed"; tail -30 "$out/configure.log"; exit 1; }
# Ninja keeps going after a failure (-k 0), so one call shows every error.
keep=(); ((${#generator[@]})) && keep=(-- -k 0)
cmake --build "$build" -j"$(nproc)" "${keep[@]}" > "$out/build.log" 2>&1 || { echo "build failed"; grep -E "error|warning" "$out/build.log" | sort -u | head -40; exit 1; }
echo "build ok (warnings: $(grep -c 'warning:' "$out/build.log"))"
rc=0
if [[ " $* " != *" --no-tests "* ]]; then
(cd "$build" && ctest -j"$(nproc)" --output-on-failure -E 'packaging|gpu_adversarial_test' > "$out/ctest.log" 2>&1); rc=$?
tail -15 "$out/ctest.log"
# The adversarial corpus on its own, its verdict table kept.
if [ -x "$build/tests/gpu/gpu_adversarial_test" ]; then
  (cd "$build/tests/gpu" && timeout 900 ./gpu_adversarial_test > "$out/gpu_adversarial_test.log" 2>&1); arc=$?
  echo "gpu_adversarial_test rc=$arc"; tail -5 "$out/gpu_adversarial_test.log"
  ((rc == 0)) && rc=$arc
fi
fi
# With --bench: the GPU benchmarks, JSON results under $OUT.
if [[ " $* " == *" --bench "* ]]; then
  bench="$build/benchmarks/specgen-bench"
  # gpu-spread on one task: twenty full profiles of the 25 ms naive matmul alone take minutes.
  for b in "gpu-latency --reps 2" "gpu-latency --reps 1 --hardware-metrics" "gpu-cupti" "gpu-respawn --runs 10" \
           "gpu-spread --task vector_add --runs 20"; do
    read -r name rest <<< "$b"
    tag=$name; [[ $rest == *--task* ]] && tag="$name-${rest#*--task }" && tag=${tag%% *}
    [[ $rest == *--hardware-metrics* ]] && tag="$name-hw"
    echo "== $b"
    # shellcheck disable=SC2086
    timeout 240 "$bench" $name $rest --tasks "$repo/tasks/examples" --json "$out/$tag.json" > "$out/$tag.txt" 2>&1
    echo "rc=$?"; tail -12 "$out/$tag.txt"
  done
fi
exit $rc
