// First draft: one thread per output, dot product of a row of x with a row of
// w, then bias and ReLU in the same thread.
extern "C" __global__ void linear_relu_naive(const float* x, const float* w, const float* b, float* y, int M, int N,
                                             int K) {
  const int row = blockIdx.y * blockDim.y + threadIdx.y;
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (row < M && col < N) {
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += x[row * K + k] * w[col * K + k];
    y[row * N + col] = fmaxf(acc + b[col], 0.0f);
  }
}
