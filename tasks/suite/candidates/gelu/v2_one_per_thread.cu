// One thread per element: consecutive threads touch consecutive elements, so
// every warp access is one coalesced 128-byte transaction.
extern "C" __global__ void gelu_elem(const float* x, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f));
  }
}
