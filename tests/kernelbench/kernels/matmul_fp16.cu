// out[M, N] = A[M, K] * B[K, N]: row-major half inputs and output, products
// and sums in float32, rounded to half once at the end.
// 64 x 64 output tiles per block of 256 threads, each thread a 4 x 4 block of
// outputs (rows ty + 16 i, columns tx + 16 j); 16-deep slices of A and B are
// staged through shared memory as floats, zero-filled past the edges.
#include <cuda_fp16.h>

#define BM 64
#define BN 64
#define BK 16

extern "C" __global__ void __launch_bounds__(256)
matmul_fp16_tiled(const __half* A, const __half* B, __half* out, int M, int N, int K) {
  __shared__ float As[BK][BM + 4];
  __shared__ float Bs[BK][BN + 4];
  const int tid = threadIdx.x;
  const int tx = tid % 16, ty = tid / 16;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  // Loaders: A as 64 rows x 4 groups of 4 k; B as 16 k x 16 groups of 4 columns.
  const int a_row = tid / 4, a_k = (tid % 4) * 4;
  const int b_k = tid / 16, b_col = (tid % 16) * 4;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < K; k0 += BK) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int r = m0 + a_row, k = k0 + a_k + q;
      As[a_k + q][a_row] = (r < M && k < K) ? __half2float(A[(long long)r * K + k]) : 0.f;
      const int kb = k0 + b_k, c = n0 + b_col + q;
      Bs[b_k][b_col + q] = (kb < K && c < N) ? __half2float(B[(long long)kb * N + c]) : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = As[k][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = Bs[k][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = m0 + ty + 16 * i;
    if (r >= M) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int c = n0 + tx + 16 * j;
      if (c < N) out[(long long)r * N + c] = __float2half_rn(acc[i][j]);
    }
  }
}
