// First draft: each thread handles a contiguous chunk of 16 elements.
#define CHUNK 16

extern "C" __global__ void relu_chunk(const float* x, float* y, int n) {
  const int start = (blockIdx.x * blockDim.x + threadIdx.x) * CHUNK;
  for (int i = start; i < start + CHUNK && i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
