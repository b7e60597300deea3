// Correct: libcu++ (cuda::std::numeric_limits, cuda::std::array) in an online softmax:
// one pass keeps a running (max, sum) per thread, then a shared-memory merge.
#include <cuda/std/array>
#include <cuda/std/limits>

extern "C" __global__ void softmax_online(const float* x, float* y, int m) {
  __shared__ cuda::std::array<float, 256> smax;
  __shared__ cuda::std::array<float, 256> ssum;
  const float* in = x + (long long)blockIdx.x * m;
  float* out = y + (long long)blockIdx.x * m;
  float mx = -cuda::std::numeric_limits<float>::infinity(), sum = 0.f;
  for (int c = threadIdx.x; c < m; c += blockDim.x) {
    const float v = in[c];
    if (v > mx) {
      sum = sum * expf(mx - v) + 1.f;
      mx = v;
    } else {
      sum += expf(v - mx);
    }
  }
  smax[threadIdx.x] = mx;
  ssum[threadIdx.x] = sum;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) {
      const float m1 = smax[threadIdx.x], m2 = smax[threadIdx.x + s];
      const float s1 = ssum[threadIdx.x], s2 = ssum[threadIdx.x + s];
      const float mm = fmaxf(m1, m2);
      // An empty thread has max -inf and sum 0: it contributes nothing.
      const float a = s1 == 0.f ? 0.f : s1 * expf(m1 - mm);
      const float b = s2 == 0.f ? 0.f : s2 * expf(m2 - mm);
      smax[threadIdx.x] = mm;
      ssum[threadIdx.x] = a + b;
    }
    __syncthreads();
  }
  const float gmax = smax[0], inv = 1.f / ssum[0];
  for (int c = threadIdx.x; c < m; c += blockDim.x) out[c] = expf(in[c] - gmax) * inv;
}
