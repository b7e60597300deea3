// Race: the shared-memory tree reductions have no __syncthreads(): warps read
// partial sums other warps have not written yet (or left from the last phase).
extern "C" __global__ void softmax_nosync(const float* x, float* y, int m) {
  __shared__ float red[256];
  const float* in = x + (long long)blockIdx.x * m;
  float* out = y + (long long)blockIdx.x * m;
  float mx = __int_as_float(0xff800000);
  for (int c = threadIdx.x; c < m; c += blockDim.x) mx = fmaxf(mx, in[c]);
  red[threadIdx.x] = mx;
  for (int s = 128; s > 0; s /= 2)
    if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
  mx = red[0];
  float sum = 0.f;
  for (int c = threadIdx.x; c < m; c += blockDim.x) sum += expf(in[c] - mx);
  red[threadIdx.x] = sum;
  for (int s = 128; s > 0; s /= 2)
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
  const float inv = 1.f / red[0];
  for (int c = threadIdx.x; c < m; c += blockDim.x) out[c] = expf(in[c] - mx) * inv;
}
