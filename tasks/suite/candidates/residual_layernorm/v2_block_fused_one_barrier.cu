// Fused add + layer norm, one block of 256 threads per row: pass 1 reads x
// and r, writes h and sums it; pass 2 re-reads the row of h just written (a
// 16 KB row is still in L2) for the variance around the mean; pass 3 writes y.
// DRAM sees x and r once, h and y once: no separate residual kernel and no
// re-read of h from memory.
__device__ __forceinline__ float block_sum(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  __syncthreads();  // red may still be read by the previous call
  if (lane == 0) red[warp] = v;
  float t = 0.0f;
  for (int w = 0; w < 8; ++w) t += red[w];
  return t;
}

extern "C" __global__ void residual_ln_block(const float* x, const float* r, const float* gamma, const float* beta,
                                             float* h, float* y, int D) {
  __shared__ float red[8];
  const size_t base = (size_t)blockIdx.x * D;
  float s = 0.0f;
  for (int c = threadIdx.x; c < D; c += 256) {
    const float v = x[base + c] + r[base + c];
    h[base + c] = v;
    s += v;
  }
  const float mean = block_sum(s, red) / D;
  float q = 0.0f;
  for (int c = threadIdx.x; c < D; c += 256) {
    const float e = h[base + c] - mean;
    q += e * e;
  }
  const float rstd = rsqrtf(block_sum(q, red) / D + 1e-5f);
  for (int c = threadIdx.x; c < D; c += 256) y[base + c] = (h[base + c] - mean) * rstd * gamma[c] + beta[c];
}
