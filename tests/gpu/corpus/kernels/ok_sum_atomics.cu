// Correct: a grid-stride loop, a warp-shuffle block reduction, then one float
// atomicAdd per block into s (zeroed by a first launch). The order of the atomics
// changes from run to run, so the result does too, within the tolerance.
extern "C" __global__ void sum_zero(float* s) { s[0] = 0.f; }

extern "C" __global__ void sum_atomic(const float* x, float* s, int n) {
  __shared__ float red[32];
  float acc = 0.f;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    acc += x[i];
  for (int off = 16; off > 0; off /= 2) acc += __shfl_down_sync(0xffffffffu, acc, off);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x < 32) {
    acc = threadIdx.x < blockDim.x / 32 ? red[threadIdx.x] : 0.f;
    for (int off = 16; off > 0; off /= 2) acc += __shfl_down_sync(0xffffffffu, acc, off);
    if (threadIdx.x == 0) atomicAdd(s, acc);
  }
}
