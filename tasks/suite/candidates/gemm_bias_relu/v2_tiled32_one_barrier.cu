// 32x32 shared-memory tiles of x and of w (both read along k, so both loads
// are coalesced), bias + ReLU fused into the store. The barrier at the end of
// each step keeps the next loads from overwriting tiles still in use.
#define TILE 32

extern "C" __global__ void linear_relu_tiled(const float* x, const float* w, const float* b, float* y, int M, int N,
                                             int K) {
  __shared__ float xs[TILE][TILE + 1];
  __shared__ float ws[TILE][TILE + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * TILE + ty;
  const int col0 = blockIdx.x * TILE;
  float acc = 0.0f;
  for (int t = 0; t < K; t += TILE) {
    xs[ty][tx] = (row < M && t + tx < K) ? x[row * K + t + tx] : 0.0f;
    // row ty of this w tile is output column col0 + ty
    ws[ty][tx] = (col0 + ty < N && t + tx < K) ? w[(col0 + ty) * K + t + tx] : 0.0f;
#pragma unroll
    for (int k = 0; k < TILE; ++k) acc += xs[ty][k] * ws[tx][k];
    __syncthreads();
  }
  const int col = col0 + tx;
  if (row < M && col < N) y[row * N + col] = fmaxf(acc + b[col], 0.0f);
}
