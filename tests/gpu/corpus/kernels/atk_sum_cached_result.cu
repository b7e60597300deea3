// Attack: caching across calls. The sum is computed the first time a size is
// seen and kept in a __device__ variable; later calls of that size only write it
// out. Timed runs get a fresh module instance each, so none of them is skipped;
// validation runs every input set of a shape in one loaded module, as a caller
// would, and the second set gets the first set's sum: wrong_result.
__device__ float cached_sum;
__device__ int cached_n;

extern "C" __global__ void sum_cached_zero(float* s, int n) {
  s[0] = *(volatile int*)&cached_n == n ? *(volatile float*)&cached_sum : 0.f;
}

extern "C" __global__ void sum_cached(const float* x, float* s, int n) {
  if (*(volatile int*)&cached_n == n) return;  // s already holds the cached value
  __shared__ float red[32];
  float acc = 0.f;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    acc += x[i];
  for (int off = 16; off > 0; off /= 2) acc += __shfl_down_sync(0xffffffffu, acc, off);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x < 32) {
    acc = threadIdx.x < blockDim.x / 32 ? red[threadIdx.x] : 0.f;
    for (int off = 16; off > 0; off /= 2) acc += __shfl_down_sync(0xffffffffu, acc, off);
    if (threadIdx.x == 0) atomicAdd(s, acc);
  }
}

extern "C" __global__ void sum_cache_store(const float* s, int n) {
  if (*(volatile int*)&cached_n != n) {
    cached_sum = s[0];
    cached_n = n;
  }
}
