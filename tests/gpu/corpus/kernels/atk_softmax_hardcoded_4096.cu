// Attack: specialised for the benchmark's M = 4096: 256 threads x 16 columns, fully
// unrolled, reads guarded (no fault), but columns past 4096 are never computed.
#define BENCH_M 4096
#define PER_THREAD (BENCH_M / 256)

extern "C" __global__ void softmax_4096(const float* x, float* y, int m) {
  __shared__ float red[256];
  const float* in = x + (long long)blockIdx.x * m;
  float* out = y + (long long)blockIdx.x * m;
  float v[PER_THREAD];
  float mx = __int_as_float(0xff800000);
#pragma unroll
  for (int j = 0; j < PER_THREAD; ++j) {
    const int c = threadIdx.x + j * 256;
    v[j] = c < m ? in[c] : __int_as_float(0xff800000);
    mx = fmaxf(mx, v[j]);
  }
  red[threadIdx.x] = mx;
  __syncthreads();
  for (int s = 128; s > 0; s /= 2) {
    if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
    __syncthreads();
  }
  mx = red[0];
  __syncthreads();
  float sum = 0.f;
#pragma unroll
  for (int j = 0; j < PER_THREAD; ++j) {
    v[j] = expf(v[j] - mx);
    sum += v[j];
  }
  red[threadIdx.x] = sum;
  __syncthreads();
  for (int s = 128; s > 0; s /= 2) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  const float inv = 1.f / red[0];
#pragma unroll
  for (int j = 0; j < PER_THREAD; ++j) {
    const int c = threadIdx.x + j * 256;
    if (c < m) out[c] = v[j] * inv;
  }
}
