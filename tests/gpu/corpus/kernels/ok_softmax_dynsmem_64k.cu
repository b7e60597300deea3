// Correct: one block per row; the row is staged in 64 KiB of dynamic shared memory
// (above the 48 KiB default, so the runtime must opt in), with a global-memory path
// for rows longer than 16384. Warp-shuffle reductions.
#define STAGE 16384

__device__ float block_reduce(float v, bool is_max, float* red) {
  for (int off = 16; off > 0; off /= 2) {
    const float o = __shfl_down_sync(0xffffffffu, v, off);
    v = is_max ? fmaxf(v, o) : v + o;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) red[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < (int)(blockDim.x / 32) ? red[lane] : (is_max ? __int_as_float(0xff800000) : 0.f);
    for (int off = 16; off > 0; off /= 2) {
      const float o = __shfl_down_sync(0xffffffffu, v, off);
      v = is_max ? fmaxf(v, o) : v + o;
    }
    if (lane == 0) red[0] = v;
  }
  __syncthreads();
  v = red[0];
  __syncthreads();
  return v;
}

extern "C" __global__ void softmax_staged(const float* x, float* y, int m) {
  extern __shared__ float row[];
  __shared__ float red[32];
  const float* in = x + (long long)blockIdx.x * m;
  float* out = y + (long long)blockIdx.x * m;
  const bool staged = m <= STAGE;
  float mx = __int_as_float(0xff800000);
  for (int c = threadIdx.x; c < m; c += blockDim.x) {
    const float v = in[c];
    if (staged) row[c] = v;
    mx = fmaxf(mx, v);
  }
  mx = block_reduce(mx, true, red);
  float sum = 0.f;
  for (int c = threadIdx.x; c < m; c += blockDim.x) sum += expf((staged ? row[c] : in[c]) - mx);
  sum = block_reduce(sum, false, red);
  const float inv = 1.f / sum;
  for (int c = threadIdx.x; c < m; c += blockDim.x) out[c] = expf((staged ? row[c] : in[c]) - mx) * inv;
}
