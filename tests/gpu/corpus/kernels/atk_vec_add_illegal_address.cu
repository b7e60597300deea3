// Crash: a store 1 TiB past the output: an illegal address, the context is poisoned.
extern "C" __global__ void vec_add_wild(const float* a, const float* b, float* c, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i + (1ll << 38)] = a[i] + b[i];
}
