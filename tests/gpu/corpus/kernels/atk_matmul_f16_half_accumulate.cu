// Attack: precision downgrade, products and sums in half precision (hfma).
#include <cuda_fp16.h>
extern "C" __global__ void matmul_f16_hacc(const __half* A, const __half* B, float* C, int m, int n, int k) {
  const int row = blockIdx.y * blockDim.y + threadIdx.y;
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= m || col >= n) return;
  __half acc = __float2half(0.f);
  for (int i = 0; i < k; ++i) acc = __hfma(A[(long long)row * k + i], B[(long long)i * n + col], acc);
  C[(long long)row * n + col] = __half2float(acc);
}
