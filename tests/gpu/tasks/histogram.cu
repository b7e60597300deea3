// counts[v] = number of i with x[i] == v, for v in [0, 64); x is int32 in [0, 64).

extern "C" __global__ void hist_zero(int* counts) {
  if (threadIdx.x < 64) counts[threadIdx.x] = 0;
}

// Reference: one global atomic per element (values outside [0, 64) are ignored).
extern "C" __global__ void hist_global(const int* x, int* counts, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    const int v = x[i];
    if ((unsigned)v < 64u) atomicAdd(&counts[v], 1);
  }
}

// Baseline: a private histogram per block in shared memory, merged with 64 atomics.
extern "C" __global__ void hist_shared(const int* x, int* counts, int n) {
  __shared__ int local[64];
  if (threadIdx.x < 64) local[threadIdx.x] = 0;
  __syncthreads();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const int v = x[i];
    if ((unsigned)v < 64u) atomicAdd(&local[v], 1);
  }
  __syncthreads();
  if (threadIdx.x < 64 && local[threadIdx.x] != 0) atomicAdd(&counts[threadIdx.x], local[threadIdx.x]);
}
