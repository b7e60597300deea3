// relu: y[i] = max(x[i], 0) for x[N] float32.

// Reference (trusted): one thread per element.
extern "C" __global__ void relu_ref(const float* x, float* y, long long n) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

// Baseline: a vectorised grid-stride kernel: float4 loads and stores over
// the first N - N % 4 elements (the buffers are 16-byte aligned), a scalar tail.
extern "C" __global__ void __launch_bounds__(256) relu_vec4(const float* __restrict__ x, float* __restrict__ y,
                                                           long long n) {
  const long long n4 = n / 4;
  const long long stride = (long long)gridDim.x * blockDim.x;
  const float4* x4 = reinterpret_cast<const float4*>(x);
  float4* y4 = reinterpret_cast<float4*>(y);
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
    const float4 v = x4[i];
    y4[i] = make_float4(fmaxf(v.x, 0.0f), fmaxf(v.y, 0.0f), fmaxf(v.z, 0.0f), fmaxf(v.w, 0.0f));
  }
  for (long long i = 4 * n4 + (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = fmaxf(x[i], 0.0f);
}
