// One warp per row, float4 loads unrolled by 4 with independent accumulators
// (four 512-byte loads in flight per warp before any FMA waits), x through
// the read-only path, streaming loads for A (read once, do not keep in L1).
// Scalar path for rows that are not 16-byte aligned (K % 4 != 0).
extern "C" __global__ void __launch_bounds__(256) matvec_warp_unroll(const float* __restrict__ A,
                                                                    const float* __restrict__ x,
                                                                    float* __restrict__ y, int M, int K) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row = blockIdx.x * (blockDim.x / 32) + warp;
  if (row >= M) return;
  const float* a = A + (size_t)row * K;
  float acc0 = 0.0f, acc1 = 0.0f, acc2 = 0.0f, acc3 = 0.0f;
  if ((K & 3) == 0) {
    const float4* a4 = reinterpret_cast<const float4*>(a);
    const float4* x4 = reinterpret_cast<const float4*>(x);
    const int n4 = K / 4;
    int i = lane;
    for (; i + 96 < n4; i += 128) {
      const float4 a0 = __ldcs(&a4[i]), a1 = __ldcs(&a4[i + 32]), a2 = __ldcs(&a4[i + 64]), a3 = __ldcs(&a4[i + 96]);
      const float4 x0 = __ldg(&x4[i]), x1 = __ldg(&x4[i + 32]), x2 = __ldg(&x4[i + 64]), x3 = __ldg(&x4[i + 96]);
      acc0 += a0.x * x0.x + a0.y * x0.y + a0.z * x0.z + a0.w * x0.w;
      acc1 += a1.x * x1.x + a1.y * x1.y + a1.z * x1.z + a1.w * x1.w;
      acc2 += a2.x * x2.x + a2.y * x2.y + a2.z * x2.z + a2.w * x2.w;
      acc3 += a3.x * x3.x + a3.y * x3.y + a3.z * x3.z + a3.w * x3.w;
    }
    for (; i < n4; i += 32) {
      const float4 av = __ldcs(&a4[i]);
      const float4 xv = __ldg(&x4[i]);
      acc0 += av.x * xv.x + av.y * xv.y + av.z * xv.z + av.w * xv.w;
    }
  } else {
    int i = lane;
    for (; i + 96 < K; i += 128) {
      acc0 += a[i] * __ldg(&x[i]);
      acc1 += a[i + 32] * __ldg(&x[i + 32]);
      acc2 += a[i + 64] * __ldg(&x[i + 64]);
      acc3 += a[i + 96] * __ldg(&x[i + 96]);
    }
    for (; i < K; i += 32) acc0 += a[i] * __ldg(&x[i]);
  }
  float acc = (acc0 + acc1) + (acc2 + acc3);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (lane == 0) y[row] = acc;
}
