// 128x128 block tile, BK = 8, 256 threads, 8x8 outputs per thread.
// The A tile is stored transposed (As[k][m]) so each thread reads its 8 A
// values as two float4 from shared memory, and its 8 B values likewise.
// Global loads are float4 when N % 4 == 0 (rows then stay 16-byte aligned),
// scalar with bounds checks otherwise; edge tiles are zero-filled.
#define BM 128
#define BN 128
#define BK 8

extern "C" __global__ void __launch_bounds__(256) sgemm_128x128(const float* __restrict__ A,
                                                               const float* __restrict__ B,
                                                               float* __restrict__ C, int n) {
  __shared__ __align__(16) float As[BK][BM];
  __shared__ __align__(16) float Bs[BK][BN];
  const int tid = threadIdx.x;
  const int tx = tid % 16, ty = tid / 16;
  const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
  const bool vec = (n % 4) == 0;
  // A tile 128 x 8: thread loads row a_r, columns a_c .. a_c + 3
  const int a_r = tid / 2, a_c = (tid % 2) * 4;
  // B tile 8 x 128: thread loads row b_r, columns b_c .. b_c + 3
  const int b_r = tid / 32, b_c = (tid % 32) * 4;

  float acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;

  for (int k0 = 0; k0 < n; k0 += BK) {
    {
      const int gr = row0 + a_r, gk = k0 + a_c;
      float v[4];
      if (vec && gr < n && gk + 3 < n) {
        const float4 t = *reinterpret_cast<const float4*>(A + (long long)gr * n + gk);
        v[0] = t.x; v[1] = t.y; v[2] = t.z; v[3] = t.w;
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i) v[i] = (gr < n && gk + i < n) ? A[(long long)gr * n + gk + i] : 0.0f;
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) As[a_c + i][a_r] = v[i];
    }
    {
      const int gk = k0 + b_r, gc = col0 + b_c;
      if (vec && gk < n && gc + 3 < n) {
        *reinterpret_cast<float4*>(&Bs[b_r][b_c]) = *reinterpret_cast<const float4*>(B + (long long)gk * n + gc);
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i) Bs[b_r][b_c + i] = (gk < n && gc + i < n) ? B[(long long)gk * n + gc + i] : 0.0f;
      }
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      const float4 a0 = *reinterpret_cast<const float4*>(&As[k][ty * 4]);
      const float4 a1 = *reinterpret_cast<const float4*>(&As[k][64 + ty * 4]);
      const float4 b0 = *reinterpret_cast<const float4*>(&Bs[k][tx * 4]);
      const float4 b1 = *reinterpret_cast<const float4*>(&Bs[k][64 + tx * 4]);
      const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
      const float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] += a[i] * b[j];
    }
    __syncthreads();
  }

#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int r = row0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + (i - 4));
    if (r >= n) continue;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int c = col0 + h * 64 + tx * 4;
      float* out = C + (long long)r * n + c;
      if (vec && c + 3 < n) {
        *reinterpret_cast<float4*>(out) =
            make_float4(acc[i][h * 4], acc[i][h * 4 + 1], acc[i][h * 4 + 2], acc[i][h * 4 + 3]);
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j)
          if (c + j < n) out[j] = acc[i][h * 4 + j];
      }
    }
  }
}
