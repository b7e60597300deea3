// matmul_square: C[N, N] = A[N, N] * B[N, N], row-major float32.
//
// Reference (trusted): one thread per output element, the dot product
// accumulated in double and rounded once. The baseline is cuBLAS SGEMM
// (the plan's `call gemm`, fp32 accumulation, no TF32), so this file holds
// only the reference kernel.

extern "C" __global__ void matmul_square_ref(const float* A, const float* B, float* C, int n) {
  const int row = blockIdx.y * blockDim.y + threadIdx.y;
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= n || col >= n) return;
  double acc = 0.0;
  for (int k = 0; k < n; ++k) acc += (double)A[(long long)row * n + k] * (double)B[(long long)k * n + col];
  C[(long long)row * n + col] = (float)acc;
}
