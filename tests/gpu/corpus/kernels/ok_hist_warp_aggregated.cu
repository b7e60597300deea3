// Correct: a shared-memory histogram per block where each warp first groups equal
// values with __match_any_sync, so one lane adds the whole group's count.
extern "C" __global__ void hist_clear(int* counts) {
  if (threadIdx.x < 64) counts[threadIdx.x] = 0;
}

extern "C" __global__ void hist_aggregated(const int* x, int* counts, int n) {
  __shared__ int local[64];
  if (threadIdx.x < 64) local[threadIdx.x] = 0;
  __syncthreads();
  const int stride = gridDim.x * blockDim.x;
  // Every lane of a warp runs the same number of iterations, so the full mask is valid.
  const int rounds = (n + stride - 1) / stride;
  for (int r = 0; r < rounds; ++r) {
    const int i = r * stride + blockIdx.x * blockDim.x + threadIdx.x;
    const int v = i < n ? x[i] : -1;
    const unsigned peers = __match_any_sync(0xffffffffu, v);
    const int leader = __ffs(peers) - 1;
    if ((unsigned)v < 64u && (int)(threadIdx.x % 32) == leader) atomicAdd(&local[v], __popc(peers));
  }
  __syncthreads();
  if (threadIdx.x < 64 && local[threadIdx.x] != 0) atomicAdd(&counts[threadIdx.x], local[threadIdx.x]);
}
