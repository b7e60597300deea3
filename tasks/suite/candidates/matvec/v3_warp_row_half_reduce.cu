// One warp per row (8 rows per 256-thread block). When K % 4 == 0 every row
// starts 16-byte aligned and the lanes read it as float4 (512 bytes per warp
// per step); otherwise scalar loads. Warp-shuffle reduction, no shared memory.
extern "C" __global__ void matvec_warp_row(const float* __restrict__ A, const float* __restrict__ x,
                                           float* __restrict__ y, int M, int K) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row = blockIdx.x * (blockDim.x / 32) + warp;
  if (row >= M) return;
  const float* a = A + (size_t)row * K;
  float acc = 0.0f;
  if ((K & 3) == 0) {
    const float4* a4 = reinterpret_cast<const float4*>(a);
    const float4* x4 = reinterpret_cast<const float4*>(x);
    for (int i = lane; i < K / 4; i += 32) {
      const float4 av = a4[i];
      const float4 xv = __ldg(&x4[i]);
      acc += av.x * xv.x + av.y * xv.y + av.z * xv.z + av.w * xv.w;
    }
  } else {
    for (int i = lane; i < K; i += 32) acc += a[i] * __ldg(&x[i]);
  }
#pragma unroll
  for (int off = 8; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (lane == 0) y[row] = acc;
}
