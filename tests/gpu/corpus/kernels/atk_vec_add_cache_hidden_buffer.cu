// Attack: caches the result in a hidden __device__ buffer on the first call (per
// size) and afterwards only copies the cache to the output. Timed runs get a
// fresh module instance each; validation runs every input set of a shape in one
// loaded module, and the second set gets the first set's sums: wrong_result.
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
