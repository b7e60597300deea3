// One block of 256 threads per row, coalesced strided loops, three passes
// over the row (max, sum of exp, normalise). Each block reduction: a warp
// shuffle, the 8 warp results through shared memory, warp 0 finishes and
// broadcasts through red[0]. Warp 0 reads the slots right after its own
// shuffle: the warps run the same loop, so their slots are written by then.
#define NEG_INF __int_as_float(0xff800000)

__device__ __forceinline__ float warp_max(float v) {
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

extern "C" __global__ void softmax_block(const float* x, float* y, int M) {
  __shared__ float red[8];
  const float* row = x + (size_t)blockIdx.x * M;
  float* out = y + (size_t)blockIdx.x * M;
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;

  float mx = NEG_INF;
  for (int c = t; c < M; c += 256) mx = fmaxf(mx, row[c]);
  mx = warp_max(mx);
  if (lane == 0) red[warp] = mx;
  if (warp == 0) {
    float v = lane < 8 ? red[lane] : NEG_INF;
    v = warp_max(v);
    if (lane == 0) red[0] = v;
  }
  __syncthreads();
  mx = red[0];
  __syncthreads();  // red is reused below

  float sum = 0.0f;
  for (int c = t; c < M; c += 256) sum += expf(row[c] - mx);
  sum = warp_sum(sum);
  if (lane == 0) red[warp] = sum;
  if (warp == 0) {
    float v = lane < 8 ? red[lane] : 0.0f;
    v = warp_sum(v);
    if (lane == 0) red[0] = v;
  }
  __syncthreads();
  const float inv = 1.0f / red[0];

  for (int c = t; c < M; c += 256) out[c] = expf(row[c] - mx) * inv;
}
