// softmax: y[r, c] = exp(x[r, c] - max_r) / sum_c' exp(x[r, c'] - max_r) for
// every row r of x[N, M] (row-major float32).

#define NEG_INF __int_as_float(0xff800000)

// Reference (trusted): one block of 256 threads per row, three plain passes
// (max, sum, normalise), the exponentials and the sum in double, reduced
// through a shared-memory tree. blockDim.x must be 256.
extern "C" __global__ void softmax_ref(const float* x, float* y, int m) {
  __shared__ double red[256];
  const float* row = x + (long long)blockIdx.x * m;
  float* out = y + (long long)blockIdx.x * m;
  const int t = threadIdx.x;

  float mx = NEG_INF;
  for (int c = t; c < m; c += 256) mx = fmaxf(mx, row[c]);
  red[t] = mx;
  __syncthreads();
  for (int s = 128; s > 0; s /= 2) {
    if (t < s) red[t] = fmax(red[t], red[t + s]);
    __syncthreads();
  }
  const double rmax = red[0];
  __syncthreads();

  double sum = 0.0;
  for (int c = t; c < m; c += 256) sum += exp((double)row[c] - rmax);
  red[t] = sum;
  __syncthreads();
  for (int s = 128; s > 0; s /= 2) {
    if (t < s) red[t] += red[t + s];
    __syncthreads();
  }
  const double total = red[0];
  for (int c = t; c < m; c += 256) out[c] = (float)(exp((double)row[c] - rmax) / total);
}

// Baseline: what a competent engineer ships for a row softmax of any length.
// One block of 256 threads per row; pass 1 reads the row once with float4
// loads (when M % 4 == 0) and keeps an online (max, sum of exp) per thread,
// merged with warp shuffles and then across the 8 warps; pass 2 reads the row
// again and writes exp(x - max) / sum. Two reads and one write of the matrix.
__device__ __forceinline__ void online_merge(float& m, float& s, float m2, float s2) {
  const float mn = fmaxf(m, m2);
  if (mn == NEG_INF) return;  // both empty
  s = s * expf(m - mn) + s2 * expf(m2 - mn);
  m = mn;
}

__device__ __forceinline__ void online_add(float& m, float& s, float v) {
  if (v > m) {
    s = s * expf(m - v) + 1.0f;
    m = v;
  } else {
    s += expf(v - m);
  }
}

extern "C" __global__ void __launch_bounds__(256) softmax_online(const float* __restrict__ x, float* __restrict__ y,
                                                                int M) {
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
      online_add(m, s, v.x);
      online_add(m, s, v.y);
      online_add(m, s, v.z);
      online_add(m, s, v.w);
    }
  } else {
    for (int c = t; c < M; c += 256) online_add(m, s, row[c]);
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, off);
    const float s2 = __shfl_xor_sync(0xffffffffu, s, off);
    online_merge(m, s, m2, s2);
  }
  if (lane == 0) {
    wm[warp] = m;
    ws[warp] = s;
  }
  __syncthreads();
  m = wm[0];
  s = ws[0];
#pragma unroll
  for (int w = 1; w < 8; ++w) online_merge(m, s, wm[w], ws[w]);
  const float inv = 1.0f / s;

  if (vec) {
    const float4* r4 = reinterpret_cast<const float4*>(row);
    float4* o4 = reinterpret_cast<float4*>(out);
    for (int i = t; i < M / 4; i += 256) {
      const float4 v = r4[i];
      o4[i] = make_float4(expf(v.x - m) * inv, expf(v.y - m) * inv, expf(v.z - m) * inv, expf(v.w - m) * inv);
    }
  } else {
    for (int c = t; c < M; c += 256) out[c] = expf(row[c] - m) * inv;
  }
}
