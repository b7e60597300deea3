// First draft: one thread per row scans the row, keeping the first maximum.
extern "C" __global__ void argmax_thread(const float* x, int* idx, int N, int M) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= N) return;
  const float* row = x + (size_t)r * M;
  int best = 0;
  for (int c = 1; c < M; ++c)
    if (row[c] > row[best]) best = c;
  idx[r] = best;
}
