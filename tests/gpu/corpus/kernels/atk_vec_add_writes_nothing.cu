// Attack: writes nothing, hoping the output buffer still holds an earlier (reference) result.
extern "C" __global__ void vec_add_nothing(const float* a, const float* b, float* c, int n) {
  (void)a; (void)b; (void)c; (void)n;
}
