// Hang: waits for a value that never appears in c (the validator poisons c before the run).
// A loop on a plain local would be optimised away, so it sleeps and reads global memory.
extern "C" __global__ void vec_add_endless(const float* a, const float* b, float* c, int n) {
  (void)a; (void)b; (void)n;
  while (*(volatile unsigned*)c != 0x12345678u) __nanosleep(1000);
}
