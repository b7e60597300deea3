// First draft: one thread per output element, loops over the input channels
// and the 3x3 window.
extern "C" __global__ void conv2d_naive(const float* x, const float* w, float* y, int N, int C, int K, int H, int W) {
  const int OH = H - 2, OW = W - 2;
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= N * K * OH * OW) return;
  const int ox = i % OW, oy = (i / OW) % OH, k = (i / (OW * OH)) % K, n = i / (OW * OH * K);
  float acc = 0.0f;
  for (int c = 0; c < C; ++c)
    for (int dy = 0; dy < 3; ++dy)
      for (int dx = 0; dx < 3; ++dx)
        acc += x[((n * C + c) * H + oy + dy) * W + ox + dx] * w[((k * C + c) * 3 + dy) * 3 + dx];
  y[i] = acc;
}
