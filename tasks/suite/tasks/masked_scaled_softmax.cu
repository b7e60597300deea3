// masked_scaled_softmax: causal attention probabilities from raw scores.
// For each of the BH matrices x[h] of shape [L, L] (row-major float32), row i:
//   s[j] = 0.125 * x[h, i, j] for j <= i, and -inf for j > i (causal mask),
//   y[h, i, j] = exp(s[j] - max s) / sum over j' of exp(s[j'] - max s)
// (so y[h, i, j] = 0 for j > i). 0.125 = 1 / sqrt(64), a head size of 64.
#define NEG_INF __int_as_float(0xff800000)

// Reference (trusted): one block of 256 threads per row, three plain passes
// in double, a shared-memory tree. blockDim.x must be 256. grid.x = BH * L.
extern "C" __global__ void masked_softmax_ref(const float* x, float* y, int l) {
  __shared__ double red[256];
  const long long r = blockIdx.x;
  const int i = (int)(r % l);  // row within its matrix: columns 0 .. i are kept
  const float* row = x + r * l;
  float* out = y + r * l;
  const int t = threadIdx.x;
  double mx = -1e300;
  for (int c = t; c <= i; c += 256) mx = fmax(mx, 0.125 * (double)row[c]);
  red[t] = mx;
  __syncthreads();
  for (int s = 128; s > 0; s /= 2) {
    if (t < s) red[t] = fmax(red[t], red[t + s]);
    __syncthreads();
  }
  mx = red[0];
  __syncthreads();
  double sum = 0.0;
  for (int c = t; c <= i; c += 256) sum += exp(0.125 * (double)row[c] - mx);
  red[t] = sum;
  __syncthreads();
  for (int s = 128; s > 0; s /= 2) {
    if (t < s) red[t] += red[t + s];
    __syncthreads();
  }
  sum = red[0];
  for (int c = t; c < l; c += 256) out[c] = c <= i ? (float)(exp(0.125 * (double)row[c] - mx) / sum) : 0.0f;
}

// Baseline, unfused as a framework runs it: kernel 1 writes the scaled and
// masked scores (0.125 x, or -inf above the diagonal) to a scratch tensor;
// kernel 2 is a competent row softmax over it (one block of 256 threads per
// row, an online max/sum pass with float4 loads, then a normalising pass).
extern "C" __global__ void __launch_bounds__(256) scale_mask(const float* __restrict__ x, float* __restrict__ s, int L,
                                                            long long total) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < total; k += stride) {
    const int j = (int)(k % L), i = (int)(k / L % L);
    s[k] = j <= i ? 0.125f * x[k] : NEG_INF;
  }
}

__device__ __forceinline__ void online_add(float& m, float& s, float v) {
  if (v > m) {
    s = s * expf(m - v) + 1.0f;
    m = v;
  } else if (v != NEG_INF) {
    s += expf(v - m);
  }
}
__device__ __forceinline__ void online_merge(float& m, float& s, float m2, float s2) {
  const float mn = fmaxf(m, m2);
  if (mn == NEG_INF) return;
  s = s * expf(m - mn) + s2 * expf(m2 - mn);
  m = mn;
}

extern "C" __global__ void __launch_bounds__(256) softmax_rows(const float* __restrict__ s, float* __restrict__ y,
                                                              int L) {
  __shared__ float wm[8], ws[8];
  const float* row = s + (size_t)blockIdx.x * L;
  float* out = y + (size_t)blockIdx.x * L;
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const bool vec = (L & 3) == 0;
  float m = NEG_INF, sum = 0.0f;
  if (vec) {
    const float4* r4 = reinterpret_cast<const float4*>(row);
    for (int k = t; k < L / 4; k += 256) {
      const float4 v = r4[k];
      online_add(m, sum, v.x);
      online_add(m, sum, v.y);
      online_add(m, sum, v.z);
      online_add(m, sum, v.w);
    }
  } else {
    for (int c = t; c < L; c += 256) online_add(m, sum, row[c]);
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, off);
    const float s2 = __shfl_xor_sync(0xffffffffu, sum, off);
    online_merge(m, sum, m2, s2);
  }
  if (lane == 0) {
    wm[warp] = m;
    ws[warp] = sum;
  }
  __syncthreads();
  m = wm[0];
  sum = ws[0];
#pragma unroll
  for (int w = 1; w < 8; ++w) online_merge(m, sum, wm[w], ws[w]);
  const float inv = 1.0f / sum;
  if (vec) {
    const float4* r4 = reinterpret_cast<const float4*>(row);
    float4* o4 = reinterpret_cast<float4*>(out);
    for (int k = t; k < L / 4; k += 256) {
      const float4 v = r4[k];
      o4[k] = make_float4(expf(v.x - m) * inv, expf(v.y - m) * inv, expf(v.z - m) * inv, expf(v.w - m) * inv);
    }
  } else {
    for (int c = t; c < L; c += 256) out[c] = expf(row[c] - m) * inv;
  }
}
