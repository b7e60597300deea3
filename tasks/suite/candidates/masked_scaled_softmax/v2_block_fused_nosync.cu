// Fused scale + mask + softmax, one block of 256 threads per row: each pass
// streams the row with the scale and the causal mask applied on the fly (the
// later passes hit L2: a row is 4 KB), max and sum through warp shuffles and
// 8 shared slots (a separate array per reduction), masked outputs written as
// zeros. No intermediate tensor.
#define NEG_INF __int_as_float(0xff800000)

__device__ __forceinline__ float block_reduce(float v, float* red, bool is_max) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int off = 16; off > 0; off >>= 1) {
    const float o = __shfl_xor_sync(0xffffffffu, v, off);
    v = is_max ? fmaxf(v, o) : v + o;
  }
  if (lane == 0) red[warp] = v;
  __syncwarp();
  float r = red[0];
  for (int w = 1; w < 8; ++w) r = is_max ? fmaxf(r, red[w]) : r + red[w];
  return r;
}

extern "C" __global__ void masked_softmax_block(const float* x, float* y, int L) {
  __shared__ float red_max[8], red_sum[8];
  const size_t r = blockIdx.x;
  const int i = (int)(r % L);
  const float* in = x + r * L;
  float* out = y + r * L;
  const int t = threadIdx.x;
  float m = NEG_INF;
  for (int j = t; j < L; j += 256) {
    const float v = 0.125f * in[j];
    if (j <= i) m = fmaxf(m, v);
  }
  m = block_reduce(m, red_max, true);
  float s = 0.0f;
  for (int j = t; j < L; j += 256) {
    const float v = 0.125f * in[j];
    if (j <= i) s += __expf(v - m);
  }
  const float inv = 1.0f / block_reduce(s, red_sum, false);
  for (int j = t; j < L; j += 256) {
    const float v = 0.125f * in[j];
    out[j] = j <= i ? __expf(v - m) * inv : 0.0f;
  }
}
