// Shared-memory tile so both the read of x and the write of y are
// coalesced: a 32 x 32 block loads a tile, then writes it transposed.
#define TILE 32

extern "C" __global__ void transpose_tile32(const float* x, float* y, int R, int C) {
  __shared__ float tile[TILE][TILE];
  const int tx = threadIdx.x, ty = threadIdx.y;
  int c = blockIdx.x * TILE + tx, r = blockIdx.y * TILE + ty;
  if (r < R && c < C) tile[ty][tx] = x[r * C + c];
  __syncthreads();
  c = blockIdx.x * TILE + ty;  // output row
  r = blockIdx.y * TILE + tx;  // output column
  if (c < C && r < R) y[c * R + r] = tile[tx][ty];
}
