// One block of 256 threads per row, coalesced loads, then a shared-memory
// tree. The barrier inside the tree looked redundant ("each step only reads
// slots written in the step before"), so it was dropped.
#define THREADS 256

extern "C" __global__ void matvec_block_row(const float* A, const float* x, float* y, int M, int K) {
  __shared__ float partial[THREADS];
  const int row = blockIdx.x;
  const float* a = A + (size_t)row * K;
  float acc = 0.0f;
  for (int k = threadIdx.x; k < K; k += THREADS) acc += a[k] * x[k];
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (int s = THREADS / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
  }
  if (threadIdx.x == 0) y[row] = partial[0];
}
