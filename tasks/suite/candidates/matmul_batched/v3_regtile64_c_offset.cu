// 64x64 block tiles, 16x16 threads with a 4x4 register tile each, BK = 16;
// grid z = batch. Edge tiles are zero-filled, stores are bounds-checked.
#define BM 64
#define BN 64
#define BK 16

extern "C" __global__ void bmm_regtile64(const float* A, const float* B, float* C, int M, int N, int K) {
  __shared__ float As[BM][BK + 1];
  __shared__ float Bs[BK][BN];
  const size_t batch = blockIdx.z;
  const float* a = A + batch * M * K;
  const float* bm = B + batch * K * N;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int tid = ty * 16 + tx;
  const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < K; k0 += BK) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int e = tid + 256 * i;
      const int ar = e / BK, ac = e % BK;
      const int gr = row0 + ar, gk = k0 + ac;
      As[ar][ac] = (gr < M && gk < K) ? a[gr * K + gk] : 0.0f;
      const int br = e / BN, bc = e % BN;
      const int gk2 = k0 + br, gc = col0 + bc;
      Bs[br][bc] = (gk2 < K && gc < N) ? bm[gk2 * N + gc] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      float av[4], bv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) av[i] = As[ty + 16 * i][k];
#pragma unroll
      for (int j = 0; j < 4; ++j) bv[j] = Bs[k][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += av[i] * bv[j];
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = row0 + ty + 16 * i;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int cc = col0 + tx + 16 * j;
      if (r < M && cc < N) C[r * N + cc] = acc[i][j];
    }
  }
}
