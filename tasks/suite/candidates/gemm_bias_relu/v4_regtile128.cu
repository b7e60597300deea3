// 128x128 output tiles, 256 threads with 8x8 register tiles, BK = 8. Both
// operands are k-contiguous, so both tiles are loaded as float4 along k (when
// K % 4 == 0) and stored transposed in shared memory ([k][m] and [k][n]),
// letting each thread read its 8 x values and 8 w values as two float4.
// Bias and ReLU are applied in registers before the (float4) stores.
#define BM 128
#define BN 128
#define BK 8

extern "C" __global__ void __launch_bounds__(256) linear_relu_rt128(const float* __restrict__ x,
                                                                   const float* __restrict__ w,
                                                                   const float* __restrict__ b,
                                                                   float* __restrict__ y, int M, int N, int K) {
  __shared__ __align__(16) float xs[BK][BM];
  __shared__ __align__(16) float ws[BK][BN];
  const int tid = threadIdx.x;
  const int tx = tid % 16, ty = tid / 16;
  const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
  const bool vk = (K % 4) == 0;
  const int lr = tid / 2, lk = (tid % 2) * 4;  // each thread loads 4 k-values of one x row and one w row

  float acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;

  for (int k0 = 0; k0 < K; k0 += BK) {
    const int gk = k0 + lk;
    float xv[4], wv[4];
    const int gr = row0 + lr, gc = col0 + lr;
    if (vk && gr < M && gk + 3 < K) {
      const float4 t = *reinterpret_cast<const float4*>(x + (size_t)gr * K + gk);
      xv[0] = t.x; xv[1] = t.y; xv[2] = t.z; xv[3] = t.w;
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) xv[i] = (gr < M && gk + i < K) ? x[(size_t)gr * K + gk + i] : 0.0f;
    }
    if (vk && gc < N && gk + 3 < K) {
      const float4 t = *reinterpret_cast<const float4*>(w + (size_t)gc * K + gk);
      wv[0] = t.x; wv[1] = t.y; wv[2] = t.z; wv[3] = t.w;
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) wv[i] = (gc < N && gk + i < K) ? w[(size_t)gc * K + gk + i] : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      xs[lk + i][lr] = xv[i];
      ws[lk + i][lr] = wv[i];
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      const float4 a0 = *reinterpret_cast<const float4*>(&xs[k][ty * 4]);
      const float4 a1 = *reinterpret_cast<const float4*>(&xs[k][64 + ty * 4]);
      const float4 c0 = *reinterpret_cast<const float4*>(&ws[k][tx * 4]);
      const float4 c1 = *reinterpret_cast<const float4*>(&ws[k][64 + tx * 4]);
      const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
      const float c[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] += a[i] * c[j];
    }
    __syncthreads();
  }

  const bool vn = (N % 4) == 0;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int c = col0 + h * 64 + tx * 4;
    float bias[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) bias[j] = c + j < N ? __ldg(&b[c + j]) : 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int r = row0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + (i - 4));
      if (r >= M) continue;
      float v[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) v[j] = fmaxf(acc[i][h * 4 + j] + bias[j], 0.0f);
      float* out = y + (size_t)r * N + c;
      if (vn && c + 3 < N) {
        *reinterpret_cast<float4*>(out) = make_float4(v[0], v[1], v[2], v[3]);
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j)
          if (c + j < N) out[j] = v[j];
      }
    }
  }
}
