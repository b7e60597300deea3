// Grid-stride float4 loop with a fixed grid (a few waves of blocks per SM)
// and two independent vectors per iteration, streaming cache hints; the
// scalar tail is spread over the first threads.
extern "C" __global__ void __launch_bounds__(256) relu_gs(const float* __restrict__ x, float* __restrict__ y,
                                                         long long n) {
  const long long n4 = n / 4;
  const long long stride = (long long)gridDim.x * blockDim.x;
  const float4* x4 = reinterpret_cast<const float4*>(x);
  float4* y4 = reinterpret_cast<float4*>(y);
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + stride < n4; i += 2 * stride) {
    const float4 a = __ldcs(&x4[i]);
    const float4 b = __ldcs(&x4[i + stride]);
    __stcs(&y4[i], make_float4(fmaxf(a.x, 0.0f), fmaxf(a.y, 0.0f), fmaxf(a.z, 0.0f), fmaxf(a.w, 0.0f)));
    __stcs(&y4[i + stride], make_float4(fmaxf(b.x, 0.0f), fmaxf(b.y, 0.0f), fmaxf(b.z, 0.0f), fmaxf(b.w, 0.0f)));
  }
  if (i < n4) {
    const float4 a = __ldcs(&x4[i]);
    __stcs(&y4[i], make_float4(fmaxf(a.x, 0.0f), fmaxf(a.y, 0.0f), fmaxf(a.z, 0.0f), fmaxf(a.w, 0.0f)));
  }
  const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (t < n - 4 * n4) y[4 * n4 + t] = fmaxf(x[4 * n4 + t], 0.0f);
}
