// cumsum: inclusive prefix sum along the last dimension of x[B, N] (row-major
// float32): y[b, i] = x[b, 0] + x[b, 1] + ... + x[b, i].

// Reference (trusted): one thread per row, a sequential running sum in double.
extern "C" __global__ void cumsum_ref(const float* x, float* y, int b, int n) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= b) return;
  const float* in = x + (long long)r * n;
  float* out = y + (long long)r * n;
  double s = 0.0;
  for (int i = 0; i < n; ++i) {
    s += in[i];
    out[i] = (float)s;
  }
}

// Baseline: one block of 1024 threads per row, the row processed in chunks
// of 4096: each thread loads 4 neighbouring values (one float4 when N % 4 == 0),
// scans them in registers, the thread totals are scanned with warp shuffles,
// the 32 warp totals by warp 0 through shared memory, and a running carry
// links the chunks. One read and one write of the data, coalesced.
#define SCAN_THREADS 1024
extern "C" __global__ void __launch_bounds__(SCAN_THREADS) cumsum_block(const float* __restrict__ x,
                                                                      float* __restrict__ y, int N) {
  __shared__ float wsum[32];
  const float* row = x + (size_t)blockIdx.x * N;
  float* out = y + (size_t)blockIdx.x * N;
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const bool vec = (N & 3) == 0;
  float carry = 0.0f;
  for (int base = 0; base < N; base += 4 * SCAN_THREADS) {
    const int i0 = base + 4 * t;
    float v[4];
    if (vec && i0 < N) {
      const float4 q = *reinterpret_cast<const float4*>(row + i0);
      v[0] = q.x; v[1] = q.y; v[2] = q.z; v[3] = q.w;
    } else {
#pragma unroll
      for (int k = 0; k < 4; ++k) v[k] = i0 + k < N ? row[i0 + k] : 0.0f;
    }
    v[1] += v[0];
    v[2] += v[1];
    v[3] += v[2];
    float s = v[3];
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const float o = __shfl_up_sync(0xffffffffu, s, off);
      if (lane >= off) s += o;
    }
    if (lane == 31) wsum[warp] = s;
    __syncthreads();
    if (warp == 0) {
      float w = wsum[lane];
#pragma unroll
      for (int off = 1; off < 32; off <<= 1) {
        const float o = __shfl_up_sync(0xffffffffu, w, off);
        if (lane >= off) w += o;
      }
      wsum[lane] = w;
    }
    __syncthreads();
    const float before = carry + (warp > 0 ? wsum[warp - 1] : 0.0f) + (s - v[3]);
    if (vec && i0 < N) {
      *reinterpret_cast<float4*>(out + i0) = make_float4(v[0] + before, v[1] + before, v[2] + before, v[3] + before);
    } else {
#pragma unroll
      for (int k = 0; k < 4; ++k)
        if (i0 + k < N) out[i0 + k] = v[k] + before;
    }
    carry += wsum[31];
    __syncthreads();  // wsum is rewritten by the next chunk
  }
}
