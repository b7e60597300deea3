// Right everywhere but the middle element, which is +inf.
extern "C" __global__ void vec_add_inf(const float* a, const float* b, float* c, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = i == n / 2 ? __int_as_float(0x7f800000) : a[i] + b[i];
}
