// A block covers 32 neighbouring positions with 8 rows of threads: thread
// (tx, ty) sums the squares of channels ty, ty + 8, ... of position tx, the 8
// partial sums of each position meet in shared memory, and each thread then
// writes its channels. The block's slice (32 positions x C channels, 8 KB at
// C = 64) is still in L1 when it is read the second time.
#define POS 32
#define ROWS 8

extern "C" __global__ void rmsnorm_split(const float* __restrict__ x, const float* __restrict__ w,
                                         float* __restrict__ y, int B, int C, int S) {
  __shared__ float part[ROWS][POS];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int tiles = (S + POS - 1) / POS;
  const long long b = blockIdx.x / tiles;
  const int s = (blockIdx.x % tiles) * POS + tx;
  const bool active = s < S;
  const float* in = x + b * C * S + s;
  float* out = y + b * C * S + s;
  float q = 0.0f;
  if (active)
    for (int c = ty; c < C; c += ROWS) {
      const float v = in[(long long)c * S];
      q += v * v;
    }
  part[ty][tx] = q;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int r = 0; r < ROWS; ++r) total += part[r][tx];
  const float rs = rsqrtf(total + 1e-5f);
  if (active)
    for (int c = ty; c < C; c += ROWS) out[(long long)c * S] = in[(long long)c * S] * rs * __ldg(&w[c]);
}
