// s[0] = x[0] + ... + x[N-1], float32, deterministic two-pass tree.
#define PER_THREAD 8

// Pass 1: block b sums x[b*2048 .. b*2048+2047] (256 threads x 8 elements) into partial[b].
extern "C" __global__ void sum_partial(const float* x, float* partial, int n) {
  __shared__ float s[256];
  const long long base = (long long)blockIdx.x * 256 * PER_THREAD + threadIdx.x;
  float acc = 0.f;
#pragma unroll
  for (int j = 0; j < PER_THREAD; ++j) {
    const long long i = base + j * 256;
    if (i < n) acc += x[i];
  }
  s[threadIdx.x] = acc;
  __syncthreads();
  for (int w = 128; w > 0; w /= 2) {
    if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
}

// Pass 2: one block of 1024 threads sums the partials.
extern "C" __global__ void sum_final(const float* partial, float* out, int parts) {
  __shared__ float s[1024];
  float acc = 0.f;
  for (int i = threadIdx.x; i < parts; i += 1024) acc += partial[i];
  s[threadIdx.x] = acc;
  __syncthreads();
  for (int w = 512; w > 0; w /= 2) {
    if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[0] = s[0];
}
