// Correct: the plan splits the work over two launches of one kernel (both inside the timed region).
extern "C" __global__ void vec_add_range(const float* a, const float* b, float* c, int begin, int end) {
  const int i = begin + blockIdx.x * blockDim.x + threadIdx.x;
  if (i < end) c[i] = a[i] + b[i];
}
