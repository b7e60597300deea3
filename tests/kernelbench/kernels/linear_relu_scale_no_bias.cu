// Bug: the bias is forgotten. The same tiled linear layer, ReLU and scale as
// the correct kernel, but the epilogue computes max(x w^T, 0) * scale: the
// bias parameter is taken and never read.

#define BM 64
#define BN 64
#define BK 16

extern "C" __global__ void __launch_bounds__(256)
linear_relu_scale_nobias(const float* x, const float* w, const float* bias, float* out, int M, int N, int K, float scale) {
  __shared__ float Xs[BK][BM + 4];
  __shared__ float Ws[BK][BN + 4];
  const int tid = threadIdx.x;
  const int tx = tid % 16, ty = tid / 16;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  // Both operands are read along k: 64 rows x 4 groups of 4 consecutive k.
  const int l_row = tid / 4, l_k = (tid % 4) * 4;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < K; k0 += BK) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int k = k0 + l_k + q;
      const int r = m0 + l_row, c = n0 + l_row;
      Xs[l_k + q][l_row] = (r < M && k < K) ? x[(long long)r * K + k] : 0.f;
      Ws[l_k + q][l_row] = (c < N && k < K) ? w[(long long)c * K + k] : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = Xs[k][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = Ws[k][tx + 16 * j];
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
      if (c < N) out[(long long)r * N + c] = fmaxf(acc[i][j], 0.f) * scale;
    }
  }
}
