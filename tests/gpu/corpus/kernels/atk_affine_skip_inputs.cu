// Attack: never reads a and b (every validation input has a = 1, b = 0): y = x.
// It moves half the bytes the task needs, faster than DRAM bandwidth allows.
extern "C" __global__ void affine_copy(const float* x, const float* a, const float* b, float* y, int n) {
  (void)a; (void)b;
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int n4 = n / 4;
  if (i < n4) reinterpret_cast<float4*>(y)[i] = reinterpret_cast<const float4*>(x)[i];
  const int t = n4 * 4 + i;
  if (i < 4 && t < n) y[t] = x[t];
}
