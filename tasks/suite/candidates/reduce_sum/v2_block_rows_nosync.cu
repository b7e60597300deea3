// More parallelism: a block of 32 x 16 threads covers 32 columns of one
// batch; the 16 rows of threads split r between them and their partial sums
// are combined through shared memory by the first row of threads.
#define COLS 32
#define ROWS 16

extern "C" __global__ void reduce_sum_rows(const float* x, float* y, int R, int C) {
  __shared__ float part[ROWS][COLS];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int c = blockIdx.x * COLS + tx;
  const size_t b = blockIdx.y;
  float s = 0.0f;
  if (c < C)
    for (int r = ty; r < R; r += ROWS) s += x[(b * R + r) * C + c];
  part[ty][tx] = s;
  if (ty == 0 && c < C) {
    float t = 0.0f;
    for (int k = 0; k < ROWS; ++k) t += part[k][tx];
    y[b * C + c] = t;
  }
}
