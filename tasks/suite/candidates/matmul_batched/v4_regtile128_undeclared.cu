// 128x128 block tiles, 8x8 outputs per thread (256 threads), BK = 8, the A
// tile stored transposed so each thread reads its A and B fragments as
// float4 from shared memory; float4 global loads and stores when the row
// lengths keep them 16-byte aligned. Grid z = batch.
#define BM 128
#define BN 128
#define BK 8

extern "C" __global__ void __launch_bounds__(256) bmm_128x128(const float* __restrict__ A, const float* __restrict__ B,
                                                             float* __restrict__ C, int M, int N, int K) {
  __shared__ __align__(16) float As[BK][BM];
  __shared__ __align__(16) float Bs[BK][BN];
  const size_t batch = blockIdx.z;
  const float* a = A + batch * M * K;
  const float* bm = B + batch * K * N;
  float* c = C + batch * M * N;
  const int tid = threadIdx.x;
  const int tx = tid % 16, ty = tid / 16;
  const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
  const bool vec_a = (K % 4) == 0, vec_b = (N % 4) == 0;
  const int a_r = tid / 2, a_c = (tid % 2) * 4;
  const int b_r = tid / 32, b_c = (tid % 32) * 4;

  float acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;

  for (int k0 = 0; k0 < K; k0 += BK) {
    {
      const int gr = row0 + a_r, gk = k0 + a_c;
      float v[4];
      if (vec_a && gr < M && gk + 3 < K) {
        const float4 t = *reinterpret_cast<const float4*>(a + gr * lda + gk);
        v[0] = t.x; v[1] = t.y; v[2] = t.z; v[3] = t.w;
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i) v[i] = (gr < M && gk + i < K) ? a[gr * K + gk + i] : 0.0f;
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) As[a_c + i][a_r] = v[i];
    }
    {
      const int gk = k0 + b_r, gc = col0 + b_c;
      if (vec_b && gk < K && gc + 3 < N) {
        *reinterpret_cast<float4*>(&Bs[b_r][b_c]) = *reinterpret_cast<const float4*>(bm + gk * N + gc);
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i) Bs[b_r][b_c + i] = (gk < K && gc + i < N) ? bm[gk * N + gc + i] : 0.0f;
      }
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      const float4 a0 = *reinterpret_cast<const float4*>(&As[k][ty * 4]);
      const float4 a1 = *reinterpret_cast<const float4*>(&As[k][64 + ty * 4]);
      const float4 b0 = *reinterpret_cast<const float4*>(&Bs[k][tx * 4]);
      const float4 b1 = *reinterpret_cast<const float4*>(&Bs[k][64 + tx * 4]);
      const float av[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
      const float bv[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] += av[i] * bv[j];
    }
    __syncthreads();
  }

#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int r = row0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + (i - 4));
    if (r >= M) continue;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int cc = col0 + h * 64 + tx * 4;
      float* out = c + r * N + cc;
      if (vec_b && cc + 3 < N) {
        *reinterpret_cast<float4*>(out) =
            make_float4(acc[i][h * 4], acc[i][h * 4 + 1], acc[i][h * 4 + 2], acc[i][h * 4 + 3]);
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j)
          if (cc + j < N) out[j] = acc[i][h * 4 + j];
      }
    }
  }
}
