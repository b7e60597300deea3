// Each thread produces two horizontally neighbouring outputs: their windows
// share a column, so 15 loads serve 2 outputs instead of 18, and the loads
// of a warp still cover consecutive columns. Cells outside the image read as
// 0, like a zero-padded convolution input.
#define NEG_INF __int_as_float(0xff800000)

extern "C" __global__ void __launch_bounds__(256) maxpool_pair(const float* __restrict__ x, float* __restrict__ y,
                                                              int H, int W, int OH, int OW, long long pairs) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= pairs) return;
  const int OP = (OW + 1) / 2;
  const int ox = 2 * (int)(i % OP);
  const long long t = i / OP;
  const int oy = (int)(t % OH);
  const long long plane = t / OH;
  const float* p = x + plane * H * W;
  float m0 = NEG_INF, m1 = NEG_INF;
#pragma unroll
  for (int dy = 0; dy < 3; ++dy) {
    const int iy = 2 * oy - 1 + dy;
    const float* row = p + (long long)iy * W;
#pragma unroll
    for (int dx = 0; dx < 5; ++dx) {
      const int ix = 2 * ox - 1 + dx;
      const float v = (iy >= 0 && iy < H && ix >= 0 && ix < W) ? __ldg(&row[ix]) : 0.0f;
      if (dx < 3) m0 = fmaxf(m0, v);
      if (dx >= 2) m1 = fmaxf(m1, v);
    }
  }
  float* q = y + (plane * OH + oy) * OW;
  q[ox] = m0;
  if (ox + 1 < OW) q[ox + 1] = m1;
}
