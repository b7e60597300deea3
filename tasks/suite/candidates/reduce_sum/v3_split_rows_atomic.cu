// Split the reduction: the 128 column tiles x B batches of a plain column
// reduction are barely one block per SM, so r is also cut into 8 slices
// (grid z). A block of 32 x 8 threads reads 128 columns as float4 (when
// C % 4 == 0, else 4 scalar columns 32 apart), combines its 8 rows in shared
// memory and adds the slice's sums into y (zeroed first) with atomicAdd.
#define SPLIT 8

extern "C" __global__ void zero_f32(float* p, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = 0.0f;
}

extern "C" __global__ void reduce_sum_split(const float* __restrict__ x, float* __restrict__ y, int R, int C) {
  __shared__ float4 part[8][32];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const size_t b = blockIdx.y;
  const int rows = (R + SPLIT - 1) / SPLIT;
  const int r0 = blockIdx.z * rows, r1 = min(R, r0 + rows);
  const float* xb = x + b * R * C;
  const bool vec = (C & 3) == 0;
  float4 s = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (vec) {
    const int c4 = blockIdx.x * 32 + tx;
    if (c4 < C / 4) {
      const float4* p = reinterpret_cast<const float4*>(xb) + c4;
      for (int r = r0 + ty; r < r1; r += 8) {
        const float4 v = p[(size_t)r * (C / 4)];
        s.x += v.x; s.y += v.y; s.z += v.z; s.w += v.w;
      }
    }
  } else {
    const int c0 = blockIdx.x * 128 + tx;
    for (int r = r0 + ty; r < r1; r += 8) {
      const float* row = xb + (size_t)r * C;
      if (c0 < C) s.x += row[c0];
      if (c0 + 32 < C) s.y += row[c0 + 32];
      if (c0 + 64 < C) s.z += row[c0 + 64];
      if (c0 + 96 < C) s.w += row[c0 + 96];
    }
  }
  part[ty][tx] = s;
  __syncthreads();
  if (ty != 0) return;
  float4 t = part[0][tx];
  for (int k = 1; k < 8; ++k) {
    t.x += part[k][tx].x; t.y += part[k][tx].y; t.z += part[k][tx].z; t.w += part[k][tx].w;
  }
  float* out = y + b * C;
  if (vec) {
    const int c = (blockIdx.x * 32 + tx) * 4;
    if (c < C) {
      atomicAdd(&out[c], t.x);
      atomicAdd(&out[c + 1], t.y);
      atomicAdd(&out[c + 2], t.z);
      atomicAdd(&out[c + 3], t.w);
    }
  } else {
    const int c0 = blockIdx.x * 128 + tx;
    if (c0 < C) atomicAdd(&out[c0], t.x);
    if (c0 + 32 < C) atomicAdd(&out[c0 + 32], t.y);
    if (c0 + 64 < C) atomicAdd(&out[c0 + 64], t.z);
    if (c0 + 96 < C) atomicAdd(&out[c0 + 96], t.w);
  }
}
