// Two passes in float: the mean first, then the sum of squared deviations.
// Warp shuffles, then one value per warp through shared memory.
__device__ float block_sum(float v, float* scratch) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < (blockDim.x / 32) ? scratch[lane] : 0.f;
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

extern "C" __global__ void layernorm2(const float* x, float* y, int m, float eps) {
  __shared__ float scratch[32];
  const float* row = x + (long long)blockIdx.x * m;
  float* out = y + (long long)blockIdx.x * m;
  float s = 0.f;
  for (int j = threadIdx.x; j < m; j += blockDim.x) s += row[j];
  const float mean = block_sum(s, scratch) / m;
  float q = 0.f;
  for (int j = threadIdx.x; j < m; j += blockDim.x) {
    const float d = row[j] - mean;
    q = fmaf(d, d, q);
  }
  const float inv = rsqrtf(block_sum(q, scratch) / m + eps);
  for (int j = threadIdx.x; j < m; j += blockDim.x) out[j] = (row[j] - mean) * inv;
}
