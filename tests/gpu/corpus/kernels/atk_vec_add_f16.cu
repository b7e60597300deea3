// Attack: precision downgrade, the f32 sum computed in half precision.
#include <cuda_fp16.h>
extern "C" __global__ void vec_add_half_precision(const float* a, const float* b, float* c, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = __half2float(__hadd(__float2half(a[i]), __float2half(b[i])));
}
