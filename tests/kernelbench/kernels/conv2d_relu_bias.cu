// out[b, co, oh, ow] = max(conv_bias[co] + sum over ci, kh, kw of
//   x[b, ci, oh + kh, ow + kw] * w[co, ci, kh, kw], 0) + bias[co]
// (stride 1, no padding, cross-correlation; OH = H - KS + 1, OW = W - KS + 1).
// One thread per output element; a block covers 256 consecutive positions of
// one (b, co) output plane, so reads of x along ow are coalesced and every
// thread of the block reads the same weights (broadcast).
// Grid (cdiv(OH * OW, 256), Cout, B).
extern "C" __global__ void __launch_bounds__(256)
conv2d_relu_bias(const float* x, const float* w, const float* conv_bias, const float* bias, float* out,
                 int cin, int cout, int h, int wd, int ks) {
  const int oh_n = h - ks + 1, ow_n = wd - ks + 1;
  const int p = blockIdx.x * blockDim.x + threadIdx.x;
  const int co = blockIdx.y, b = blockIdx.z;
  if (p >= oh_n * ow_n) return;
  const int oh = p / ow_n, ow = p % ow_n;
  const float* xb = x + (long long)b * cin * h * wd;
  const float* wc = w + (long long)co * cin * ks * ks;
  float acc = 0.f;
  for (int ci = 0; ci < cin; ++ci) {
    const float* xc = xb + (long long)ci * h * wd + (long long)oh * wd + ow;
    const float* wk = wc + ci * ks * ks;
    for (int kh = 0; kh < ks; ++kh)
      for (int kw = 0; kw < ks; ++kw) acc = fmaf(xc[kh * wd + kw], wk[kh * ks + kw], acc);
  }
  out[((long long)b * cout + co) * oh_n * ow_n + p] = fmaxf(acc + conv_bias[co], 0.f) + bias[co];
}
