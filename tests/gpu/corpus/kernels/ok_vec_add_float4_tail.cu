// Correct: float4 loads/stores for the bulk, a scalar tail for N % 4 elements.
// (Buffers are 256-byte aligned, so a, b and c viewed as float4 are aligned.)
extern "C" __global__ void vec_add_f4(const float* a, const float* b, float* c, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int n4 = n / 4;
  if (i < n4) {
    const float4 x = reinterpret_cast<const float4*>(a)[i];
    const float4 y = reinterpret_cast<const float4*>(b)[i];
    reinterpret_cast<float4*>(c)[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
  }
  const int t = n4 * 4 + i;
  if (i < 4 && t < n) c[t] = a[t] + b[t];
}
