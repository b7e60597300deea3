// One thread per output element, fp32 accumulation in k order: the four
// products of blas_calls written out plainly.
extern "C" __global__ void products(const float* a, const float* b, const float* w, const float* v,
                                    const float* a2, const float* b2, float* c, float* d, float* e, float* f,
                                    int M, int N, int K) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  const int row = blockIdx.y;
  if (row >= M || col >= N) return;
  float sc = 0.f, sd = 0.f, sf0 = 0.f, sf1 = 0.f;
  for (int k = 0; k < K; ++k) {
    const float x = a[row * K + k];
    sc += x * b[k * N + col];
    sd += x * w[col * K + k];
    sf0 += a2[row * K + k] * b2[k * N + col];
    sf1 += a2[(M + row) * K + k] * b2[(K + k) * N + col];
  }
  c[row * N + col] = sc;
  d[row * N + col] = sd;
  f[row * N + col] = sf0;
  f[(M + row) * N + col] = sf1;
  if (col == 0) {
    float se = 0.f;
    for (int k = 0; k < K; ++k) se += a[row * K + k] * v[k];
    e[row] = se;
  }
}
