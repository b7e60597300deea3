// Tiled transpose with the tile padded to 33 columns, so reading a column of
// the tile touches 32 different banks, and a 32 x 8 block moving a 32 x 32
// tile (4 elements per thread) for more loads in flight per thread.
#define TILE 32
#define ROWS 8

extern "C" __global__ void transpose_padded(const float* __restrict__ x, float* __restrict__ y, int R, int C) {
  __shared__ float tile[TILE][TILE + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int x = blockIdx.x * TILE + tx, y0 = blockIdx.y * TILE;
#pragma unroll
  for (int j = 0; j < TILE; j += ROWS) {
    const int r = y0 + ty + j;
    if (r < R && x < C) tile[ty + j][tx] = x[(size_t)r * C + x];
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < TILE; j += ROWS) {
    const int c = blockIdx.x * TILE + ty + j, r = y0 + tx;
    if (c < C && r < R) y[(size_t)c * R + r] = tile[tx][ty + j];
  }
}
