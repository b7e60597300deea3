// Crash: writes garbage in a huge loop through a wild pointer.
extern "C" __global__ void vec_add_garbage(const float* a, const float* b, float* c, int n) {
  (void)a; (void)b; (void)n;
  float* wild = reinterpret_cast<float*>(reinterpret_cast<unsigned long long>(c) ^ 0x00007f0000000000ull);
  for (long long k = threadIdx.x; k < (1ll << 32); k += blockDim.x) wild[k * 977] = __int_as_float(0xdeadbeef);
}
