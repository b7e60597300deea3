// y[M] = A[M, K] * x[K]; A row-major bfloat16, x bfloat16, y float32;
// products and sums in float32.
#include <cuda_bf16.h>

// Reference: one warp per row; each lane sums a strided slice, then a shuffle tree.
extern "C" __global__ void gemv_bf16_warp(const __nv_bfloat16* A, const __nv_bfloat16* x, float* y, int m, int k) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= m) return;
  const __nv_bfloat16* a = A + (long long)row * k;
  float acc = 0.f;
  for (int i = lane; i < k; i += 32) acc += __bfloat162float(a[i]) * __bfloat162float(x[i]);
  for (int off = 16; off > 0; off /= 2) acc += __shfl_down_sync(0xffffffffu, acc, off);
  if (lane == 0) y[row] = acc;
}
