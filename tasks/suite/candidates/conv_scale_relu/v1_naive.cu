// First draft: one thread per output element: the padded 3x3 window over all
// input channels, then scale, bias and ReLU in the same thread.
extern "C" __global__ void conv_scale_relu_naive(const float* x, const float* w, const float* b, float* y, int N, int C,
                                                 int K, int H, int W) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= N * K * H * W) return;
  const int ox = i % W, oy = (i / W) % H, k = (i / (W * H)) % K, n = i / (W * H * K);
  float acc = 0.0f;
  for (int c = 0; c < C; ++c)
    for (int dy = 0; dy < 3; ++dy)
      for (int dx = 0; dx < 3; ++dx) {
        const int iy = oy + dy - 1, ix = ox + dx - 1;
        if (iy >= 0 && iy < H && ix >= 0 && ix < W)
          acc += x[((n * C + c) * H + iy) * W + ix] * w[((k * C + c) * 3 + dy) * 3 + dx];
      }
  y[i] = fmaxf(0.5f * acc + b[k], 0.0f);
}
