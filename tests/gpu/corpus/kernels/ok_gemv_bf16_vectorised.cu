// Correct: a warp per row as in the reference (same lane striding, same shuffle tree,
// so the same rounding), with __nv_bfloat162 loads of x staged once per block in
// shared memory when K fits (dynamic shared memory sized by the plan).
#include <cuda_bf16.h>
extern "C" __global__ void gemv_bf16_staged(const __nv_bfloat16* A, const __nv_bfloat16* x, float* y, int m, int k,
                                            int stage) {
  extern __shared__ float xs[];
  const bool staged = k <= stage;
  if (staged) {
    for (int i = 2 * threadIdx.x; i < k; i += 2 * blockDim.x) {
      if (i + 1 < k) {
        const float2 v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(x + i));
        xs[i] = v.x;
        xs[i + 1] = v.y;
      } else {
        xs[i] = __bfloat162float(x[i]);
      }
    }
  }
  __syncthreads();
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= m) return;
  const __nv_bfloat16* a = A + (long long)row * k;
  float acc = 0.f;
  for (int i = lane; i < k; i += 32) acc += __bfloat162float(a[i]) * (staged ? xs[i] : __bfloat162float(x[i]));
  for (int off = 16; off > 0; off /= 2) acc += __shfl_down_sync(0xffffffffu, acc, off);
  if (lane == 0) y[row] = acc;
}
