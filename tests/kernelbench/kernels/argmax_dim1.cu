// out[b, j] = the first i < dim1 where x[b, i, j] is largest (int64); x is
// [batch_size, dim1, dim2]. Block (32, 8): 32 consecutive columns j, the 8
// rows of threads scan every 8th i in increasing order (strict >, so each
// keeps its first maximum), then thread row 0 merges the 8 candidates,
// preferring the smaller index on equal values. Grid (cdiv(dim2, 32), batch_size).
extern "C" __global__ void argmax_dim1(const float* x, long long* out, int dim1, int dim2) {
  __shared__ float best_v[8][33];
  __shared__ int best_i[8][33];
  const int j = blockIdx.x * 32 + threadIdx.x;
  const int b = blockIdx.y;
  const float* xb = x + (long long)b * dim1 * dim2;
  float v = 0.f;  // replaced by the first element (idx < 0)
  int idx = -1;
  if (j < dim2)
    for (int i = threadIdx.y; i < dim1; i += 8) {
      const float e = xb[(long long)i * dim2 + j];
      if (idx < 0 || e > v) { v = e; idx = i; }
    }
  best_v[threadIdx.y][threadIdx.x] = v;
  best_i[threadIdx.y][threadIdx.x] = idx;
  __syncthreads();
  if (threadIdx.y == 0 && j < dim2) {
    float bv = best_v[0][threadIdx.x];
    int bi = best_i[0][threadIdx.x];
#pragma unroll
    for (int r = 1; r < 8; ++r) {
      const float cv = best_v[r][threadIdx.x];
      const int ci = best_i[r][threadIdx.x];
      if (ci >= 0 && (cv > bv || (cv == bv && ci < bi))) { bv = cv; bi = ci; }
    }
    out[(long long)b * dim2 + j] = bi;
  }
}
