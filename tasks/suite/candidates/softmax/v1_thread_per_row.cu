// First draft: one thread per row, three loops (max, sum, normalise).
extern "C" __global__ void softmax_thread_row(const float* x, float* y, int N, int M) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= N) return;
  const float* row = x + (size_t)r * M;
  float* out = y + (size_t)r * M;
  float mx = row[0];
  for (int c = 1; c < M; ++c) mx = fmaxf(mx, row[c]);
  float sum = 0.0f;
  for (int c = 0; c < M; ++c) sum += expf(row[c] - mx);
  const float inv = 1.0f / sum;
  for (int c = 0; c < M; ++c) out[c] = expf(row[c] - mx) * inv;
}
