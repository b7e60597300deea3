// 64 x 64 tiles with 16-byte accesses on both sides: each thread of a 16 x 16
// block reads 4 float4 of x (4 rows of 4 neighbouring columns) into a
// padded tile and writes 4 float4 of y (4 neighbouring output columns
// gathered from the tile's column). Fewer, wider memory transactions than the
// 32 x 32 scalar tile. Vector accesses only when R and C are multiples of 4
// (rows 16-byte aligned) and the tile is complete; otherwise scalar.
#define T 64

extern "C" __global__ void __launch_bounds__(256) transpose_t64(const float* __restrict__ x, float* __restrict__ y,
                                                              int R, int C) {
  __shared__ float tile[T][T + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;  // 16 x 16
  const int c0 = blockIdx.x * T, r0 = blockIdx.y * T;
  const bool full = ((R | C) & 3) == 0 && r0 + T <= R && c0 + T <= C;
  if (full) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int lr = ty + 16 * j;  // local row
      const float4 v = *reinterpret_cast<const float4*>(x + (size_t)(r0 + lr) * C + c0 + 4 * tx);
      tile[lr][4 * tx] = v.x;
      tile[lr][4 * tx + 1] = v.y;
      tile[lr][4 * tx + 2] = v.z;
      tile[lr][4 * tx + 3] = v.w;
    }
  } else {
    for (int i = ty * 16 + tx; i < T * T; i += 256) {
      const int lr = i / T, lc = i % T;
      if (r0 + lr < R && c0 + lc < C) tile[lr][lc] = x[(size_t)(r0 + lr) * C + c0 + lc];
    }
  }
  __syncthreads();
  if (full) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int lc = ty + 16 * j;  // local column of x = local row of y
      const float4 v = make_float4(tile[4 * tx][lc], tile[4 * tx + 1][lc], tile[4 * tx + 2][lc], tile[4 * tx + 3][lc]);
      *reinterpret_cast<float4*>(y + (size_t)(c0 + lc) * R + r0 + 4 * tx) = v;
    }
  } else {
    for (int i = ty * 16 + tx; i < T * T; i += 256) {
      const int lc = i / T, lr = i % T;  // y row c0 + lc, column r0 + lr
      if (c0 + lc < C && r0 + lr < R) y[(size_t)(c0 + lc) * R + r0 + lr] = tile[lr][lc];
    }
  }
}
