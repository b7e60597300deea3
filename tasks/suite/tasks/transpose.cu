// transpose: y[c, r] = x[r, c] for x[R, C] row-major float32 (y is [C, R]).

// Reference (trusted): one thread per element; reads coalesced, writes strided.
extern "C" __global__ void transpose_ref(const float* x, float* y, int r, int c) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  const int row = blockIdx.y * blockDim.y + threadIdx.y;
  if (row < r && col < c) y[(long long)col * r + row] = x[(long long)row * c + col];
}

// Baseline: the classic shared-memory transpose. A 32 x 8 block moves a
// 32 x 32 tile (4 elements per thread): coalesced reads of x into a tile
// padded to 33 columns (no bank conflicts on the transposed read), then
// coalesced writes of y.
#define TILE 32
#define ROWS 8
extern "C" __global__ void transpose_tiled(const float* __restrict__ x, float* __restrict__ y, int R, int C) {
  __shared__ float tile[TILE][TILE + 1];
  const int bx = blockIdx.x * TILE, by = blockIdx.y * TILE;
  const int tx = threadIdx.x, ty = threadIdx.y;
#pragma unroll
  for (int j = 0; j < TILE; j += ROWS) {
    const int r = by + ty + j, c = bx + tx;
    if (r < R && c < C) tile[ty + j][tx] = x[(size_t)r * C + c];
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < TILE; j += ROWS) {
    const int c = bx + ty + j, r = by + tx;  // output row c, column r
    if (c < C && r < R) y[(size_t)c * R + r] = tile[tx][ty + j];
  }
}
