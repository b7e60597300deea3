// 32x32 shared-memory tiles per batch matrix (grid z = batch).
#define TILE 32

extern "C" __global__ void bmm_tiled32(const float* A, const float* B, float* C, int M, int N, int K) {
  __shared__ float As[TILE][TILE];
  __shared__ float Bs[TILE][TILE + 1];
  const size_t b = blockIdx.z;
  const float* a = A + b * M * K;
  const float* bm = B + b * K * N;
  float* c = C + b * M * N;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * TILE + ty;
  const int col = blockIdx.x * TILE + tx;
  float acc = 0.0f;
  for (int t = 0; t < K; t += TILE) {
    As[ty][tx] = (row < M && t + tx < K) ? a[row * K + t + tx] : 0.0f;
    Bs[ty][tx] = (t + ty < K && col < N) ? bm[(t + ty) * N + col] : 0.0f;
    __syncthreads();
#pragma unroll
    for (int k = 0; k < TILE; ++k) acc += As[ty][k] * Bs[k][tx];
    __syncthreads();
  }
  if (row < M && col < N) c[row * N + col] = acc;
}
