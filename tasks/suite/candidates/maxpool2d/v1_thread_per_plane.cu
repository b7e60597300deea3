// First draft: one thread per (n, c) plane walks all of its output pixels.
#define NEG_INF __int_as_float(0xff800000)

extern "C" __global__ void maxpool_plane(const float* x, float* y, int planes, int H, int W, int OH, int OW) {
  const int plane = blockIdx.x * blockDim.x + threadIdx.x;
  if (plane >= planes) return;
  const float* p = x + (size_t)plane * H * W;
  float* q = y + (size_t)plane * OH * OW;
  for (int oy = 0; oy < OH; ++oy)
    for (int ox = 0; ox < OW; ++ox) {
      float m = NEG_INF;
      for (int dy = 0; dy < 3; ++dy)
        for (int dx = 0; dx < 3; ++dx) {
          const int iy = 2 * oy - 1 + dy, ix = 2 * ox - 1 + dx;
          if (iy >= 0 && iy < H && ix >= 0 && ix < W) m = fmaxf(m, p[iy * W + ix]);
        }
      q[oy * OW + ox] = m;
    }
}
