// Register tiling: a 64x64 block tile, 16x16 threads, each thread computes a
// 4x4 set of outputs (rows ty + 16 i, columns tx + 16 j, so neighbouring
// threads read neighbouring shared-memory words). K advances 16 at a time;
// every thread loads 4 elements of A and 4 of B per step.
#define BM 64
#define BN 64
#define BK 16

extern "C" __global__ void matmul_regtile64(const float* A, const float* B, float* C, int n) {
  __shared__ float As[BM][BK + 1];
  __shared__ float Bs[BK][BN];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int tid = ty * 16 + tx;
  const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < n; k0 += BK) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int e = tid + 256 * i;           // 0 .. 1023
      const int ar = e / BK, ac = e % BK;    // A tile: 64 rows x 16 columns
      const int gr = row0 + ar, gk = k0 + ac;
      As[ar][ac] = (gr < n && gk < n) ? A[gr * n + gk] : 0.0f;
      const int br = e / BN, bc = e % BN;    // B tile: 16 rows x 64 columns
      const int gk2 = k0 + br, gc = col0 + bc;
      Bs[br][bc] = (gk2 < n && gc < n) ? B[gk2 * n + gc] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = As[ty + 16 * i][k];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = Bs[k][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = row0 + ty + 16 * i;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int c = col0 + tx + 16 * j;
      if (r < n && c < n) C[r * n + c] = acc[i][j];
    }
  }
}
