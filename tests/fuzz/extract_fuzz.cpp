/// Fuzz target for kernel extraction (include/specgen/extract.hpp).
///
/// Built two ways:
/// - with libFuzzer (`-DSPECGEN_FUZZ_LIBFUZZER=ON`, clang): `LLVMFuzzerTestOneInput` only;
/// - otherwise with a standalone driver that mutates a built-in seed corpus of
///   realistic model outputs, for a number of iterations or seconds:
///     extract_fuzz [--seconds S] [--iterations N] [--seed X] [FILE...]
///   FILEs (crash reproducers) are checked once each before the loop.
///
/// Invariants checked on every input, for every combination of options:
/// - nothing crashes or throws;
/// - on success the source and plan are the input's bytes at the reported
///   spans, inside [begin, end); the kernels are the source's declarations and
///   the plan launches only those;
/// - the chosen candidate is the last complete one: extracting from the text
///   cut at `end` finds the same candidate, and the rest of the text alone
///   holds no complete candidate (a candidate there would be one after it);
/// - fence_scanner and brace_tracker report the same events for the whole text
///   and for a random chunking of it, and fence spans are ordered and nested.
#include "fuzz_support.hpp"

#include <specgen/extract.hpp>
#include <specgen/types.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace specgen;

std::string_view current_input;

[[noreturn]] void fail(const char* what) { fuzz::fail("extract_fuzz", what, current_input); }

/// Chunk sizes derived from the input, so a libFuzzer reproducer replays exactly.
std::vector<std::size_t> chunking_for(std::string_view text) {
  std::mt19937_64 rng(fnv1a(text));
  std::vector<std::size_t> sizes;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t n = rng() % 4 == 0 ? 1 : rng() % 64 + 1;
    sizes.push_back(n);
    at += n;
  }
  return sizes;
}

template <class Scanner>
auto events(std::string_view text, const std::vector<std::size_t>* sizes, Scanner& s) {
  decltype(s.feed("")) all;
  if (!sizes) {
    all = s.feed(text);
  } else {
    std::size_t at = 0;
    for (std::size_t n : *sizes) {
      for (auto& e : s.feed(text.substr(at, n))) all.push_back(std::move(e));
      at += n;
    }
  }
  return all;
}

void check_scanners(std::string_view text) {
  const auto sizes = chunking_for(text);

  fence_scanner whole_fs, chunked_fs;
  auto whole = events(text, nullptr, whole_fs);
  auto chunked = events(text, &sizes, chunked_fs);
  for (auto& b : whole_fs.finish()) whole.push_back(std::move(b));
  for (auto& b : chunked_fs.finish()) chunked.push_back(std::move(b));
  FUZZ_CHECK(whole == chunked);
  FUZZ_CHECK(whole_fs.inside_fence() == chunked_fs.inside_fence());
  FUZZ_CHECK(whole_fs.open_tag() == chunked_fs.open_tag());
  std::size_t last_end = 0;
  for (const auto& b : whole) {
    FUZZ_CHECK(last_end <= b.block.begin);
    FUZZ_CHECK(b.block.begin < b.content.begin);
    FUZZ_CHECK(b.content.begin <= b.content.end && b.content.end < b.block.end && b.block.end <= text.size());
    FUZZ_CHECK(b.tag.size() <= fence_scanner::max_tag);
    last_end = b.block.end;
  }

  brace_tracker whole_bt, chunked_bt;
  const auto kernel_events = events(text, nullptr, whole_bt);
  FUZZ_CHECK(kernel_events == events(text, &sizes, chunked_bt));
  FUZZ_CHECK(whole_bt.inside_kernel() == chunked_bt.inside_kernel());
  for (const auto& e : kernel_events) {
    FUZZ_CHECK(e.span.begin < e.span.end && e.span.end <= text.size());
    FUZZ_CHECK(!e.name.empty() && e.name.size() <= brace_tracker::max_name);
  }
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

void check_extraction(std::string_view text, const extract_options& opt) {
  const auto r = extract_candidate(text, opt);
  if (!r) {
    FUZZ_CHECK(!r.error().message.empty());
    FUZZ_CHECK(static_cast<std::size_t>(r.error().reason) < extract_reason_names.size());
    return;
  }
  FUZZ_CHECK(r->begin <= r->source_span.begin && r->source_span.end <= r->end && r->end <= text.size());
  FUZZ_CHECK(r->source == r->source_span.of(text));
  FUZZ_CHECK(r->plan == r->plan_span.of(text));
  if (r->plan_span != text_span{}) FUZZ_CHECK(r->begin <= r->plan_span.begin && r->plan_span.end <= r->end);
  FUZZ_CHECK(!r->kernels.empty());
  const auto declared = declared_kernels(r->source);
  for (const auto& k : r->kernels) FUZZ_CHECK(contains(declared, k));
  if (!r->inline_source) FUZZ_CHECK(r->kernels == declared);
  const auto launches = detail::plan_launch_names(r->plan);
  if (opt.require_plan) FUZZ_CHECK(!launches.empty());
  for (const auto& l : launches) FUZZ_CHECK(l.empty() || contains(r->kernels, l));

  // Inline sources end mid-line, where the fence scanner's view of the rest differs; the cut
  // properties hold for fenced candidates.
  if (opt.allow_inline_code) return;
  const auto prefix = extract_candidate(text.substr(0, r->end), opt);
  FUZZ_CHECK(prefix && *prefix == *r);
  const auto suffix = extract_candidate(text.substr(r->end), opt);
  FUZZ_CHECK(!suffix);
  const auto why = suffix.error().reason;
  FUZZ_CHECK(why != extract_reason::plan_names_unknown_kernel && why != extract_reason::plan_launches_nothing);
}

void check_one(std::string_view text) {
  current_input = text;
  check_scanners(text);
  for (bool require_plan : {true, false})
    for (bool allow_inline : {false, true})
      check_extraction(text, {.require_plan = require_plan, .allow_inline_code = allow_inline});
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  check_one(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}

#ifndef SPECGEN_LIBFUZZER

namespace {

// ---- seed corpus: model outputs as they come ---------------------------------------------

const char* const softmax_v1 = R"(extern "C" __global__ void softmax(const float* x, float* y, int N) {
  __shared__ float buf[256];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  buf[threadIdx.x] = i < N ? x[i] : -INFINITY;  // pad with -inf, not 0 ('}' is fine here)
  __syncthreads();
  if (i < N) y[i] = expf(buf[threadIdx.x]);
}
)";

const char* const softmax_v2 = R"(#include <cuda_fp16.h>
/* reduction helper: "{" in a comment */
__device__ float warp_max(float v) {
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, o));
  return v;
}
extern "C" __global__ __launch_bounds__(256) void softmax(const float* __restrict__ x, float* y, int N) {
  const char* tag = R"k(})k";
  int i = blockIdx.x * 256 + threadIdx.x;
  float v = i < N ? x[i] : -1e30f;
  v = warp_max(v);
  if (i < N && tag[0]) y[i] = v;
}
)";

const char* const plan_one = "scratch tmp : f32[N]\nlaunch softmax grid(cdiv(N,256)) block(256) smem(0) args(x, y, N)\n";

std::vector<std::string> seed_corpus() {
  using std::string;
  const string v1 = softmax_v1, v2 = softmax_v2, plan = plan_one;
  std::vector<string> c;
  // Draft-early: a kernel, a plan, a revision, a final version.
  c.push_back("We need a row softmax. Let's tile by 256 threads.\n\n```cuda\n" + v1 + "```\n\n```plan\n" + plan +
              "```\n\nActually, let me fix the reduction: use warp shuffles.\n```cuda\n" + v2 + "```\n```plan\n" + plan +
              "```\nThat should be it.");
  // Think-then-write: prose only, code inline.
  c.push_back("Thinking about coalescing... each thread handles one element, so " + v1 +
              " is the kernel; launch it with cdiv(N,256) blocks. I'm fairly sure that's right.");
  // Truncated mid-kernel after a complete draft.
  c.push_back("```cuda\n" + v1 + "```\n```plan\n" + plan + "```\nLet me optimise.\n```cuda\n" + v2.substr(0, 200));
  // Interleaved with a Python reference, a text block and an unlabelled block; plan first.
  c.push_back("Reference:\n```python\ndef softmax(x):\n    return x.exp() / x.exp().sum()\n```\n```plan\n" + plan +
              "```\n~~~text\nnotes ``` inside\n~~~\n```\nplain block\n```\n```CUDA\n" + v2 + "```\n");
  // CRLF everywhere.
  string crlf;
  for (char ch : c[0]) crlf += ch == '\n' ? string("\r\n") : string(1, ch);
  c.push_back(crlf);
  // Nested fences: a four-backtick markdown block quoting a cuda block, then the real one.
  c.push_back("````markdown\n```cuda\n" + v1 + "```\n````\n  ```cu\n" + v1 + "  ```\n  ```plan\n" + plan + "  ```\n");
  // A plan naming a kernel the source lacks; a kernel without C linkage.
  c.push_back("```cuda\n__global__ void helper(float* y) {}\n" + v1 + "```\n```plan\nlaunch softmax_v3 grid(1) block(1) smem(0) args()\n```\n");
  // Fences and quotes in awkward places; a NUL byte.
  c.push_back(string("```cpp\nconst char* s = \"```\";\n// ```plan\n") + v1 + "```\n```plan\n" + plan + "```\n" +
              string("\0trailing ``` `x` ~~", 20));
  c.push_back("extern \"C\" { __global__ void a(float* x) { x[0] = 1; } }\nextern \"C\" __global__ void b(int* p);\n");
  return c;
}

const std::string_view dictionary[] = {
    "```", "~~~", "````", "```cuda\n", "```plan\n", "```cu", "~~~c++\n", "```python\n", "\n```\n", "\n",
    "\r\n", "\"", "'", "R\"x(", ")x\"", "//", "/*", "*/", "{", "}", "(", ")", ";", "\\", "`", std::string_view("\0", 1),
    "extern \"C\" __global__ void k(float* x) {", "extern \"C\" {", "__global__", "__launch_bounds__(128)",
    "launch k grid(1) block(1) smem(0) args(x)\n", "launch softmax ", "Actually, let me fix this.\n",
    "Let's ", "extern", "\"C\"", "void ", "k(",
};

class mutator {
 public:
  explicit mutator(std::uint64_t seed) : m_(seed) {}

  std::string mutate(std::string s, const std::vector<std::string>& pool) {
    const int rounds = 1 + static_cast<int>(m_.below(4));
    for (int r = 0; r < rounds; ++r) {
      const std::size_t which = m_.below(fuzz::byte_mutator::generic_edits + 2);
      if (which < fuzz::byte_mutator::generic_edits) {
        m_.generic(s, which, dictionary, pool[m_.below(pool.size())]);
      } else if (which == fuzz::byte_mutator::generic_edits) {  // swap line ends in a region
        const std::size_t at = m_.below(s.size() + 1);
        for (std::size_t i = s.find('\n', at); i != std::string::npos && i < at + 512; i = s.find('\n', i + 2))
          s.insert(i, "\r");
      } else if (!s.empty() && s.size() < 16'384) {  // repeat a region (long inputs, many blocks)
        const std::size_t at = m_.below(s.size());
        const std::string piece = s.substr(at, m_.below(512) + 1);
        std::string rep;
        for (std::size_t k = m_.below(64) + 2; k > 0; --k) rep += piece;
        s.insert(at, rep);
      }
    }
    if (s.size() > 256 * 1024) s.resize(256 * 1024);
    return s;
  }

 private:
  fuzz::byte_mutator m_;
};

}  // namespace

int main(int argc, char** argv) {
  const auto options = fuzz::parse_driver_options(argc, argv, {}, "FILE");
  if (!options) return 2;
  const auto [seconds, given_iterations, seed, extra, files] = *options;
  const std::uint64_t iterations = seconds <= 0 && given_iterations == 0 ? 10'000 : given_iterations;

  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "extract_fuzz: cannot read %s\n", f.c_str());
      return 2;
    }
    const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    check_one(data);
  }

  auto pool = seed_corpus();
  for (const auto& s : pool) check_one(s);

  mutator m(seed);
  const auto t0 = std::chrono::steady_clock::now();
  const auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  std::uint64_t n = 0, candidates = 0;
  const std::size_t corpus_size = pool.size();
  while ((iterations == 0 || n < iterations) && (seconds <= 0 || elapsed() < seconds)) {
    const std::string input = m.mutate(pool[n % pool.size()], pool);
    check_one(input);
    if (extract_candidate(input)) ++candidates;
    // Keep a few recent mutants so mutations compound; the seeds always stay.
    if (pool.size() < corpus_size + 32) pool.push_back(input);
    else pool[corpus_size + n % 32] = input;
    ++n;
  }
  std::printf("extract_fuzz: %llu inputs in %.2f s (seed %llu), %llu with a candidate, all invariants held\n",
              static_cast<unsigned long long>(n), elapsed(), static_cast<unsigned long long>(seed),
              static_cast<unsigned long long>(candidates));
  return 0;
}

#endif  // SPECGEN_LIBFUZZER
