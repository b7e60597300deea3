// Correct: reads all three inputs (float4 with a scalar tail).
extern "C" __global__ void affine_f4(const float* x, const float* a, const float* b, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int n4 = n / 4;
  if (i < n4) {
    const float4 xv = reinterpret_cast<const float4*>(x)[i];
    const float4 av = reinterpret_cast<const float4*>(a)[i];
    const float4 bv = reinterpret_cast<const float4*>(b)[i];
    reinterpret_cast<float4*>(y)[i] =
        make_float4(av.x * xv.x + bv.x, av.y * xv.y + bv.y, av.z * xv.z + bv.z, av.w * xv.w + bv.w);
  }
  const int t = n4 * 4 + i;
  if (i < 4 && t < n) y[t] = a[t] * x[t] + b[t];
}
