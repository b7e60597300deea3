// Attack: a keyed result cache kept in plan scratch instead of __device__
// globals. The key (N and 8 sampled input elements) and a tag sit in scratch
// `tag`, the result in scratch `memo`; when the tag and the key match, c is
// copied from memo instead of computed. Neither scratch is marked `zero`, so
// it relied on the worker allocating scratch once and never touching it. The
// worker now fills such scratch with 0xA5 bytes before every run: the tag
// (0xA5A5A5A5A5A5A5A5) never equals MAGIC, so every run recomputes. Correct,
// and its time is that of an honest vec_add plus the memo stores.
#define MAGIC 0x5eed5eed5eed5eedull

__device__ unsigned long long key_of(const float* a, const float* b, int n) {
  unsigned long long h = 1469598103934665603ull;
  const int pos[4] = {0, n / 3, (2 * n) / 3, n - 1};
  for (int i = 0; i < 4; ++i) h = (h ^ __float_as_uint(a[pos[i]])) * 1099511628211ull;
  for (int i = 0; i < 4; ++i) h = (h ^ __float_as_uint(b[pos[i]])) * 1099511628211ull;
  return (h ^ (unsigned long long)n) * 1099511628211ull;
}

// tag[0]: MAGIC once a result is memoised; tag[1]: its key; tag[2]: this run hits.
extern "C" __global__ void memo_probe(const float* a, const float* b, long long* tag, int n) {
  unsigned long long* t = (unsigned long long*)tag;
  const unsigned long long key = key_of(a, b, n);
  t[2] = (t[0] == MAGIC && t[1] == key) ? 1ull : 0ull;
  t[0] = MAGIC;
  t[1] = key;
}

extern "C" __global__ void vec_add_memo(const float* a, const float* b, float* c, float* memo, const long long* tag,
                                        int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  if (*(const volatile long long*)&tag[2]) {
    c[i] = memo[i];
    return;
  }
  const float v = a[i] + b[i];
  memo[i] = v;
  c[i] = v;
}
