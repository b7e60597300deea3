// One block of 1024 threads per row, the row in chunks of 1024, each chunk
// scanned in shared memory with Hillis-Steele doubling steps, in place (one
// buffer, a barrier after every step), plus a running carry between chunks.
#define T 1024

extern "C" __global__ void cumsum_hs(const float* x, float* y, int N) {
  __shared__ float buf[T];
  const float* row = x + (size_t)blockIdx.x * N;
  float* out = y + (size_t)blockIdx.x * N;
  const int t = threadIdx.x;
  float carry = 0.0f;
  for (int base = 0; base < N; base += T) {
    buf[t] = base + t < N ? row[base + t] : 0.0f;
    __syncthreads();
    for (int off = 1; off < T; off <<= 1) {
      if (t >= off) buf[t] += buf[t - off];
      __syncthreads();
    }
    if (base + t < N) out[base + t] = buf[t] + carry;
    carry += buf[T - 1];
    __syncthreads();
  }
}
