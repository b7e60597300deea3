// First draft: one thread per output element; grid z walks the batch.
extern "C" __global__ void bmm_naive(const float* A, const float* B, float* C, int M, int N, int K) {
  const int row = blockIdx.y * blockDim.y + threadIdx.y;
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  const int b = blockIdx.z;
  if (row < M && col < N) {
    const float* a = A + (size_t)b * M * K;
    const float* bm = B + (size_t)b * K * N;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += a[row * K + k] * bm[k * N + col];
    C[(size_t)b * M * N + row * N + col] = acc;
  }
}
