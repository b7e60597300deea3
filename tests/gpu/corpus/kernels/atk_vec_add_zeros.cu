// Attack: all-zero output.
extern "C" __global__ void vec_add_zero(const float* a, const float* b, float* c, int n) {
  (void)a; (void)b;
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = 0.f;
}
