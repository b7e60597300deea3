// Tiles of 16 along K, but only whole tiles: the last K % 16 products are
// dropped (K = 1 and K = 129 lose terms; K = 1024 does not).
extern "C" __global__ void sgemm_no_tail(const float* A, const float* B, float* C, int M, int N, int K) {
  __shared__ float As[16][16], Bs[16][16];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int col = blockIdx.x * 16 + tx, row = blockIdx.y * 16 + ty;
  float acc = 0.f;
  for (int k0 = 0; k0 + 16 <= K; k0 += 16) {
    As[ty][tx] = row < M ? A[(long long)row * K + k0 + tx] : 0.f;
    Bs[ty][tx] = col < N ? B[(long long)(k0 + ty) * N + col] : 0.f;
    __syncthreads();
    for (int k = 0; k < 16; ++k) acc += As[ty][k] * Bs[k][tx];
    __syncthreads();
  }
  if (row < M && col < N) C[(long long)row * N + col] = acc;
}
