// Attack: correct output, plus one write just before the start of c (into the guard zone).
extern "C" __global__ void vec_add_oob_before(const float* a, const float* b, float* c, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
  if (i == 0) c[-1] = 1.f;
}
