// One block of 256 threads per row: coalesced strided max per thread, then a
// shared-memory tree.
#define NEG_INF __int_as_float(0xff800000)

extern "C" __global__ void reduce_max_block(const float* x, float* y, int M) {
  __shared__ float red[256];
  const float* row = x + (size_t)blockIdx.x * M;
  const int t = threadIdx.x;
  float v = NEG_INF;
  for (int c = t; c < M; c += 256) v = fmaxf(v, row[c]);
  red[t] = v;
  __syncthreads();
  for (int s = 128; s > 0; s >>= 1) {
    if (t < s) red[t] = fmaxf(red[t], red[t + s]);
    __syncthreads();
  }
  if (t == 0) y[blockIdx.x] = red[0];
}
