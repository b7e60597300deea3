// Neighbouring windows overlap by a row and a column, so stage the input
// once: a 16 x 16 block of outputs needs a 33 x 33 input tile (padding
// cells filled with -inf), loaded cooperatively into shared memory; each
// thread then takes the max of its 3x3 window from the tile.
#define TO 16
#define TI (2 * TO + 1)
#define NEG_INF __int_as_float(0xff800000)

extern "C" __global__ void maxpool_smem(const float* x, float* y, int H, int W, int OH, int OW) {
  __shared__ float tile[TI][TI + 1];
  const size_t plane = blockIdx.z;
  const float* p = x + plane * H * W;
  const int oy0 = blockIdx.y * TO, ox0 = blockIdx.x * TO;
  const int iy0 = 2 * oy0 - 1, ix0 = 2 * ox0 - 1;
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (int i = ty * TO + tx; i < TI * TI; i += TO * TO) {
    const int ly = i / TI, lx = i % TI;
    const int gy = iy0 + ly, gx = ix0 + lx;
    tile[ly][lx] = (gy >= 0 && gy < H && gx >= 0 && gx < W) ? p[gy * W + gx] : NEG_INF;
  }
  __syncthreads();
  const int oy = oy0 + ty, ox = ox0 + tx;
  if (oy < OH && ox < OW) {
    float m = NEG_INF;
#pragma unroll
    for (int dy = 0; dy < 3; ++dy)
#pragma unroll
      for (int dx = 0; dx < 3; ++dx) m = fmaxf(m, tile[2 * ty + dy][2 * tx + dx]);
    y[(plane * OH + oy) * OW + ox] = m;
  }
}
