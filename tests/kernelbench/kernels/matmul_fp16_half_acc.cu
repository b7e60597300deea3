// Bug: precision downgrade. The same 64 x 64 tiling, but the tiles stay in
// half and every multiply-add rounds the running sum to half (__hfma), where
// the task asks for float32 accumulation: each partial sum loses everything
// below 2^-11 of its magnitude.
#include <cuda_fp16.h>

#define BM 64
#define BN 64
#define BK 16

extern "C" __global__ void __launch_bounds__(256)
matmul_fp16_half_acc(const __half* A, const __half* B, __half* out, int M, int N, int K) {
  __shared__ __half As[BK][BM + 4];
  __shared__ __half Bs[BK][BN + 4];
  const int tid = threadIdx.x;
  const int tx = tid % 16, ty = tid / 16;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int a_row = tid / 4, a_k = (tid % 4) * 4;
  const int b_k = tid / 16, b_col = (tid % 16) * 4;
  const __half zero = __float2half(0.f);
  __half acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = zero;
  for (int k0 = 0; k0 < K; k0 += BK) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int r = m0 + a_row, k = k0 + a_k + q;
      As[a_k + q][a_row] = (r < M && k < K) ? A[(long long)r * K + k] : zero;
      const int kb = k0 + b_k, c = n0 + b_col + q;
      Bs[b_k][b_col + q] = (kb < K && c < N) ? B[(long long)kb * N + c] : zero;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < BK; ++k)
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = __hfma(As[k][ty + 16 * i], Bs[k][tx + 16 * j], acc[i][j]);
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = m0 + ty + 16 * i;
    if (r >= M) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int c = n0 + tx + 16 * j;
      if (c < N) out[(long long)r * N + c] = acc[i][j];
    }
  }
}
