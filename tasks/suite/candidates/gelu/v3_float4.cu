// float4 loads and stores (the buffers are 16-byte aligned), one float4 per
// thread, a scalar tail for the last N % 4 elements, streaming cache hints
// (each element is touched once).
__device__ __forceinline__ float gelu(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678f)); }

extern "C" __global__ void gelu_float4(const float* __restrict__ x, float* __restrict__ y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int n4 = n / 4;
  if (i < n4) {
    const float4 v = __ldcs(reinterpret_cast<const float4*>(x) + i);
    __stcs(reinterpret_cast<float4*>(y) + i, make_float4(gelu(v.x), gelu(v.y), gelu(v.z), gelu(v.w)));
  } else if (i == n4) {
    for (int j = 4 * n4; j < n; ++j) y[j] = gelu(x[j]);
  }
}
