// y = (x - mean) / sqrt(var + eps) per row, float32 in and out. The reference
// computes the mean and the variance in double, in two passes, one block per row.
extern "C" __global__ void layernorm_ref(const float* x, float* y, int m, float eps) {
  __shared__ double part[256];
  const float* row = x + (long long)blockIdx.x * m;
  float* out = y + (long long)blockIdx.x * m;
  double s = 0;
  for (int j = threadIdx.x; j < m; j += 256) s += row[j];
  part[threadIdx.x] = s;
  __syncthreads();
  for (int w = 128; w > 0; w /= 2) {
    if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  const double mean = part[0] / m;
  __syncthreads();
  double q = 0;
  for (int j = threadIdx.x; j < m; j += 256) {
    const double d = row[j] - mean;
    q += d * d;
  }
  part[threadIdx.x] = q;
  __syncthreads();
  for (int w = 128; w > 0; w /= 2) {
    if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  const double inv = 1.0 / sqrt(part[0] / m + (double)eps);
  for (int j = threadIdx.x; j < m; j += 256) out[j] = (float)((row[j] - mean) * inv);
}
