// Correct: 32x32 output tiles per 16x16 block (a 2x2 micro-tile per thread), A and B
// staged through shared memory as floats, B loaded as __half2 pairs where aligned.
// Each output still sums k in increasing order, as the reference does.
#include <cuda_fp16.h>
#define TM 32
#define TK 16

extern "C" __global__ void matmul_f16_2x2(const __half* A, const __half* B, float* C, int m, int n, int k) {
  __shared__ float As[TM][TK + 1];
  __shared__ float Bs[TK][TM];
  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * 16 + tx;
  const int row0 = blockIdx.y * TM, col0 = blockIdx.x * TM;
  float acc[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
  for (int t = 0; t < k; t += TK) {
    for (int e = tid; e < TM * TK; e += 256) {  // A tile: 32 rows x 16 k
      const int r = e / TK, kk = e % TK;
      const int gr = row0 + r, gk = t + kk;
      As[r][kk] = (gr < m && gk < k) ? __half2float(A[(long long)gr * k + gk]) : 0.f;
    }
    for (int e = tid; e < TK * TM / 2; e += 256) {  // B tile: 16 k x 32 cols, two at a time
      const int kk = e / (TM / 2), c = 2 * (e % (TM / 2));
      const int gk = t + kk, gc = col0 + c;
      float2 v = make_float2(0.f, 0.f);
      if (gk < k) {
        const long long off = (long long)gk * n + gc;
        if (gc + 1 < n && (off % 2) == 0) {
          v = __half22float2(*reinterpret_cast<const __half2*>(B + off));
        } else {
          if (gc < n) v.x = __half2float(B[off]);
          if (gc + 1 < n) v.y = __half2float(B[off + 1]);
        }
      }
      Bs[kk][c] = v.x;
      Bs[kk][c + 1] = v.y;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < TK; ++kk)
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) acc[i][j] += As[ty + 16 * i][kk] * Bs[kk][tx + 16 * j];
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int r = row0 + ty + 16 * i, c = col0 + tx + 16 * j;
      if (r < m && c < n) C[(long long)r * n + c] = acc[i][j];
    }
}
