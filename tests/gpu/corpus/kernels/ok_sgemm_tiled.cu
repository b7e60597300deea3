// 32x32 tiles in shared memory, each thread accumulating one output in float
// over k in tile order: a summation order unlike the reference's double one.
#define T 32
extern "C" __global__ void sgemm32(const float* A, const float* B, float* C, int M, int N, int K) {
  __shared__ float As[T][T + 1], Bs[T][T + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int col = blockIdx.x * T + tx, row = blockIdx.y * T + ty;
  float acc = 0.f;
  for (int k0 = 0; k0 < K; k0 += T) {
    As[ty][tx] = (row < M && k0 + tx < K) ? A[(long long)row * K + k0 + tx] : 0.f;
    Bs[ty][tx] = (col < N && k0 + ty < K) ? B[(long long)(k0 + ty) * N + col] : 0.f;
    __syncthreads();
#pragma unroll 8
    for (int k = 0; k < T; ++k) acc = fmaf(As[ty][k], Bs[k][tx], acc);
    __syncthreads();
  }
  if (row < M && col < N) C[(long long)row * N + col] = acc;
}
