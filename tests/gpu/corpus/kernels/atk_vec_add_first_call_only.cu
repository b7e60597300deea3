// Attack: computes on the first call only and returns at once later, leaving
// whatever the output buffer held (an unpoisoned buffer would hold the old
// result). In one loaded module, as validation runs it, the second run leaves
// the output holding the poison: wrong_result.
__device__ int vec_add_done;

extern "C" __global__ void vec_add_once(const float* a, const float* b, float* c, int n) {
  if (*(volatile int*)&vec_add_done) return;
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
extern "C" __global__ void mark_done() { vec_add_done = 1; }
