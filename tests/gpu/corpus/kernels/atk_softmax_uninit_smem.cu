// Only threads that saw a column store their partial max and sum, but the
// trees combine all 256 slots: with M < 256 most slots are never written in
// this launch. Right only if leftover shared memory happens to be harmless.
extern "C" __global__ void softmax_uninit(const float* x, float* y, int m) {
  __shared__ float red[256];
  const float* in = x + (long long)blockIdx.x * m;
  float* out = y + (long long)blockIdx.x * m;
  float mx = __int_as_float(0xff800000);
  for (int c = threadIdx.x; c < m; c += blockDim.x) mx = fmaxf(mx, in[c]);
  if (threadIdx.x < m) red[threadIdx.x] = mx;
  __syncthreads();
  for (int s = 128; s > 0; s /= 2) {
    if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
    __syncthreads();
  }
  mx = red[0];
  __syncthreads();
  float sum = 0.f;
  for (int c = threadIdx.x; c < m; c += blockDim.x) sum += expf(in[c] - mx);
  if (threadIdx.x < m) red[threadIdx.x] = sum;
  __syncthreads();
  for (int s = 128; s > 0; s /= 2) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  const float inv = 1.f / red[0];
  for (int c = threadIdx.x; c < m; c += blockDim.x) out[c] = expf(in[c] - mx) * inv;
}
