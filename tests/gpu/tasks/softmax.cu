// Row-wise softmax of x[N, M] (row-major), in two passes:
//   row_stats:     stats[r] = (max of row r, sum of exp(x - max) over row r)
//   row_normalise: y[r, c] = exp(x[r, c] - max) / sum
// One block per row; the block reduces through dynamic shared memory of
// blockDim.x floats, so blockDim.x must be a power of two.

extern "C" __global__ void row_stats(const float* x, float* stats, int m) {
  extern __shared__ float partial[];
  const float* row = x + (long long)blockIdx.x * m;

  float mx = __int_as_float(0xff800000);  // -inf without <math.h> (NVRTC has no system headers)
  for (int c = threadIdx.x; c < m; c += blockDim.x) mx = fmaxf(mx, row[c]);
  partial[threadIdx.x] = mx;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) partial[threadIdx.x] = fmaxf(partial[threadIdx.x], partial[threadIdx.x + s]);
    __syncthreads();
  }
  mx = partial[0];
  __syncthreads();

  float sum = 0.f;
  for (int c = threadIdx.x; c < m; c += blockDim.x) sum += expf(row[c] - mx);
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    stats[2 * blockIdx.x] = mx;
    stats[2 * blockIdx.x + 1] = partial[0];
  }
}

extern "C" __global__ void row_normalise(const float* x, const float* stats, float* y, int m) {
  const long long base = (long long)blockIdx.x * m;
  const float mx = stats[2 * blockIdx.x];
  const float inv = 1.f / stats[2 * blockIdx.x + 1];
  for (int c = threadIdx.x; c < m; c += blockDim.x) y[base + c] = expf(x[base + c] - mx) * inv;
}
