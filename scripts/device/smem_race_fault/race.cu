// Three kernels of the same shape for repro.cpp (one block of 256 threads per
// row of a layernorm):
//   layernorm_block  the bundled suite's layernorm/v2_block_nosync: its block
//                    reductions publish per-warp sums in shared memory with no
//                    __syncthreads, so threads read slots other warps have not
//                    written yet (a data race)
//   layernorm_ok     the same with the two barriers a block reduction needs
//   dump_smem        reads uninitialised shared memory and stores it, no race
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

// Same kernel with the barriers a correct block reduction needs.
__device__ __forceinline__ float block_sum_ok(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < (int)(blockDim.x >> 5); ++w) total += red[w];
  return total;
}
extern "C" __global__ void layernorm_ok(const float* x, const float* gamma, const float* beta, float* y, int D) {
  __shared__ float red[32];
  const float* row = x + (size_t)blockIdx.x * D;
  float* out = y + (size_t)blockIdx.x * D;
  float s = 0.0f;
  for (int c = threadIdx.x; c < D; c += blockDim.x) s += row[c];
  const float mean = block_sum_ok(s, red) / D;
  float q = 0.0f;
  for (int c = threadIdx.x; c < D; c += blockDim.x) { const float e = row[c] - mean; q += e * e; }
  const float rstd = rsqrtf(block_sum_ok(q, red) / D + 1e-5f);
  for (int c = threadIdx.x; c < D; c += blockDim.x) out[c] = (row[c] - mean) * rstd * gamma[c] + beta[c];
}
// Reads uninitialised static shared memory and writes it out, nothing else.
extern "C" __global__ void dump_smem(const float* x, const float* gamma, const float* beta, float* y, int D) {
  __shared__ float red[32];
  if (threadIdx.x < 32 && blockIdx.x * 32 + threadIdx.x < (unsigned)D) y[blockIdx.x * 32 + threadIdx.x] = red[threadIdx.x];
}
