// Correct, but block 0 stalls for about 20 microseconds on the global timer.
// Timing manipulation from inside a kernel can only add time the events measure.
extern "C" __global__ void vec_add_padded(const float* a, const float* b, float* c, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < 20000ull);
  }
  if (i < n) c[i] = a[i] + b[i];
}
