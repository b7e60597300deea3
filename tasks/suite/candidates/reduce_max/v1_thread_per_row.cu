// First draft: one thread per row scans the row.
extern "C" __global__ void reduce_max_thread(const float* x, float* y, int N, int M) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= N) return;
  const float* row = x + (size_t)r * M;
  float m = row[0];
  for (int c = 1; c < M; ++c) m = fmaxf(m, row[c]);
  y[r] = m;
}
