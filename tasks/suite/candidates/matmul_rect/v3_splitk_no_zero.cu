// Split-K: with M = N = 512 there are only 64 output tiles of 64x64, far
// too few for 132 SMs, so K is cut into chunks of 512 (grid z) and every
// block adds its partial 64x64 tile into C with atomicAdd. 4x4 register
// tile per thread, 16x16 threads.
#define BM 64
#define BN 64
#define BK 16
#define KCHUNK 512

extern "C" __global__ void matmul_splitk64(const float* A, const float* B, float* C, int M, int N, int K) {
  __shared__ float As[BM][BK + 1];
  __shared__ float Bs[BK][BN];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int tid = ty * 16 + tx;
  const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
  const int kbeg = blockIdx.z * KCHUNK;
  const int kend = min(K, kbeg + KCHUNK);
  float acc[4][4] = {};
  for (int k0 = kbeg; k0 < kend; k0 += BK) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int e = tid + 256 * i;
      const int ar = e / BK, ac = e % BK;
      const int gr = row0 + ar, gk = k0 + ac;
      As[ar][ac] = (gr < M && gk < kend) ? A[gr * K + gk] : 0.0f;
      const int br = e / BN, bc = e % BN;
      const int gk2 = k0 + br, gc = col0 + bc;
      Bs[br][bc] = (gk2 < kend && gc < N) ? B[gk2 * N + gc] : 0.0f;
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
      if (r < M && c < N) atomicAdd(&C[r * N + c], acc[i][j]);
    }
  }
}
