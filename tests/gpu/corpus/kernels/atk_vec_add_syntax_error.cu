// Does not compile: an undeclared name and a missing semicolon.
extern "C" __global__ void vec_add_broken(const float* a, const float* b, float* c, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x
  if (i < n) c[i] = a[i] + b[j];
}
