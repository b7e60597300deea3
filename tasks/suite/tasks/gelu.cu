// gelu: y[i] = 0.5 * x[i] * (1 + erf(x[i] / sqrt(2))) for x[N] float32 (the exact
// GELU, not the tanh approximation).

// Reference (trusted): one thread per element, computed in double.
extern "C" __global__ void gelu_ref(const float* x, float* y, long long n) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const double v = x[i];
  y[i] = (float)(0.5 * v * (1.0 + erf(v * 0.70710678118654752440)));
}

// Baseline: a vectorised grid-stride kernel: float4 loads and stores over
// the first N - N % 4 elements (the buffers are 16-byte aligned), a scalar
// tail, erff in float.
__device__ __forceinline__ float gelu_f(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678f)); }

extern "C" __global__ void __launch_bounds__(256) gelu_vec4(const float* __restrict__ x, float* __restrict__ y,
                                                           long long n) {
  const long long n4 = n / 4;
  const long long stride = (long long)gridDim.x * blockDim.x;
  const float4* x4 = reinterpret_cast<const float4*>(x);
  float4* y4 = reinterpret_cast<float4*>(y);
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
    const float4 v = x4[i];
    y4[i] = make_float4(gelu_f(v.x), gelu_f(v.y), gelu_f(v.z), gelu_f(v.w));
  }
  for (long long i = 4 * n4 + (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) y[i] = gelu_f(x[i]);
}
