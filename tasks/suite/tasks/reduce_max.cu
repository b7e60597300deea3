// reduce_max: y[r] = max over c of x[r, c] for x[N, M] row-major float32.
#define NEG_INF __int_as_float(0xff800000)

// Reference (trusted): one block of 256 threads per row, a strided max per
// thread, then a shared-memory tree. The maximum is exact in any order.
// blockDim.x must be 256.
extern "C" __global__ void reduce_max_ref(const float* x, float* y, int m) {
  __shared__ float red[256];
  const float* row = x + (long long)blockIdx.x * m;
  const int t = threadIdx.x;
  float v = NEG_INF;
  for (int c = t; c < m; c += 256) v = fmaxf(v, row[c]);
  red[t] = v;
  __syncthreads();
  for (int s = 128; s > 0; s /= 2) {
    if (t < s) red[t] = fmaxf(red[t], red[t + s]);
    __syncthreads();
  }
  if (t == 0) y[blockIdx.x] = red[0];
}

// Baseline: one block of 256 threads per row, float4 loads when M % 4 == 0
// (rows 16-byte aligned), warp-shuffle max, the 8 warp results combined
// through shared memory. One coalesced read of x.
extern "C" __global__ void __launch_bounds__(256) reduce_max_base(const float* __restrict__ x, float* __restrict__ y,
                                                                 int M) {
  __shared__ float wmax[8];
  const float* row = x + (size_t)blockIdx.x * M;
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  float v = NEG_INF;
  if ((M & 3) == 0) {
    const float4* r4 = reinterpret_cast<const float4*>(row);
    for (int i = t; i < M / 4; i += 256) {
      const float4 q = r4[i];
      v = fmaxf(v, fmaxf(fmaxf(q.x, q.y), fmaxf(q.z, q.w)));
    }
  } else {
    for (int c = t; c < M; c += 256) v = fmaxf(v, row[c]);
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  if (lane == 0) wmax[warp] = v;
  __syncthreads();
  if (t == 0) {
    float m = wmax[0];
#pragma unroll
    for (int w = 1; w < 8; ++w) m = fmaxf(m, wmax[w]);
    y[blockIdx.x] = m;
  }
}
