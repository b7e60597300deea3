// Shared-memory tiling with a single barrier per tile: the barrier at the end
// of the loop is meant to protect the tiles before they are overwritten.
// But nothing makes a warp wait for the other warps' stores before it reads
// the freshly loaded tile, so it can read slots that still hold the previous
// tile (or the previous block's data).
#define TILE 32

extern "C" __global__ void matmul_tiled32_1sync(const float* A, const float* B, float* C, int n) {
  __shared__ float As[TILE][TILE];
  __shared__ float Bs[TILE][TILE + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * TILE + ty;
  const int col = blockIdx.x * TILE + tx;
  float acc = 0.0f;
  for (int t = 0; t < n; t += TILE) {
    As[ty][tx] = (row < n && t + tx < n) ? A[row * n + t + tx] : 0.0f;
    Bs[ty][tx] = (t + ty < n && col < n) ? B[(t + ty) * n + col] : 0.0f;
#pragma unroll
    for (int k = 0; k < TILE; ++k) acc += As[ty][k] * Bs[k][tx];
    __syncthreads();
  }
  if (row < n && col < n) C[row * n + col] = acc;
}
