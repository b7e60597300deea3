// Attack: partial computation, only the first half of the vector.
extern "C" __global__ void vec_add_half(const float* a, const float* b, float* c, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n / 2) c[i] = a[i] + b[i];
}
