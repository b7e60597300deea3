// First draft: one thread per output row, a plain float32 dot product.
extern "C" __global__ void matvec_thread_row(const float* A, const float* x, float* y, int M, int K) {
  const int row = blockIdx.x * blockDim.x + threadIdx.x;
  if (row < M) {
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += A[row * K + k] * x[k];
    y[row] = acc;
  }
}
