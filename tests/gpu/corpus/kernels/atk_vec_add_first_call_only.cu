// Attack (closed): would compute on the first run only and return at once later,
// leaving whatever the output buffer held (an unpoisoned buffer would hold the old
// result). A fresh module instance per run resets vec_add_done to 0, so every run
// computes: simply correct.
__device__ int vec_add_done;

extern "C" __global__ void vec_add_once(const float* a, const float* b, float* c, int n) {
  if (*(volatile int*)&vec_add_done) return;
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
extern "C" __global__ void mark_done() { vec_add_done = 1; }
