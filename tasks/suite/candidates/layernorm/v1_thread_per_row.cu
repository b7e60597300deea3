// First draft: one thread per row; mean, variance and output in three loops.
extern "C" __global__ void layernorm_thread_row(const float* x, const float* gamma, const float* beta, float* y,
                                                int N, int D) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= N) return;
  const float* row = x + (size_t)r * D;
  float* out = y + (size_t)r * D;
  float mean = 0.0f;
  for (int c = 0; c < D; ++c) mean += row[c];
  mean /= D;
  float var = 0.0f;
  for (int c = 0; c < D; ++c) var += (row[c] - mean) * (row[c] - mean);
  var /= D;
  const float rstd = 1.0f / sqrtf(var + 1e-5f);
  for (int c = 0; c < D; ++c) out[c] = (row[c] - mean) * rstd * gamma[c] + beta[c];
}
