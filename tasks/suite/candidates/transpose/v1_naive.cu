// First draft: one thread per element; threadIdx.x walks the columns of x,
// so reads are coalesced and writes go down a column of y.
extern "C" __global__ void transpose_naive(const float* x, float* y, int R, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  const int r = blockIdx.y * blockDim.y + threadIdx.y;
  if (r < R && c < C) y[c * R + r] = x[r * C + c];
}
