// Two-pass and otherwise right, but the scalar eps is never added: a row with
// zero variance (M = 1) divides 0 by 0.
extern "C" __global__ void layernorm_noeps(const float* x, float* y, int m, float eps) {
  __shared__ float part[256];
  const float* row = x + (long long)blockIdx.x * m;
  float* out = y + (long long)blockIdx.x * m;
  float s = 0.f;
  for (int j = threadIdx.x; j < m; j += 256) s += row[j];
  part[threadIdx.x] = s;
  __syncthreads();
  for (int w = 128; w > 0; w /= 2) {
    if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  const float mean = part[0] / m;
  __syncthreads();
  float q = 0.f;
  for (int j = threadIdx.x; j < m; j += 256) q += (row[j] - mean) * (row[j] - mean);
  part[threadIdx.x] = q;
  __syncthreads();
  for (int w = 128; w > 0; w /= 2) {
    if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  const float inv = rsqrtf(part[0] / m);
  for (int j = threadIdx.x; j < m; j += 256) out[j] = (row[j] - mean) * inv;
}
