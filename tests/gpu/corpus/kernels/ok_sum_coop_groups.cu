// Correct: two passes with a scratch buffer; cooperative groups' tiled_partition<32>
// for the warp-level reductions (cg::reduce from cooperative_groups/reduce.h).
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;

__device__ float block_sum(float v) {
  __shared__ float red[32];
  cg::thread_block block = cg::this_thread_block();
  cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
  v = cg::reduce(warp, v, cg::plus<float>());
  if (warp.thread_rank() == 0) red[warp.meta_group_rank()] = v;
  block.sync();
  v = warp.meta_group_rank() == 0 && warp.thread_rank() < warp.meta_group_size() ? red[warp.thread_rank()] : 0.f;
  if (warp.meta_group_rank() == 0) v = cg::reduce(warp, v, cg::plus<float>());
  return v;  // valid in thread 0
}

extern "C" __global__ void sum_cg_partial(const float* x, float* partial, int n) {
  float acc = 0.f;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    acc += x[i];
  acc = block_sum(acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

extern "C" __global__ void sum_cg_final(const float* partial, float* s, int parts) {
  float acc = 0.f;
  for (int i = threadIdx.x; i < parts; i += blockDim.x) acc += partial[i];
  acc = block_sum(acc);
  if (threadIdx.x == 0) s[0] = acc;
}
