// The task's two-pass sum, but a thread with no element skips its shared
// slot, which the tree still reads: the last block of a short vector sums
// whatever shared memory held.
#define PER_THREAD 8
extern "C" __global__ void sum_part_uninit(const float* x, float* partial, int n) {
  __shared__ float s[256];
  const long long base = (long long)blockIdx.x * 256 * PER_THREAD + threadIdx.x;
  float acc = 0.f;
  for (int j = 0; j < PER_THREAD; ++j) {
    const long long i = base + j * 256;
    if (i < n) acc += x[i];
  }
  if (base < n) s[threadIdx.x] = acc;
  __syncthreads();
  for (int w = 128; w > 0; w /= 2) {
    if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
}

extern "C" __global__ void sum_fin(const float* partial, float* out, int parts) {
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
