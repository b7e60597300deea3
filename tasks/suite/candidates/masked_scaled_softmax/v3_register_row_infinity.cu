// Fused and read-once: one block of 256 threads per row loads the row once
// into registers (8 values per thread, rows up to 2048; whole float4 vectors
// when L % 4 == 0, the mask and the scale applied in registers), then writes
// the whole row (zeros above the diagonal): one read and one write of the
// tensor, against the unfused pipeline's 1 read + 1 write + 2 reads + 1 write.
// Longer rows: a streaming fallback.
#define T 256
#define PER 8
#define NEG_INF (-INFINITY)

__device__ __forceinline__ float block_max(float v, float* red) {
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  float r = red[0];
#pragma unroll
  for (int w = 1; w < T / 32; ++w) r = fmaxf(r, red[w]);
  return r;
}
__device__ __forceinline__ float block_sum(float v, float* red) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  float r = 0.0f;
#pragma unroll
  for (int w = 0; w < T / 32; ++w) r += red[w];
  return r;
}

extern "C" __global__ void __launch_bounds__(T) masked_softmax_reg(const float* __restrict__ x, float* __restrict__ y,
                                                                  int L) {
  __shared__ float red_max[T / 32], red_sum[T / 32];
  const size_t r = blockIdx.x;
  const int i = (int)(r % L);
  const float* in = x + r * L;
  float* out = y + r * L;
  const int t = threadIdx.x;
  if (L <= T * PER) {
    float v[PER];
    float m = NEG_INF;
    const bool vec = (L & 3) == 0;
    if (vec) {
      // thread t holds columns 4 (t + k T) .. 4 (t + k T) + 3 for k = 0, 1
      const float4* in4 = reinterpret_cast<const float4*>(in);
#pragma unroll
      for (int k = 0; k < PER / 4; ++k) {
        const int q = t + k * T;
        const float4 a = q < L / 4 ? __ldcs(&in4[q]) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        const int j = 4 * q;
        v[4 * k] = j <= i ? 0.125f * a.x : NEG_INF;
        v[4 * k + 1] = j + 1 <= i ? 0.125f * a.y : NEG_INF;
        v[4 * k + 2] = j + 2 <= i ? 0.125f * a.z : NEG_INF;
        v[4 * k + 3] = j + 3 <= i ? 0.125f * a.w : NEG_INF;
      }
    } else {
#pragma unroll
      for (int k = 0; k < PER; ++k) {
        const int j = t + k * T;
        v[k] = j <= i ? 0.125f * __ldcs(&in[j]) : NEG_INF;
      }
    }
#pragma unroll
    for (int k = 0; k < PER; ++k) m = fmaxf(m, v[k]);
    m = block_max(m, red_max);
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < PER; ++k) {
      v[k] = __expf(v[k] - m);  // masked: exp(-inf) = 0
      s += v[k];
    }
    const float inv = 1.0f / block_sum(s, red_sum);
    if (vec) {
      float4* out4 = reinterpret_cast<float4*>(out);
#pragma unroll
      for (int k = 0; k < PER / 4; ++k) {
        const int q = t + k * T;
        if (q < L / 4)
          __stcs(&out4[q], make_float4(v[4 * k] * inv, v[4 * k + 1] * inv, v[4 * k + 2] * inv, v[4 * k + 3] * inv));
      }
    } else {
#pragma unroll
      for (int k = 0; k < PER; ++k) {
        const int j = t + k * T;
        if (j < L) __stcs(&out[j], v[k] * inv);
      }
    }
    return;
  }
  float m = NEG_INF;
  for (int j = t; j <= i; j += T) m = fmaxf(m, 0.125f * in[j]);
  m = block_max(m, red_max);
  float s = 0.0f;
  for (int j = t; j <= i; j += T) s += __expf(0.125f * in[j] - m);
  const float inv = 1.0f / block_sum(s, red_sum);
  for (int j = t; j < L; j += T) out[j] = j <= i ? __expf(0.125f * in[j] - m) * inv : 0.0f;
}
