// First draft: one thread per output y[b, c]; neighbouring threads take
// neighbouring columns, so each step of the loop over r is a coalesced load.
extern "C" __global__ void reduce_sum_thread(const float* x, float* y, int B, int R, int C) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= B * C) return;
  const int b = i / C, c = i % C;
  float s = 0.0f;
  for (int r = 0; r < R; ++r) s += x[((size_t)b * R + r) * C + c];
  y[i] = s;
}
