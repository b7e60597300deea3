// out[b, 0, j] = sum over i < dim1 of x[b, i, j]; x is [batch_size, dim1, dim2].
// Block (32, 8): 32 consecutive columns j (coalesced reads along dim2), the 8
// rows of threads take every 8th i, then a shared-memory sum of the 8 partials.
// Grid (cdiv(dim2, 32), batch_size).
extern "C" __global__ void sum_dim1(const float* x, float* out, int dim1, int dim2) {
  __shared__ float part[8][33];
  const int j = blockIdx.x * 32 + threadIdx.x;
  const int b = blockIdx.y;
  const float* xb = x + (long long)b * dim1 * dim2;
  float s = 0.f;
  if (j < dim2)
    for (int i = threadIdx.y; i < dim1; i += 8) s += xb[(long long)i * dim2 + j];
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && j < dim2) {
    float t = 0.f;
#pragma unroll
    for (int r = 0; r < 8; ++r) t += part[r][threadIdx.x];
    out[(long long)b * dim2 + j] = t;
  }
}
