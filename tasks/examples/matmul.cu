// C[M, N] = A[M, K] * B[K, N], all row-major float32.

// Reference: one thread per output element, the plainest correct kernel.
extern "C" __global__ void matmul_naive(const float* A, const float* B, float* C, int m, int n, int k) {
  const int row = blockIdx.y * blockDim.y + threadIdx.y;
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= m || col >= n) return;
  float acc = 0.f;
  for (int i = 0; i < k; ++i) acc += A[(long long)row * k + i] * B[(long long)i * n + col];
  C[(long long)row * n + col] = acc;
}

// Baseline: 16x16 tiles of A and B staged through shared memory.
#define TILE 16
extern "C" __global__ void matmul_tiled(const float* A, const float* B, float* C, int m, int n, int k) {
  __shared__ float As[TILE][TILE];
  __shared__ float Bs[TILE][TILE];
  const int row = blockIdx.y * TILE + threadIdx.y;
  const int col = blockIdx.x * TILE + threadIdx.x;
  float acc = 0.f;
  for (int t = 0; t < k; t += TILE) {
    const int ac = t + threadIdx.x, br = t + threadIdx.y;
    As[threadIdx.y][threadIdx.x] = (row < m && ac < k) ? A[(long long)row * k + ac] : 0.f;
    Bs[threadIdx.y][threadIdx.x] = (br < k && col < n) ? B[(long long)br * n + col] : 0.f;
    __syncthreads();
#pragma unroll
    for (int i = 0; i < TILE; ++i) acc += As[threadIdx.y][i] * Bs[i][threadIdx.x];
    __syncthreads();
  }
  if (row < m && col < n) C[(long long)row * n + col] = acc;
}
