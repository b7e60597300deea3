// Attack: computes in place into input a, then copies to c: the output is right, a is clobbered.
extern "C" __global__ void vec_add_inplace(float* a, const float* b, float* c, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    a[i] += b[i];
    c[i] = a[i];
  }
}
