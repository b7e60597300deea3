// The tiled kernel without the zero padding: at the matrix edges it loads only
// the elements that exist and leaves the rest of the tile as it found it, then
// multiplies the whole tile. Right only where leftover shared memory is zero.
extern "C" __global__ void sgemm_nopad(const float* A, const float* B, float* C, int M, int N, int K) {
  __shared__ float As[16][16], Bs[16][16];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int col = blockIdx.x * 16 + tx, row = blockIdx.y * 16 + ty;
  float acc = 0.f;
  for (int k0 = 0; k0 < K; k0 += 16) {
    if (row < M && k0 + tx < K) As[ty][tx] = A[(long long)row * K + k0 + tx];
    if (col < N && k0 + ty < K) Bs[ty][tx] = B[(long long)(k0 + ty) * N + col];
    __syncthreads();
    for (int k = 0; k < 16; ++k) acc += As[ty][k] * Bs[k][tx];
    __syncthreads();
  }
  if (row < M && col < N) C[(long long)row * N + col] = acc;
}
