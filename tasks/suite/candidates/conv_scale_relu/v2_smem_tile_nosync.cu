// A 16 x 16 block computes a 16 x 16 patch of one output channel (grid z =
// N * K): per input channel the padded 18 x 18 input patch (zeros outside the
// image) and the 9 weights are staged in shared memory; the epilogue
// (0.5 * acc + b, ReLU) is fused into the store. One barrier per channel,
// after the compute, so the next channel's staging cannot overwrite a patch
// that is still being read.
#define BT 16

extern "C" __global__ void conv_scale_relu_tile(const float* x, const float* w, const float* b, float* y, int N, int C,
                                                int K, int H, int W) {
  __shared__ float xs[BT + 2][BT + 2];
  __shared__ float ws[9];
  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * BT + tx;
  const int n = blockIdx.z / K, k = blockIdx.z % K;
  const int ox0 = blockIdx.x * BT, oy0 = blockIdx.y * BT;
  float acc = 0.0f;
  for (int c = 0; c < C; ++c) {
    const float* xc = x + (size_t)(n * C + c) * H * W;
    for (int i = tid; i < (BT + 2) * (BT + 2); i += BT * BT) {
      const int ly = i / (BT + 2), lx = i % (BT + 2);
      const int gy = oy0 - 1 + ly, gx = ox0 - 1 + lx;
      xs[ly][lx] = (gy >= 0 && gy < H && gx >= 0 && gx < W) ? xc[gy * W + gx] : 0.0f;
    }
    if (tid < 9) ws[tid] = w[(k * C + c) * 9 + tid];
#pragma unroll
    for (int dy = 0; dy < 3; ++dy)
#pragma unroll
      for (int dx = 0; dx < 3; ++dx) acc += xs[ty + dy][tx + dx] * ws[dy * 3 + dx];
    __syncthreads();
  }
  const int oy = oy0 + ty, ox = ox0 + tx;
  if (oy < H && ox < W) y[((size_t)(n * K + k) * H + oy) * W + ox] = fmaxf(0.5f * acc + b[k], 0.0f);
}
