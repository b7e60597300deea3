// A correct kernel, but without extern "C": its entry point is the mangled
// C++ name, so a plan that launches "vec_add_cpp" names nothing in the cubin.
__global__ void vec_add_cpp(const float* a, const float* b, float* c, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
