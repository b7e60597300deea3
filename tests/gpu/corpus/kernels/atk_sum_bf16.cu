// Attack: precision downgrade, the sum accumulated in bfloat16.
#include <cuda_bf16.h>
extern "C" __global__ void sum_zero(float* s) { s[0] = 0.f; }

extern "C" __global__ void sum_bf16(const float* x, float* s, int n) {
  __shared__ __nv_bfloat16 red[256];
  __nv_bfloat16 acc = __float2bfloat16(0.f);
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    acc = __hadd(acc, __float2bfloat16(x[i]));
  red[threadIdx.x] = acc;
  __syncthreads();
  for (int w = 128; w > 0; w /= 2) {
    if (threadIdx.x < w) red[threadIdx.x] = __hadd(red[threadIdx.x], red[threadIdx.x + w]);
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(s, __bfloat162float(red[0]));
}
