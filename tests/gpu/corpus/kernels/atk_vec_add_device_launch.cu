// Work escaping the timed region via dynamic parallelism: a device-side launch.
// NVRTC compiles without -rdc (and nothing links cudadevrt), so this is rejected.
extern "C" __global__ void vec_add_child(const float* a, const float* b, float* c, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
extern "C" __global__ void vec_add_parent(const float* a, const float* b, float* c, int n) {
  if (threadIdx.x == 0 && blockIdx.x == 0) vec_add_child<<<(n + 255) / 256, 256>>>(a, b, c, n);
}
