// One pass: var = E[x^2] - E[x]^2 in float. Exact enough for rows centred near
// zero, but for a row with mean 1000 and spread 1 both terms are about 1e6 and
// their difference loses almost every digit.
extern "C" __global__ void layernorm1(const float* x, float* y, int m, float eps) {
  __shared__ float s1[256], s2[256];
  const float* row = x + (long long)blockIdx.x * m;
  float* out = y + (long long)blockIdx.x * m;
  float a = 0.f, b = 0.f;
  for (int j = threadIdx.x; j < m; j += 256) {
    a += row[j];
    b += row[j] * row[j];
  }
  s1[threadIdx.x] = a;
  s2[threadIdx.x] = b;
  __syncthreads();
  for (int w = 128; w > 0; w /= 2) {
    if (threadIdx.x < w) {
      s1[threadIdx.x] += s1[threadIdx.x + w];
      s2[threadIdx.x] += s2[threadIdx.x + w];
    }
    __syncthreads();
  }
  const float mean = s1[0] / m;
  const float var = fmaxf(s2[0] / m - mean * mean, 0.f);
  const float inv = rsqrtf(var + eps);
  for (int j = threadIdx.x; j < m; j += 256) out[j] = (row[j] - mean) * inv;
}
