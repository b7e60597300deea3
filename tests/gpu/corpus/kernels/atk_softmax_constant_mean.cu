// Attack: a constant output, every element equal to the row mean 1/M (the rows do sum to 1).
extern "C" __global__ void softmax_mean(const float* x, float* y, int m) {
  (void)x;
  float* out = y + (long long)blockIdx.x * m;
  for (int c = threadIdx.x; c < m; c += blockDim.x) out[c] = 1.f / (float)m;
}
