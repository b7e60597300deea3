// Race: every block adds its partial sum into s with a plain read-modify-write
// (no atomic): concurrent blocks lose each other's updates.
extern "C" __global__ void sum_zero(float* s) { s[0] = 0.f; }

extern "C" __global__ void sum_racy(const float* x, float* s, int n) {
  __shared__ float red[256];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  red[threadIdx.x] = i < n ? x[i] : 0.f;
  __syncthreads();
  for (int w = 128; w > 0; w /= 2) {
    if (threadIdx.x < w) red[threadIdx.x] += red[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    volatile float* out = s;
    const float old = *out;
    __nanosleep(200);  // widen the window, as real work between load and store would
    *out = old + red[0];
  }
}
