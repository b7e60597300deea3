// Attack: one NaN in an otherwise correct output (the reference is finite everywhere).
extern "C" __global__ void vec_add_nan(const float* a, const float* b, float* c, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = (i == n / 2) ? __int_as_float(0x7fc00000) : a[i] + b[i];
}
