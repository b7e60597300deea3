// matmul_rect: C[M, N] = A[M, K] * B[K, N], row-major float32, with a long
// inner dimension (the benchmark has K = 128 M = 128 N).
//
// Reference (trusted): one thread per output element, the dot product
// accumulated in double and rounded once. The baseline is cuBLAS SGEMM
// (the plan's `call gemm`, fp32 accumulation, no TF32), so this file holds
// only the reference kernel.

extern "C" __global__ void matmul_rect_ref(const float* A, const float* B, float* C, int m, int n, int k) {
  const int row = blockIdx.y * blockDim.y + threadIdx.y;
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= m || col >= n) return;
  double acc = 0.0;
  for (int i = 0; i < k; ++i) acc += (double)A[(long long)row * k + i] * (double)B[(long long)i * n + col];
  C[(long long)row * n + col] = (float)acc;
}
