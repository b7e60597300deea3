// Register + warp-shuffle scan: 512 threads per row, chunks of 4096: each
// thread loads 8 neighbouring values (two float4 when N % 4 == 0), scans them
// in registers, the thread totals are scanned with __shfl_up_sync, the 16
// warp totals by the first warp, and a carry links the chunks. One read and
// one write of the data.
#define T 512
#define PER 8

extern "C" __global__ void __launch_bounds__(T) cumsum_warp(const float* __restrict__ x, float* __restrict__ y, int N) {
  __shared__ float wsum[T / 32];
  const float* row = x + (size_t)blockIdx.x * N;
  float* out = y + (size_t)blockIdx.x * N;
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const bool vec = (N & 3) == 0;
  float carry = 0.0f;
  for (int base = 0; base < N; base += T * PER) {
    const int i0 = base + PER * t;
    float v[PER];
    if (vec && i0 + PER <= N) {
      const float4 a = *reinterpret_cast<const float4*>(row + i0);
      const float4 b = *reinterpret_cast<const float4*>(row + i0 + 4);
      v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
    } else {
#pragma unroll
      for (int k = 0; k < PER; ++k) v[k] = i0 + k < N ? row[i0 + k] : 0.0f;
    }
#pragma unroll
    for (int k = 1; k < PER; ++k) v[k] += v[k - 1];
    float s = v[PER - 1];
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const float o = __shfl_up_sync(s, off);
      if (lane >= off) s += o;
    }
    if (lane == 31) wsum[warp] = s;
    __syncthreads();
    if (warp == 0) {
      float w = lane < T / 32 ? wsum[lane] : 0.0f;
#pragma unroll
      for (int off = 1; off < T / 32; off <<= 1) {
        const float o = __shfl_up_sync(0xffffffffu, w, off);
        if (lane >= off) w += o;
      }
      if (lane < T / 32) wsum[lane] = w;
    }
    __syncthreads();
    const float before = carry + (warp > 0 ? wsum[warp - 1] : 0.0f) + (s - v[PER - 1]);
    if (vec && i0 + PER <= N) {
      *reinterpret_cast<float4*>(out + i0) = make_float4(v[0] + before, v[1] + before, v[2] + before, v[3] + before);
      *reinterpret_cast<float4*>(out + i0 + 4) =
          make_float4(v[4] + before, v[5] + before, v[6] + before, v[7] + before);
    } else {
#pragma unroll
      for (int k = 0; k < PER; ++k)
        if (i0 + k < N) out[i0 + k] = v[k] + before;
    }
    carry += wsum[T / 32 - 1];
    __syncthreads();
  }
}
