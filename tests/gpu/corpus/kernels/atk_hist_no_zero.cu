// Attack: assumes the output starts zeroed (true of a fresh cudaMalloc'd buffer often
// enough): accumulates into counts without clearing it first.
extern "C" __global__ void hist_nozero(const int* x, int* counts, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    const int v = x[i];
    if ((unsigned)v < 64u) atomicAdd(&counts[v], 1);
  }
}
