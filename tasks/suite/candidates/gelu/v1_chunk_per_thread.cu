// First draft: give each thread a contiguous chunk of 16 elements so there
// are fewer threads and more work per thread.
#define CHUNK 16

extern "C" __global__ void gelu_chunk(const float* x, float* y, int n) {
  const int start = (blockIdx.x * blockDim.x + threadIdx.x) * CHUNK;
  for (int i = start; i < start + CHUNK && i < n; ++i) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f));
  }
}
