// Bug: the strides of dim1 and dim2 swapped, as if x were [batch_size, dim2,
// dim1]: out[b, j] is the argmax of the contiguous run x_flat[b][j * dim1 ..
// j * dim1 + dim1) instead of the column x[b, :, j]. Same indices in range,
// the wrong elements compared (it agrees only when dim1 or dim2 is 1).
extern "C" __global__ void argmax_dim1_swapped(const float* x, long long* out, int dim1, int dim2) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  const int b = blockIdx.y;
  if (j >= dim2) return;
  const float* row = x + (long long)b * dim1 * dim2 + (long long)j * dim1;
  float v = row[0];
  int idx = 0;
  for (int i = 1; i < dim1; ++i)
    if (row[i] > v) { v = row[i]; idx = i; }
  out[(long long)b * dim2 + j] = idx;
}
