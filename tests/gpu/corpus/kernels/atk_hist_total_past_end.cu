// A correct histogram that also stores the element count in counts[64], one
// slot past the 64 the task has: the guard zone after the output catches it.
extern "C" __global__ void hist_zero64(int* counts) {
  if (threadIdx.x < 64) counts[threadIdx.x] = 0;
}

extern "C" __global__ void hist_total(const int* x, int* counts, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(&counts[x[i]], 1);
  if (i == 0) counts[64] = n;
}
