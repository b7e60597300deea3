#!/usr/bin/env bash
# On the GPU machine: does a racy block reduction fault on leftover shared
# memory, and which leftover words make it fault? Builds repro.cpp, the
# suite's racy and correct layernorm reductions and race.cu with nvcc, and
# prints one line per configuration (into $OUT/smem-race-fault.txt when OUT is
# set). About 11 s on an H200. (docs/results/smem-race-fault-h200.txt came
# from an earlier copy that held the correct reduction as "layernorm_ok".)
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=$(mktemp -d)
cd "$work" || exit 1
log=${OUT:+$OUT/smem-race-fault.txt}
exec > >(tee ${log:+-a "$log"}) 2>&1
# The poison kernel's PTX, exactly as the worker embeds it.
sed -n '/R"(\.version/,/^)"/p' "$here/../../../src/gpu/worker/runtime/smem_poison.cpp" | sed '1s/.*R"(//;$d' > poison.ptx
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nvcc -O2 -o repro "$here/repro.cpp" -lcuda || exit 1
suite=$here/../../../tasks/suite/candidates/layernorm
nvcc -cubin -arch=sm_90a -O3 -o race.cubin "$suite/v2_block_nosync.cu" || exit 1
nvcc -cubin -arch=sm_90a -O3 -use_fast_math -o race_fast.cubin "$suite/v2_block_nosync.cu" || exit 1
nvcc -cubin -arch=sm_90a -O3 -o ok.cubin "$suite/v2_block_three_pass.cu" || exit 1
nvcc -cubin -arch=sm_90a -O3 -o dump.cubin "$here/race.cu" || exit 1
echo "slow-path division calls in the racy kernel: default $(cuobjdump -sass -fun layernorm_block race.cubin | grep -c CALL.REL), fast math $(cuobjdump -sass -fun layernorm_block race_fast.cubin | grep -c CALL.REL)"
r() { timeout 60 ./repro "$@" | tail -1; }
for w in 0xffffffff 0x7f7f7f7f 0xfefefefe 0xff7f7f7f 0x7f800000 0xff800000 0x80808080 0xc0c0c0c0 0x60000000; do
  r layernorm_block race.cubin $w 30 --rows 132
done
for w in 0xffffffff 0x7f7f7f7f 0xfefefefe 0xff7f7f7f; do r layernorm_block ok.cubin $w 30 --rows 132; done
for w in 0xffffffff 0x7f7f7f7f 0xfefefefe 0xff7f7f7f; do r dump_smem dump.cubin $w 30 --rows 132; done
r layernorm_block race.cubin 0xffffffff,0x7f7f7f7f,0xfefefefe 30 --rows 7
r layernorm_block race.cubin 0xffffffff,0x7f7f7f7f,0xfefefefe 30 --rows 132 --split
r layernorm_block race.cubin 0xffffffff,0x7f7f7f7f,0xfefefefe 30 --rows 132 --no-carveout
r layernorm_block race.cubin 0xffffffff 30 --rows 132 --no-poison
r layernorm_block race_fast.cubin 0xffffffff,0x7f7f7f7f,0xfefefefe 30 --rows 132
rm -rf "$work"
