// One block of 1024 threads per row, the row in chunks of 1024: each chunk is
// scanned in shared memory with Hillis-Steele (log2(1024) = 10 doubling
// steps), ping-ponging between two buffers so no step reads a slot another
// thread is writing; a running carry links the chunks.
#define T 1024

extern "C" __global__ void cumsum_hs(const float* x, float* y, int N) {
  __shared__ float buf[2][T];
  const float* row = x + (size_t)blockIdx.x * N;
  float* out = y + (size_t)blockIdx.x * N;
  const int t = threadIdx.x;
  float carry = 0.0f;
  for (int base = 0; base < N; base += T) {
    int cur = 0;
    buf[cur][t] = base + t < N ? row[base + t] : 0.0f;
    __syncthreads();
    for (int off = 1; off < T; off <<= 1) {
      const float v = buf[cur][t] + (t >= off ? buf[cur][t - off] : 0.0f);
      buf[cur ^ 1][t] = v;
      cur ^= 1;
      __syncthreads();
    }
    if (base + t < N) out[base + t] = buf[cur][t] + carry;
    carry += buf[cur][T - 1];
    __syncthreads();
  }
}
