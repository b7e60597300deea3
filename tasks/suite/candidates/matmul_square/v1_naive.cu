// First draft: one thread per output element, 16x16 threads per block.
// threadIdx.x walks the columns, so the loads of B are coalesced and the
// load of A is a broadcast within a warp.
extern "C" __global__ void matmul_naive(const float* A, const float* B, float* C, int n) {
  const int row = blockIdx.y * blockDim.y + threadIdx.y;
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (row < n && col < n) {
    float acc = 0.0f;
    for (int k = 0; k < n; ++k) acc += A[row * n + k] * B[k * n + col];
    C[row * n + col] = acc;
  }
}
