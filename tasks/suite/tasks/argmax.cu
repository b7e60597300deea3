// argmax: idx[r] = the smallest c with x[r, c] = max of row r, for x[N, M]
// row-major float32; idx is int32.
#define NEG_INF __int_as_float(0xff800000)

// Reference (trusted): one thread per row, a sequential scan with a strict
// comparison (so the first maximum wins).
extern "C" __global__ void argmax_ref(const float* x, int* idx, int n, int m) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= n) return;
  const float* row = x + (long long)r * m;
  float best = row[0];
  int at = 0;
  for (int c = 1; c < m; ++c)
    if (row[c] > best) {
      best = row[c];
      at = c;
    }
  idx[r] = at;
}

// Baseline: one block of 256 threads per row, float4 loads when M % 4 == 0;
// each thread keeps (value, index) of its first maximum, pairs are merged
// with warp shuffles (larger value, then smaller index) and the 8 warp
// results through shared memory. One coalesced read of x.
__device__ __forceinline__ void better(float& v, int& i, float ov, int oi) {
  if (ov > v || (ov == v && oi < i)) {
    v = ov;
    i = oi;
  }
}

extern "C" __global__ void __launch_bounds__(256) argmax_base(const float* __restrict__ x, int* __restrict__ idx,
                                                             int M) {
  __shared__ float wv[8];
  __shared__ int wi[8];
  const float* row = x + (size_t)blockIdx.x * M;
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  float v = NEG_INF;
  int i = 0x7fffffff;
  if ((M & 3) == 0) {
    const float4* r4 = reinterpret_cast<const float4*>(row);
    for (int k = t; k < M / 4; k += 256) {
      const float4 q = r4[k];
      if (q.x > v) { v = q.x; i = 4 * k; }
      if (q.y > v) { v = q.y; i = 4 * k + 1; }
      if (q.z > v) { v = q.z; i = 4 * k + 2; }
      if (q.w > v) { v = q.w; i = 4 * k + 3; }
    }
  } else {
    for (int c = t; c < M; c += 256)
      if (row[c] > v) {
        v = row[c];
        i = c;
      }
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, off);
    const int oi = __shfl_xor_sync(0xffffffffu, i, off);
    better(v, i, ov, oi);
  }
  if (lane == 0) {
    wv[warp] = v;
    wi[warp] = i;
  }
  __syncthreads();
  if (t == 0) {
    for (int w = 1; w < 8; ++w) better(v, i, wv[w], wi[w]);
    idx[blockIdx.x] = i;
  }
}
