// float4 loads (rows are 16-byte aligned when M % 4 == 0, else scalar), a
// warp-shuffle max, and the 8 warp maxima combined by thread 0 through
// shared memory: no tree of barriers.
#define NEG_INF __int_as_float(0xff800000)

extern "C" __global__ void reduce_max_shfl(const float* __restrict__ x, float* __restrict__ y, int M) {
  __shared__ float wmax[8];
  const float* row = x + (size_t)blockIdx.x * M;
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  float v = 0.0f;
  if ((M & 3) == 0) {
    const float4* r4 = reinterpret_cast<const float4*>(row);
    for (int i = t; i < M / 4; i += 256) {
      const float4 q = __ldcs(&r4[i]);
      v = fmaxf(v, fmaxf(fmaxf(q.x, q.y), fmaxf(q.z, q.w)));
    }
  } else {
    for (int c = t; c < M; c += 256) v = fmaxf(v, __ldcs(&row[c]));
  }
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  if (lane == 0) wmax[warp] = v;
  __syncthreads();
  if (t == 0) {
    float m = wmax[0];
    for (int w = 1; w < 8; ++w) m = fmaxf(m, wmax[w]);
    y[blockIdx.x] = m;
  }
}
