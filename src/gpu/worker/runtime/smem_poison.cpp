#include "smem_poison.hpp"

#include <algorithm>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {

std::string_view smem_poison_ptx() noexcept {
  // Produced from this CUDA C++ with `nvcc -arch=compute_75 -ptx` (CUDA 13.0),
  // then edited by hand: the header lowered to PTX ISA 7.0 and sm_52 (nothing
  // below needs more), the shared base address and the stride hoisted out of
  // the loop, and the stores made volatile so that no JIT compiler drops them
  // as stores nothing reads:
  //
  //   extern "C" __global__ void specgen_smem_poison(unsigned pattern, unsigned bytes) {
  //     extern __shared__ uint4 smem[];
  //     const uint4 v = make_uint4(pattern, pattern, pattern, pattern);
  //     for (unsigned i = threadIdx.x; i < bytes / 16; i += blockDim.x) smem[i] = v;
  //   }
  //
  // ptxas 13.0 assembles it for sm_75, sm_80, sm_90a, sm_100a and sm_120
  // (10 registers). The text must stay NUL-terminated: cuModuleLoadData reads
  // PTX up to its NUL.
  static constexpr char ptx[] = R"(.version 7.0
.target sm_52
.address_size 64

.extern .shared .align 16 .b8 specgen_poison_smem[];

.visible .entry specgen_smem_poison(
  .param .u32 specgen_smem_poison_pattern,
  .param .u32 specgen_smem_poison_bytes
)
{
  .reg .pred %p<3>;
  .reg .b32 %r<10>;

  ld.param.u32 %r1, [specgen_smem_poison_pattern];
  ld.param.u32 %r2, [specgen_smem_poison_bytes];
  shr.u32 %r3, %r2, 4;                  // 16-byte stores to make
  mov.u32 %r4, %tid.x;                  // this thread's first store
  setp.ge.u32 %p1, %r4, %r3;
  @%p1 bra DONE;
  mov.u32 %r5, %ntid.x;
  shl.b32 %r6, %r5, 4;                  // bytes a sweep of the block covers
  mov.u32 %r7, specgen_poison_smem;
  shl.b32 %r8, %r4, 4;
  add.s32 %r9, %r7, %r8;                // the shared address of that store
LOOP:
  st.volatile.shared.v4.u32 [%r9], {%r1, %r1, %r1, %r1};
  add.s32 %r4, %r4, %r5;
  add.s32 %r9, %r9, %r6;
  setp.lt.u32 %p2, %r4, %r3;
  @%p2 bra LOOP;
DONE:
  ret;
}
)";
  return {ptx, sizeof ptx - 1};
}

smem_poison_geometry smem_poison_geometry_for(std::int64_t max_dynamic_smem_bytes, int multiprocessors,
                                              std::int64_t max_threads_per_block) noexcept {
  constexpr std::uint32_t blocks_per_sm = 4;
  if (max_dynamic_smem_bytes < 16 || multiprocessors <= 0 || max_threads_per_block <= 0) return {};
  const auto bytes = std::min<std::int64_t>(max_dynamic_smem_bytes, std::int64_t{1} << 30) / 16 * 16;
  return {.blocks = blocks_per_sm * static_cast<std::uint32_t>(multiprocessors),
          .threads = static_cast<std::uint32_t>(std::min<std::int64_t>(max_threads_per_block, 1024)),
          .bytes = static_cast<std::uint32_t>(bytes)};
}

CUresult launch_smem_poison(const driver_api& api, const smem_poison_kernel& k, std::uint32_t pattern,
                            CUstream stream) {
  std::uint32_t bytes = k.geometry.bytes;
  void* params[] = {&pattern, &bytes};
  return api.cuLaunchKernel(k.function, k.geometry.blocks, 1, 1, k.geometry.threads, 1, 1, k.geometry.bytes, stream,
                            params, nullptr);
}

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
