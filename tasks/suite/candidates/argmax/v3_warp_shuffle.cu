// float4 loads (rows 16-byte aligned when M % 4 == 0, else scalar), each
// thread keeps its first (value, index) maximum, warps merge pairs with
// shuffles, thread 0 merges the 8 warp results. Ties: the smaller index.
#define NEG_INF __int_as_float(0xff800000)

__device__ __forceinline__ void take(float& v, int& i, float ov, int oi) {
  if (ov > v || (ov == v && oi < i)) {
    v = ov;
    i = oi;
  }
}

extern "C" __global__ void argmax_shfl(const float* __restrict__ x, int* __restrict__ idx, int M) {
  __shared__ float wv[8];
  __shared__ int wi[8];
  const float* row = x + (size_t)blockIdx.x * M;
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  float v = NEG_INF;
  int i = M;
  if ((M & 3) == 0) {
    const float4* r4 = reinterpret_cast<const float4*>(row);
    for (int k = t; k < M / 4; k += 256) {
      const float4 q = __ldcs(&r4[k]);
      if (q.x > v) { v = q.x; i = 4 * k; }
      if (q.y > v) { v = q.y; i = 4 * k + 1; }
      if (q.z > v) { v = q.z; i = 4 * k + 2; }
      if (q.w > v) { v = q.w; i = 4 * k + 3; }
    }
  } else {
    for (int c = t; c < M; c += 256) {
      const float q = __ldcs(&row[c]);
      if (q > v) { v = q; i = c; }
    }
  }
  for (int off = 16; off > 0; off >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, off);
    const int oi = __shfl_xor_sync(0xffffffffu, i, off);
    take(v, i, ov, oi);
  }
  if (lane == 0) { wv[warp] = v; wi[warp] = i; }
  __syncthreads();
  if (t == 0) {
    for (int w = 1; w < 8; ++w) take(v, i, wv[w], wi[w]);
    idx[blockIdx.x] = i;
  }
}
