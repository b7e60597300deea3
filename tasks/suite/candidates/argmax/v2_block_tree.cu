// One block of 256 threads per row: each thread scans a strided slice
// (coalesced) keeping its first maximum, then a shared-memory tree of
// (value, index) pairs; ties go to the smaller index.
#define NEG_INF __int_as_float(0xff800000)

extern "C" __global__ void argmax_block(const float* x, int* idx, int M) {
  __shared__ float sv[256];
  __shared__ int si[256];
  const float* row = x + (size_t)blockIdx.x * M;
  const int t = threadIdx.x;
  float v = NEG_INF;
  int i = M;
  for (int c = t; c < M; c += 256)
    if (row[c] > v) {
      v = row[c];
      i = c;
    }
  sv[t] = v;
  si[t] = i;
  __syncthreads();
  for (int s = 128; s > 0; s >>= 1) {
    if (t < s) {
      const float ov = sv[t + s];
      const int oi = si[t + s];
      if (ov > sv[t] || (ov == sv[t] && oi < si[t])) {
        sv[t] = ov;
        si[t] = oi;
      }
    }
    __syncthreads();
  }
  if (t == 0) idx[blockIdx.x] = si[0];
}
