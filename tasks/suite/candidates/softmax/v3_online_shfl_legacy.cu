// Online softmax: one pass keeps a running (max, sum of exp) per thread,
// rescaling the sum when the max grows, so the row is read twice instead of
// three times. float4 loads when rows are 16-byte aligned (M % 4 == 0).
// Warp shuffles merge the (max, sum) pairs, then the 8 warps via shared memory.
#define NEG_INF __int_as_float(0xff800000)

__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
  const float mn = fmaxf(m, m2);
  if (mn == NEG_INF) return;
  s = s * __expf(m - mn) + s2 * __expf(m2 - mn);
  m = mn;
}
__device__ __forceinline__ void push(float& m, float& s, float v) {
  if (v > m) {
    s = s * __expf(m - v) + 1.0f;
    m = v;
  } else {
    s += __expf(v - m);
  }
}

extern "C" __global__ void softmax_online_v3(const float* __restrict__ x, float* __restrict__ y, int M) {
  __shared__ float wm[8], ws[8];
  const float* row = x + (size_t)blockIdx.x * M;
  float* out = y + (size_t)blockIdx.x * M;
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const bool vec = (M & 3) == 0;
  float m = NEG_INF, s = 0.0f;
  if (vec) {
    const float4* r4 = reinterpret_cast<const float4*>(row);
    for (int i = t; i < M / 4; i += 256) {
      const float4 v = r4[i];
      push(m, s, v.x); push(m, s, v.y); push(m, s, v.z); push(m, s, v.w);
    }
  } else {
    for (int c = t; c < M; c += 256) push(m, s, row[c]);
  }
  for (int off = 16; off > 0; off >>= 1) {
    const float m2 = __shfl_xor(m, off);
    const float s2 = __shfl_xor(s, off);
    merge(m, s, m2, s2);
  }
  if (lane == 0) { wm[warp] = m; ws[warp] = s; }
  __syncthreads();
  m = wm[0]; s = ws[0];
  for (int w = 1; w < 8; ++w) merge(m, s, wm[w], ws[w]);
  const float inv = 1.0f / s;
  if (vec) {
    const float4* r4 = reinterpret_cast<const float4*>(row);
    float4* o4 = reinterpret_cast<float4*>(out);
    for (int i = t; i < M / 4; i += 256) {
      const float4 v = r4[i];
      o4[i] = make_float4(__expf(v.x - m) * inv, __expf(v.y - m) * inv, __expf(v.z - m) * inv, __expf(v.w - m) * inv);
    }
  } else {
    for (int c = t; c < M; c += 256) out[c] = __expf(row[c] - m) * inv;
  }
}
