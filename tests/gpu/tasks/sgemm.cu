// C = A B, float32 row-major. The reference sums in double (one rounding, at
// the end); the baseline is a plain 16x16 shared-memory tiled kernel in float.
extern "C" __global__ void sgemm_ref(const float* A, const float* B, float* C, int M, int N, int K) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x, row = blockIdx.y * blockDim.y + threadIdx.y;
  if (row >= M || col >= N) return;
  double acc = 0;
  for (int k = 0; k < K; ++k) acc += (double)A[(long long)row * K + k] * (double)B[(long long)k * N + col];
  C[(long long)row * N + col] = (float)acc;
}

extern "C" __global__ void sgemm_tiled(const float* A, const float* B, float* C, int M, int N, int K) {
  __shared__ float As[16][16], Bs[16][16];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int col = blockIdx.x * 16 + tx, row = blockIdx.y * 16 + ty;
  float acc = 0.f;
  for (int k0 = 0; k0 < K; k0 += 16) {
    As[ty][tx] = (row < M && k0 + tx < K) ? A[(long long)row * K + k0 + tx] : 0.f;
    Bs[ty][tx] = (col < N && k0 + ty < K) ? B[(long long)(k0 + ty) * N + col] : 0.f;
    __syncthreads();
#pragma unroll
    for (int k = 0; k < 16; ++k) acc += As[ty][k] * Bs[k][tx];
    __syncthreads();
  }
  if (row < M && col < N) C[(long long)row * N + col] = acc;
}
