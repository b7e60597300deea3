// out = max(x, 0) over n = batch_size * dim floats. Each thread handles one
// float4 (buffers are allocated 16-byte aligned); the first n % 4 threads
// also handle the scalar tail.
extern "C" __global__ void relu_f32(const float* x, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int n4 = n / 4;
  if (i < n4) {
    const float4 v = reinterpret_cast<const float4*>(x)[i];
    reinterpret_cast<float4*>(out)[i] = make_float4(fmaxf(v.x, 0.f), fmaxf(v.y, 0.f), fmaxf(v.z, 0.f), fmaxf(v.w, 0.f));
  }
  const int t = n4 * 4 + i;
  if (i < n % 4) out[t] = fmaxf(x[t], 0.f);
}
