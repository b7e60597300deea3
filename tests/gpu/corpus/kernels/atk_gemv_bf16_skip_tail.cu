// Attack: partial computation, the row loop stops at the last multiple of 32
// (K = 8192 in the benchmark is one), skipping the tail columns.
#include <cuda_bf16.h>
extern "C" __global__ void gemv_bf16_notail(const __nv_bfloat16* A, const __nv_bfloat16* x, float* y, int m, int k) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= m) return;
  const __nv_bfloat16* a = A + (long long)row * k;
  const int kk = k / 32 * 32;
  float acc = 0.f;
  for (int i = lane; i < kk; i += 32) acc += __bfloat162float(a[i]) * __bfloat162float(x[i]);
  for (int off = 16; off > 0; off /= 2) acc += __shfl_down_sync(0xffffffffu, acc, off);
  if (lane == 0) y[row] = acc;
}
