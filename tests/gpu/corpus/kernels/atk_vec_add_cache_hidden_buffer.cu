// Attack (closed): caches the result in a hidden __device__ buffer on the first run
// (per size) and afterwards would only copy the cache to the output. A fresh module
// instance per run resets cached_n to 0, so every run computes a + b (and stores the
// cache for nothing): simply correct.
#define CACHE_ELEMS (1 << 24)
__device__ float cache[CACHE_ELEMS];
__device__ int cached_n;

extern "C" __global__ void vec_add_cached(const float* a, const float* b, float* c, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n || n > CACHE_ELEMS) return;
  if (*(volatile int*)&cached_n == n) {
    c[i] = cache[i];
  } else {
    const float v = a[i] + b[i];
    cache[i] = v;
    c[i] = v;
  }
}
extern "C" __global__ void remember_n(int n) { cached_n = n; }
