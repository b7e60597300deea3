// Race: plain (non-atomic) increments of the global counts from every thread.
extern "C" __global__ void hist_clear(int* counts) {
  if (threadIdx.x < 64) counts[threadIdx.x] = 0;
}

extern "C" __global__ void hist_racy(const int* x, int* counts, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    const int v = x[i];
    if ((unsigned)v < 64u) {
      volatile int* c = counts + v;
      *c = *c + 1;
    }
  }
}
