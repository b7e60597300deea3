// C[M, N] = A[M, K] * B[K, N]; A and B row-major half, C row-major float32,
// products and sums in float32, k in increasing order.
#include <cuda_fp16.h>

// Reference: one thread per output element.
extern "C" __global__ void matmul_f16_naive(const __half* A, const __half* B, float* C, int m, int n, int k) {
  const int row = blockIdx.y * blockDim.y + threadIdx.y;
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= m || col >= n) return;
  float acc = 0.f;
  for (int i = 0; i < k; ++i)
    acc += __half2float(A[(long long)row * k + i]) * __half2float(B[(long long)i * n + col]);
  C[(long long)row * n + col] = acc;
}

// Baseline: 16x16 tiles of A and B staged through shared memory as floats.
#define TILE 16
extern "C" __global__ void matmul_f16_tiled(const __half* A, const __half* B, float* C, int m, int n, int k) {
  __shared__ float As[TILE][TILE];
  __shared__ float Bs[TILE][TILE];
  const int row = blockIdx.y * TILE + threadIdx.y;
  const int col = blockIdx.x * TILE + threadIdx.x;
  float acc = 0.f;
  for (int t = 0; t < k; t += TILE) {
    const int ac = t + threadIdx.x, br = t + threadIdx.y;
    As[threadIdx.y][threadIdx.x] = (row < m && ac < k) ? __half2float(A[(long long)row * k + ac]) : 0.f;
    Bs[threadIdx.y][threadIdx.x] = (br < k && col < n) ? __half2float(B[(long long)br * n + col]) : 0.f;
    __syncthreads();
#pragma unroll
    for (int i = 0; i < TILE; ++i) acc += As[threadIdx.y][i] * Bs[i][threadIdx.x];
    __syncthreads();
  }
  if (row < m && col < n) C[(long long)row * n + col] = acc;
}
