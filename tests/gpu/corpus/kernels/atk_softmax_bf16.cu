// Attack: precision downgrade, exponentials and the row sum kept in bfloat16.
#include <cuda_bf16.h>
extern "C" __global__ void softmax_bf16(const float* x, float* y, int m) {
  __shared__ float red[256];
  const float* in = x + (long long)blockIdx.x * m;
  float* out = y + (long long)blockIdx.x * m;
  float mx = __int_as_float(0xff800000);
  for (int c = threadIdx.x; c < m; c += blockDim.x) mx = fmaxf(mx, in[c]);
  red[threadIdx.x] = mx;
  __syncthreads();
  for (int s = 128; s > 0; s /= 2) {
    if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
    __syncthreads();
  }
  mx = red[0];
  __syncthreads();
  __nv_bfloat16 sum = __float2bfloat16(0.f);
  for (int c = threadIdx.x; c < m; c += blockDim.x) sum = __hadd(sum, hexp(__float2bfloat16(in[c] - mx)));
  red[threadIdx.x] = __bfloat162float(sum);
  __syncthreads();
  for (int s = 128; s > 0; s /= 2) {
    if (threadIdx.x < s) red[threadIdx.x] = __bfloat162float(__float2bfloat16(red[threadIdx.x] + red[threadIdx.x + s]));
    __syncthreads();
  }
  const __nv_bfloat16 inv = __float2bfloat16(1.f / red[0]);
  for (int c = threadIdx.x; c < m; c += blockDim.x)
    out[c] = __bfloat162float(__hmul(hexp(__float2bfloat16(in[c] - mx)), inv));
}
