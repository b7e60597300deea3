// One block of 256 threads per row: coalesced strided loops, a pass for the
// mean, a pass for the variance around it (numerically safe), a pass for the
// output. Block reductions: warp shuffles (the _sync shuffles already
// synchronise each warp), then lane 0 of every warp publishes its sum in
// shared memory and every thread adds the 8 slots.
__device__ __forceinline__ float block_sum(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  if (lane == 0) red[warp] = v;
  __syncwarp();
  float total = 0.0f;
  for (int w = 0; w < (int)(blockDim.x >> 5); ++w) total += red[w];
  return total;
}

extern "C" __global__ void layernorm_block(const float* x, const float* gamma, const float* beta, float* y, int D) {
  __shared__ float red[32];
  const float* row = x + (size_t)blockIdx.x * D;
  float* out = y + (size_t)blockIdx.x * D;
  float s = 0.0f;
  for (int c = threadIdx.x; c < D; c += blockDim.x) s += row[c];
  const float mean = block_sum(s, red) / D;
  float q = 0.0f;
  for (int c = threadIdx.x; c < D; c += blockDim.x) {
    const float e = row[c] - mean;
    q += e * e;
  }
  const float rstd = rsqrtf(block_sum(q, red) / D + 1e-5f);
  for (int c = threadIdx.x; c < D; c += blockDim.x) out[c] = (row[c] - mean) * rstd * gamma[c] + beta[c];
}
