// Statistics in one read: per-thread Welford (count, mean, M2) over float4
// loads, merged across the warp with shuffles and across the 8 warps through
// shared memory (Chan's parallel formula). Second pass: normalise with
// float4 loads of x, gamma and beta. Scalar paths when D % 4 != 0.
__device__ __forceinline__ void welford_push(float& n, float& mean, float& m2, float v) {
  n += 1.0f;
  const float d = v - mean;
  mean += d / n;
  m2 += d * (v - mean);
}
__device__ __forceinline__ void welford_merge(float& n, float& mean, float& m2, float nb, float meanb, float m2b) {
  const float nn = n + nb;
  if (nn == 0.0f) return;
  const float d = meanb - mean;
  const float fb = nb / nn;
  mean += d * fb;
  m2 += m2b + d * d * n * fb;
  n = nn;
}

extern "C" __global__ void __launch_bounds__(256) layernorm_welford(const float* __restrict__ x,
                                                                   const float* __restrict__ gamma,
                                                                   const float* __restrict__ beta,
                                                                   float* __restrict__ y, int D) {
  __shared__ float sn[8], smean[8], sm2[8];
  const float* row = x + (size_t)blockIdx.x * D;
  float* out = y + (size_t)blockIdx.x * D;
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const bool vec = (D & 3) == 0;
  float n = 0.0f, mean = 0.0f, m2 = 0.0f;
  if (vec) {
    const float4* r4 = reinterpret_cast<const float4*>(row);
    for (int i = t; i < D / 4; i += 256) {
      const float4 v = r4[i];
      welford_push(n, mean, m2, v.x);
      welford_push(n, mean, m2, v.y);
      welford_push(n, mean, m2, v.z);
      welford_push(n, mean, m2, v.w);
    }
  } else {
    for (int c = t; c < D; c += 256) welford_push(n, mean, m2, row[c]);
  }
  for (int off = 16; off > 0; off >>= 1) {
    const float nb = __shfl_xor_sync(0xffffffffu, n, off);
    const float mb = __shfl_xor_sync(0xffffffffu, mean, off);
    const float qb = __shfl_xor_sync(0xffffffffu, m2, off);
    welford_merge(n, mean, m2, nb, mb, qb);
  }
  if (lane == 0) {
    sn[warp] = n;
    smean[warp] = mean;
    sm2[warp] = m2;
  }
  __syncthreads();
  n = sn[0];
  mean = smean[0];
  m2 = sm2[0];
  for (int w = 1; w < 8; ++w) welford_merge(n, mean, m2, sn[w], smean[w], sm2[w]);
  const float rstd = rsqrtf(m2 / D + 1e-5f);
  if (vec) {
    const float4* r4 = reinterpret_cast<const float4*>(row);
    const float4* g4 = reinterpret_cast<const float4*>(gamma);
    const float4* b4 = reinterpret_cast<const float4*>(beta);
    float4* o4 = reinterpret_cast<float4*>(out);
    for (int i = t; i < D / 4; i += 256) {
      const float4 v = r4[i], g = __ldg(&g4[i]), b = __ldg(&b4[i]);
      o4[i] = make_float4((v.x - mean) * rstd * g.x + b.x, (v.y - mean) * rstd * g.y + b.y,
                          (v.z - mean) * rstd * g.z + b.z, (v.w - mean) * rstd * g.w + b.w);
    }
  } else {
    for (int c = t; c < D; c += 256) out[c] = (row[c] - mean) * rstd * gamma[c] + beta[c];
  }
}
