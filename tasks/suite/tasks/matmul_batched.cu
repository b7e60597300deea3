// matmul_batched: C[b] = A[b] * B[b] for b in [0, BATCH), with A[BATCH, M, K],
// B[BATCH, K, N], C[BATCH, M, N], all row-major float32 and contiguous.
//
// Reference (trusted): one thread per output element (grid z = batch), the
// dot product accumulated in double and rounded once. The baseline is cuBLAS
// strided-batched SGEMM (the plan's `call gemm_batched`, fp32 accumulation,
// no TF32), so this file holds only the reference kernel.

extern "C" __global__ void matmul_batched_ref(const float* A, const float* B, float* C, int m, int n, int k) {
  const int row = blockIdx.y * blockDim.y + threadIdx.y;
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  const long long b = blockIdx.z;
  if (row >= m || col >= n) return;
  const float* a = A + b * m * k;
  const float* bb = B + b * k * n;
  double acc = 0.0;
  for (int i = 0; i < k; ++i) acc += (double)a[(long long)row * k + i] * (double)bb[(long long)i * n + col];
  C[b * m * n + (long long)row * n + col] = (float)acc;
}
