// 64x64 output tiles, 16x16 threads with 4x4 register tiles, BK = 16, bias
// and ReLU in the epilogue. Both operands are read along k (w is [N, K]):
// consecutive threads load consecutive k of one row, and the w tile is
// stored transposed (ws[k][n], padded) for the inner product.
#define BM 64
#define BN 64
#define BK 16

extern "C" __global__ void linear_relu_rt64(const float* x, const float* w, const float* b, float* y, int M, int N,
                                            int K) {
  __shared__ float xs[BM][BK + 1];
  __shared__ float ws[BK][BN + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int tid = ty * 16 + tx;
  const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < K; k0 += BK) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int e = tid + 256 * i;
      const int r = e / BK, kk = e % BK;
      const int gk = k0 + kk;
      xs[r][kk] = (row0 + r < M && gk < K) ? x[(row0 + r) * K + gk] : 0.0f;
      ws[kk][r] = (col0 + r < N && gk < K) ? w[(col0 + r) * K + gk] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      float a[4], c[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = xs[ty + 16 * i][k];
#pragma unroll
      for (int j = 0; j < 4; ++j) c[j] = ws[k][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * c[j];
    }
    __syncthreads();
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int col = col0 + tx + 16 * j;
    if (col >= N) continue;
    const float bias = b[col];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = row0 + ty + 16 * i;
      if (row < M) y[row * N + col] = fmaxf(acc[i][j], 0.0f) + bias;
    }
  }
}
