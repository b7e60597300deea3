// conv_scale_relu: y = relu(0.5 * conv3x3(x, w) + b[k]), stride 1, padding 1
// (zeros outside the image), NCHW float32:
//   y[n, k, oy, ox] = max(0, 0.5 * sum over c, dy, dx of x[n, c, oy + dy - 1, ox + dx - 1] * w[k, c, dy, dx] + b[k])
// with x[N, C, H, W], w[K, C, 3, 3], b[K], y[N, K, H, W].

// Reference (trusted): one thread per output element, accumulated in double.
extern "C" __global__ void conv_scale_relu_ref(const float* x, const float* w, const float* b, float* y, int n, int c,
                                               int k, int h, int wd) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (long long)n * k * h * wd) return;
  const int ox = (int)(i % wd);
  const int oy = (int)(i / wd % h);
  const int ko = (int)(i / ((long long)wd * h) % k);
  const long long bn = i / ((long long)wd * h * k);
  double acc = 0.0;
  for (int ci = 0; ci < c; ++ci)
    for (int dy = 0; dy < 3; ++dy)
      for (int dx = 0; dx < 3; ++dx) {
        const int iy = oy + dy - 1, ix = ox + dx - 1;
        if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
        acc += (double)x[((bn * c + ci) * h + iy) * wd + ix] * (double)w[((ko * c + ci) * 3 + dy) * 3 + dx];
      }
  const double v = 0.5 * acc + (double)b[ko];
  y[i] = (float)(v > 0.0 ? v : 0.0);
}

// Baseline, unfused as a framework without cuDNN would run it: a well-written
// direct convolution (16 x 16 output pixels x 16 output channels per block,
// the padded 18 x 18 input patch and 16 x 9 weights of each input channel
// staged in shared memory, 16 accumulators per thread) writes the raw
// convolution into y, then a second kernel applies 0.5 * y + b[k] and the
// ReLU in place. (cuDNN is not used: the suite's plans can only call the
// GEMM family.)
#define BT 16
#define KT 16
extern "C" __global__ void __launch_bounds__(256) conv_pad1_direct(const float* __restrict__ x,
                                                                 const float* __restrict__ w, float* __restrict__ y,
                                                                 int N, int C, int K, int H, int W) {
  __shared__ float xs[BT + 2][BT + 2];
  __shared__ float ws[KT][9];
  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * BT + tx;
  const int ktiles = (K + KT - 1) / KT;
  const int n = blockIdx.z / ktiles, k0 = (blockIdx.z % ktiles) * KT;
  const int ox0 = blockIdx.x * BT, oy0 = blockIdx.y * BT;
  float acc[KT];
#pragma unroll
  for (int j = 0; j < KT; ++j) acc[j] = 0.0f;
  for (int c = 0; c < C; ++c) {
    const float* xc = x + ((size_t)n * C + c) * H * W;
    for (int i = tid; i < (BT + 2) * (BT + 2); i += BT * BT) {
      const int ly = i / (BT + 2), lx = i % (BT + 2);
      const int gy = oy0 - 1 + ly, gx = ox0 - 1 + lx;
      xs[ly][lx] = (gy >= 0 && gy < H && gx >= 0 && gx < W) ? xc[(size_t)gy * W + gx] : 0.0f;
    }
    if (tid < KT * 9) {
      const int j = tid / 9, r = tid % 9;
      ws[j][r] = (k0 + j < K) ? w[((size_t)(k0 + j) * C + c) * 9 + r] : 0.0f;
    }
    __syncthreads();
    float in[9];
#pragma unroll
    for (int dy = 0; dy < 3; ++dy)
#pragma unroll
      for (int dx = 0; dx < 3; ++dx) in[dy * 3 + dx] = xs[ty + dy][tx + dx];
#pragma unroll
    for (int j = 0; j < KT; ++j)
#pragma unroll
      for (int r = 0; r < 9; ++r) acc[j] += in[r] * ws[j][r];
    __syncthreads();
  }
  const int oy = oy0 + ty, ox = ox0 + tx;
  if (oy < H && ox < W)
#pragma unroll
    for (int j = 0; j < KT; ++j)
      if (k0 + j < K) y[(((size_t)n * K + k0 + j) * H + oy) * W + ox] = acc[j];
}

extern "C" __global__ void __launch_bounds__(256) scale_bias_relu_inplace(float* __restrict__ y,
                                                                         const float* __restrict__ b, int K, int HW,
                                                                         long long total) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int k = (int)(i / HW % K);
    y[i] = fmaxf(0.5f * y[i] + __ldg(&b[k]), 0.0f);
  }
}
