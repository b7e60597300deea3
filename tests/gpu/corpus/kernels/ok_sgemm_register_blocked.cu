// 64x64 block tiles, 16x16 threads, each computing a 4x4 register block; the
// K loop steps by 8 through shared memory. Float accumulation, k in order per
// output but with fused multiply-adds: not bit-identical to any other order.
#define BM 64
#define BN 64
#define BK 8
extern "C" __global__ void sgemm_rb(const float* A, const float* B, float* C, int M, int N, int K) {
  __shared__ float As[BK][BM];
  __shared__ float Bs[BK][BN];
  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * 16 + tx;
  const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < K; k0 += BK) {
    // 256 threads load 64x8 of A and 8x64 of B, two elements each.
    for (int e = tid; e < BM * BK; e += 256) {
      const int r = e / BK, k = e % BK;
      const int gr = row0 + r, gk = k0 + k;
      As[k][r] = (gr < M && gk < K) ? A[(long long)gr * K + gk] : 0.f;
    }
    for (int e = tid; e < BK * BN; e += 256) {
      const int k = e / BN, c = e % BN;
      const int gk = k0 + k, gc = col0 + c;
      Bs[k][c] = (gk < K && gc < N) ? B[(long long)gk * N + gc] : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = As[k][ty * 4 + i];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = Bs[k][tx * 4 + j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int r = row0 + ty * 4 + i, c = col0 + tx * 4 + j;
      if (r < M && c < N) C[(long long)r * N + c] = acc[i][j];
    }
}
