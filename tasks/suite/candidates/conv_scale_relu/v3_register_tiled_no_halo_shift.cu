// Register-tiled padded convolution with the epilogue fused (0.5 * acc + b,
// ReLU in registers before the store, so y is written once and never re-read).
// An implicit GEMM in spirit: a block computes
// an 8 x 32 patch of output pixels for 32 output channels; each of the 256
// threads owns 4 neighbouring pixels x 8 output channels = 32 accumulators.
// Input channels are staged 4 at a time: the (8 + 2) x (32 + 2) input patch
// of each, and the weights laid out [channel][tap][k] so a thread reads its 8
// weights of a tap as two float4. Per tap a thread does 32 FMAs for 6 + 2
// shared-memory loads, instead of about one load per FMA.
#define TH 8
#define TW 32
#define KT 32
#define CT 4
#define XW (TW + 2)

extern "C" __global__ void __launch_bounds__(256) conv_scale_relu_rt(const float* __restrict__ x,
                                                                   const float* __restrict__ w,
                                                                   const float* __restrict__ b,
                                                                   float* __restrict__ y, int N, int C, int K, int H,
                                                                   int W) {
  __shared__ float xs[CT][TH + 2][XW];
  __shared__ __align__(16) float ws[CT][9][KT];
  const int t = threadIdx.x;
  const int kg = t / 64;        // output channels kg * 8 .. kg * 8 + 7 of the tile
  const int py = (t % 64) / 8;  // output row within the tile
  const int qx = t % 8;         // pixels 4 * qx .. 4 * qx + 3 of that row
  const int ktiles = (K + KT - 1) / KT;
  const int n = blockIdx.z / ktiles, k0 = (blockIdx.z % ktiles) * KT;
  const int ox0 = blockIdx.x * TW, oy0 = blockIdx.y * TH;

  float acc[4][8];
#pragma unroll
  for (int p = 0; p < 4; ++p)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[p][j] = 0.0f;

  for (int c0 = 0; c0 < C; c0 += CT) {
    for (int i = t; i < CT * (TH + 2) * XW; i += 256) {
      const int cc = i / ((TH + 2) * XW), rem = i % ((TH + 2) * XW);
      const int ly = rem / XW, lx = rem % XW;
      const int c = c0 + cc, gy = oy0 + ly, gx = ox0 + lx;
      xs[cc][ly][lx] = (c < C && gy >= 0 && gy < H && gx >= 0 && gx < W)
                           ? x[(((size_t)n * C + c) * H + gy) * W + gx]
                           : 0.0f;
    }
    for (int i = t; i < CT * 9 * KT; i += 256) {
      const int cc = i / (9 * KT), r = (i / KT) % 9, j = i % KT;
      const int c = c0 + cc, k = k0 + j;
      ws[cc][r][j] = (c < C && k < K) ? w[((size_t)k * C + c) * 9 + r] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int cc = 0; cc < CT; ++cc) {
#pragma unroll
      for (int dy = 0; dy < 3; ++dy) {
        float row[6];
#pragma unroll
        for (int i = 0; i < 6; ++i) row[i] = xs[cc][py + dy][4 * qx + i];
#pragma unroll
        for (int dx = 0; dx < 3; ++dx) {
          const float4 w0 = *reinterpret_cast<const float4*>(&ws[cc][dy * 3 + dx][kg * 8]);
          const float4 w1 = *reinterpret_cast<const float4*>(&ws[cc][dy * 3 + dx][kg * 8 + 4]);
          const float wv[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
#pragma unroll
          for (int p = 0; p < 4; ++p)
#pragma unroll
            for (int j = 0; j < 8; ++j) acc[p][j] += row[p + dx] * wv[j];
        }
      }
    }
    __syncthreads();
  }

  const int oy = oy0 + py;
  if (oy >= H) return;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int k = k0 + kg * 8 + j;
    if (k >= K) continue;
    const float bias = __ldg(&b[k]);
    float* out = y + (((size_t)n * K + k) * H + oy) * W;
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      const int ox = ox0 + 4 * qx + p;
      if (ox < W) out[ox] = fmaxf(0.5f * acc[p][j] + bias, 0.0f);
    }
  }
}
