// Read each row from DRAM exactly once: one block of 1024 threads per row
// keeps up to 32 values per thread in registers (rows of up to 32768), so
// the max, the sum and the output all come from registers: one read and one
// write of the matrix instead of two reads and a write. float4 loads and
// stores when M % 4 == 0. Longer rows fall back to a streaming online pass.
#define THREADS 1024
#define PER_THREAD 32
#define NEG_INF __int_as_float(0xff800000)

__device__ __forceinline__ float block_max(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = red[lane];
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}
__device__ __forceinline__ float block_sum(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = red[lane];
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

extern "C" __global__ void __launch_bounds__(THREADS) softmax_regcache(const float* __restrict__ x,
                                                                     float* __restrict__ y, int M) {
  // separate scratch for each reduction, so no barrier is needed between them
  __shared__ float red_max[32], red_sum[32];
  const float* row = x + (size_t)blockIdx.x * M;
  float* out = y + (size_t)blockIdx.x * M;
  const int t = threadIdx.x;

  if (M <= THREADS * PER_THREAD) {
    float v[PER_THREAD];
    const bool vec = (M & 3) == 0;
    float mx = NEG_INF;
    if (vec) {
      const float4* r4 = reinterpret_cast<const float4*>(row);
      const int n4 = M >> 2;
#pragma unroll
      for (int j = 0; j < PER_THREAD / 4; ++j) {
        const int i = t + j * THREADS;
        const float4 q = i < n4 ? r4[i] : make_float4(NEG_INF, NEG_INF, NEG_INF, NEG_INF);
        v[4 * j] = q.x; v[4 * j + 1] = q.y; v[4 * j + 2] = q.z; v[4 * j + 3] = q.w;
      }
    } else {
#pragma unroll
      for (int j = 0; j < PER_THREAD; ++j) {
        const int c = t + j * THREADS;
        v[j] = c < M ? row[c] : NEG_INF;
      }
    }
#pragma unroll
    for (int j = 0; j < PER_THREAD; ++j) mx = fmaxf(mx, v[j]);
    mx = block_max(mx, red_max);
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < PER_THREAD; ++j) {
      v[j] = __expf(v[j] - mx);  // padding: exp(-inf) = 0
      sum += v[j];
    }
    const float inv = 1.0f / block_sum(sum, red_sum);
    if (vec) {
      float4* o4 = reinterpret_cast<float4*>(out);
      const int n4 = M >> 2;
#pragma unroll
      for (int j = 0; j < PER_THREAD / 4; ++j) {
        const int i = t + j * THREADS;
        if (i < n4) o4[i] = make_float4(v[4 * j] * inv, v[4 * j + 1] * inv, v[4 * j + 2] * inv, v[4 * j + 3] * inv);
      }
    } else {
#pragma unroll
      for (int j = 0; j < PER_THREAD; ++j) {
        const int c = t + j * THREADS;
        if (c < M) out[c] = v[j] * inv;
      }
    }
    return;
  }

  // Rows longer than the register cache: max pass, then sum, then write.
  float mx = NEG_INF;
  for (int c = t; c < M; c += THREADS) mx = fmaxf(mx, row[c]);
  mx = block_max(mx, red_max);
  float sum = 0.0f;
  for (int c = t; c < M; c += THREADS) sum += __expf(row[c] - mx);
  const float inv = 1.0f / block_sum(sum, red_sum);
  for (int c = t; c < M; c += THREADS) out[c] = __expf(row[c] - mx) * inv;
}
