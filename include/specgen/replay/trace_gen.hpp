#pragma once
/// The procedural trace generator: a corpus of tasks, reasoning traces and a
/// cost table, with statistics calibrated on published measurements (docs/replay-model.md,
/// "Calibration"), for scale tests and as the default
/// corpus of the examples. Deterministic in the seed.
///
/// @code
///   auto c = specgen::replay::generate_corpus({.tasks = 4, .rounds = 5, .lanes = 1}, /*seed=*/7);
///   specgen::replay::write_corpus(c, "corpus");          // tasks/, traces/, cost_table.json
///   specgen::replay::replay_model model(loop, c.traces);
/// @endcode
#include <specgen/cost_table.hpp>
#include <specgen/detail/config.hpp>
#include <specgen/task_io.hpp>
#include <specgen/expected.hpp>
#include <specgen/policy/fields.hpp>
#include <specgen/replay/trace.hpp>
#include <specgen/task.hpp>
#include <specgen/types.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <climits>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace replay {

// ---- the cost table (shared contract with the simulated device) ------------------

// ---- the generator -----------------------------------------------------------------

/// The generator's statistics. Ranges from published measurements (docs/replay-model.md, "Calibration") are marked so; the rest is chosen.
struct corpus_params {
  int tasks = 6;
  int rounds = 10;
  int lanes = 2;
  /// Kernel families to draw tasks from, cycling: vector_add, gelu, softmax,
  /// row_sum, matmul, transpose. Empty: all of them.
  std::vector<std::string> families{};
  /// Published: reasoning of 4K-32K tokens.
  std::uint64_t min_reasoning_tokens = 4000;
  std::uint64_t max_reasoning_tokens = 32000;
  /// Published: think-then-write traces reason over 11K tokens without fences.
  std::uint64_t think_then_write_min_tokens = 11000;
  /// Share of draft-early traces. Chosen: both styles equally.
  double draft_early_share = 0.5;
  /// Published: a complete kernel first appears at 6-32% of a draft-early trace, median 12%.
  double first_kernel_min = 0.06;
  double first_kernel_median = 0.12;
  double first_kernel_max = 0.32;
  /// Published: 58-79% of draft-early reasoning is inside code fences.
  double fenced_share_min = 0.58;
  double fenced_share_max = 0.79;
  /// Published: a kernel better than the history's mean first becomes
  /// extractable at 14-70% of a trace. The history here is every valid final
  /// answer of the task's earlier rounds (all lanes); speedup 1.0 when empty.
  double good_kernel_min = 0.14;
  double good_kernel_max = 0.70;
  /// Probability that a kernel forked at the very start / very end of the
  /// reasoning fails validation, and that a final answer fails. Chosen so that
  /// about 60% of all candidates fail (the SpecGen paper).
  double fail_early = 0.95;
  double fail_late = 0.52;
  double final_fail = 0.50;
  /// Fork points per trace (at most) and answers recorded per fork point. Chosen.
  int fork_points = 16;
  int samples_per_fork = 4;
  /// Speedup over the baseline of the first round's final answer, and the
  /// ceiling the rounds approach (the paper's final kernels: 3.5-5.8x
  /// geometric mean over PyTorch). Chosen ranges, drawn per task.
  double speedup_start_min = 0.7;
  double speedup_start_max = 1.3;
  double speedup_cap_min = 2.0;
  double speedup_cap_max = 7.0;
  /// Rounds to cover 1 - 1/e of the way from start to ceiling. Chosen.
  double rounds_to_converge = 8.0;
  /// Evaluation cost of a correct kernel: validation on every shape and seed,
  /// and the profiler's metric passes (the paper profiles with Nsight Compute,
  /// whose replay passes take seconds per kernel). Chosen so that evaluation
  /// is roughly 5-20% of a sequential iteration, as the SpecGen paper's "generation is
  /// 70-99% of each iteration" implies; the H200 calibration replaces them.
  double validate_s_min = 0.5;
  double validate_s_max = 3.0;
  double profile_s_min = 4.0;
  double profile_s_max = 16.0;

  /// The most traces (tasks x rounds x lanes) a corpus may hold: each is a
  /// few kilobytes in memory, and the generator makes them all at once.
  static constexpr std::int64_t max_traces = 100'000;

  template <class Self, class F>
  static void fields(Self& s, F&& f) {
    using specgen::detail::in;
    constexpr auto share = in(0.0, 1.0);
    constexpr auto tokens = in<std::uint64_t>(1000, limits::max_tokens);
    constexpr auto speedup = in(0.01, limits::max_speedup);
    constexpr auto job_s = in(0.0, 3600.0);
    f("tasks", s.tasks, in(1, 10'000));
    f("rounds", s.rounds, in(1, limits::max_rounds));
    f("lanes", s.lanes, in(1, limits::max_lanes));
    f("families", s.families);
    f("min_reasoning_tokens", s.min_reasoning_tokens, tokens);
    f("max_reasoning_tokens", s.max_reasoning_tokens, tokens);
    f("think_then_write_min_tokens", s.think_then_write_min_tokens, tokens);
    f("draft_early_share", s.draft_early_share, share);
    f("first_kernel_min", s.first_kernel_min, share);
    f("first_kernel_median", s.first_kernel_median, share);
    f("first_kernel_max", s.first_kernel_max, share);
    f("fenced_share_min", s.fenced_share_min, share);
    f("fenced_share_max", s.fenced_share_max, share);
    f("good_kernel_min", s.good_kernel_min, share);
    f("good_kernel_max", s.good_kernel_max, share);
    f("fail_early", s.fail_early, share);
    f("fail_late", s.fail_late, share);
    f("final_fail", s.final_fail, share);
    f("fork_points", s.fork_points, in(3, 256));
    f("samples_per_fork", s.samples_per_fork, in(1, limits::max_fork_samples));
    f("speedup_start_min", s.speedup_start_min, speedup);
    f("speedup_start_max", s.speedup_start_max, speedup);
    f("speedup_cap_min", s.speedup_cap_min, speedup);
    f("speedup_cap_max", s.speedup_cap_max, speedup);
    f("rounds_to_converge", s.rounds_to_converge, in(0.1, 10'000.0));
    f("validate_s_min", s.validate_s_min, job_s);
    f("validate_s_max", s.validate_s_max, job_s);
    f("profile_s_min", s.profile_s_min, job_s);
    f("profile_s_max", s.profile_s_max, job_s);
  }
  [[nodiscard]] std::string invalid() const {
    if (static_cast<double>(max_reasoning_tokens) < 1.2 * static_cast<double>(min_reasoning_tokens) ||
        static_cast<double>(max_reasoning_tokens) < 1.2 * static_cast<double>(think_then_write_min_tokens))
      return "max_reasoning_tokens must be at least 1.2 x min_reasoning_tokens and 1.2 x think_then_write_min_tokens";
    if (const auto traces = std::int64_t{tasks} * rounds * lanes; traces > max_traces)
      return fmt::format("tasks x rounds x lanes = {} traces; at most {}: use fewer tasks, rounds or lanes", traces,
                         max_traces);
    return {};
  }
  friend bool operator==(const corpus_params&, const corpus_params&) = default;
  friend void to_json(nlohmann::json& j, const corpus_params& p) { j = specgen::detail::write_fields(p); }
  /// For `json.get<corpus_params>()`: missing keys keep their defaults; an
  /// unknown key or a value out of range throws `detail::json_read_error`,
  /// naming the value's JSON pointer.
  friend void from_json(const nlohmann::json& j, corpus_params& p) {
    auto r = specgen::detail::read_fields<corpus_params>(j, "");
    if (!r) throw specgen::detail::json_read_error(r.error());
    p = std::move(*r);
  }
};

/// Tasks, their traces, and the cost of every kernel appearing in any trace.
struct corpus {
  std::vector<task> tasks{};
  std::vector<trace> traces{};
  cost_table costs{};
};

namespace detail {

/// Replace each `$X` placeholder (one letter) by its value.
inline std::string substitute(std::string_view tmpl, const std::map<char, std::string>& values) {
  std::string out{};
  out.reserve(tmpl.size() + 64);
  std::size_t at = 0;
  for (std::size_t d = tmpl.find('$'); d != std::string_view::npos; d = tmpl.find('$', at)) {
    out.append(tmpl.substr(at, d - at));
    auto it = d + 1 < tmpl.size() ? values.find(tmpl[d + 1]) : values.end();
    if (it != values.end()) {
      out += it->second;
      at = d + 2;
    } else {
      out += '$';
      at = d + 1;
    }
  }
  out.append(tmpl.substr(std::min(at, tmpl.size())));
  return out;
}

/// One kernel family: a task shape and a kernel template with knobs
/// $B (threads per block), $I (items per thread), $T (tile edge), $L (label comment).
struct kernel_family {
  std::string_view name;
  std::string_view description;
  std::vector<std::string> symbols{};
  shape_binding benchmark{};
  std::vector<shape_binding> validation{};
  std::vector<tensor_spec> inputs{};
  std::vector<tensor_spec> outputs{};
  std::string_view kernel;
  std::string_view plan;
  std::string_view reference;  ///< naive kernel (the task's reference and baseline)
  std::string_view reference_plan;
  double baseline_us;          ///< typical baseline median on an H200 at the benchmark shape (chosen)
};

inline tensor_spec input(std::string name, std::vector<std::string> shape) {
  return {.name = std::move(name), .type = dtype::f32, .shape = std::move(shape), .init = distribution::normal, .tol = {}};
}
inline tensor_spec output(std::string name, std::vector<std::string> shape, double tol) {
  return {.name = std::move(name), .type = dtype::f32, .shape = std::move(shape), .init = distribution::normal,
          .tol = {.abs = tol, .rel = tol}};
}

inline const std::vector<kernel_family>& families() {
  static const std::vector<kernel_family> all{
      {"vector_add",
       "Element-wise sum of two float32 vectors: y[i] = a[i] + b[i] for i < N.",
       {"N"}, {{"N", 1 << 24}}, {{{"N", 1000}}, {{"N", 4097}}},
       {input("a", {"N"}), input("b", {"N"})}, {output("y", {"N"}, 1e-6)},
       R"(// $L
extern "C" __global__ void vector_add(const float* __restrict__ a, const float* __restrict__ b,
                                      float* __restrict__ y, int N) {
  int base = blockIdx.x * ($B * $I) + threadIdx.x;
#pragma unroll
  for (int k = 0; k < $I; ++k) {
    int i = base + k * $B;
    if (i < N) y[i] = a[i] + b[i];
  }
}
)",
       "launch vector_add grid(cdiv(N,$B*$I)) block($B) args(a, b, y, N)",
       R"(extern "C" __global__ void vector_add_ref(const float* a, const float* b, float* y, int N) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < N) y[i] = a[i] + b[i];
}
)",
       "launch vector_add_ref grid(cdiv(N,256)) block(256) args(a, b, y, N)", 75.0},
      {"gelu",
       "GELU activation (tanh approximation) of a float32 vector: y = 0.5 x (1 + tanh(0.79788456 (x + 0.044715 x^3))).",
       {"N"}, {{"N", 1 << 24}}, {{{"N", 1000}}, {{"N", 65537}}},
       {input("x", {"N"})}, {output("y", {"N"}, 1e-5)},
       R"(// $L
extern "C" __global__ void gelu(const float* __restrict__ x, float* __restrict__ y, int N) {
  int base = blockIdx.x * ($B * $I) + threadIdx.x;
#pragma unroll
  for (int k = 0; k < $I; ++k) {
    int i = base + k * $B;
    if (i < N) {
      float v = x[i];
      float u = 0.7978845608f * (v + 0.044715f * v * v * v);
      y[i] = 0.5f * v * (1.0f + tanhf(u));
    }
  }
}
)",
       "launch gelu grid(cdiv(N,$B*$I)) block($B) args(x, y, N)",
       R"(extern "C" __global__ void gelu_ref(const float* x, float* y, int N) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < N) { float v = x[i]; y[i] = 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v))); }
}
)",
       "launch gelu_ref grid(cdiv(N,256)) block(256) args(x, y, N)", 55.0},
      {"softmax",
       "Row-wise softmax of a float32 matrix x[M, N]: y[r, j] = exp(x[r, j] - max_r) / sum_k exp(x[r, k] - max_r).",
       {"M", "N"}, {{"M", 4096}, {"N", 4096}}, {{{"M", 7}, {"N", 1000}}, {{"M", 64}, {"N", 33}}},
       {input("x", {"M", "N"})}, {output("y", {"M", "N"}, 1e-5)},
       R"(// $L
extern "C" __global__ void softmax_rows(const float* __restrict__ x, float* __restrict__ y, int M, int N) {
  int row = blockIdx.x * ($B / 32) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (row >= M) return;
  const float* r = x + (long long)row * N;
  float m = -INFINITY, s = 0.f;
  for (int j = lane; j < N; j += 32) {
    float v = r[j], m2 = fmaxf(m, v);
    s = s * __expf(m - m2) + __expf(v - m2);
    m = m2;
  }
  for (int o = 16; o > 0; o >>= 1) {
    float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
    float mm = fmaxf(m, m2);
    s = s * __expf(m - mm) + s2 * __expf(m2 - mm);
    m = mm;
  }
  for (int j = lane; j < N; j += 32) y[(long long)row * N + j] = __expf(r[j] - m) / s;
}
)",
       "launch softmax_rows grid(cdiv(M,$B/32)) block($B) args(x, y, M, N)",
       R"(extern "C" __global__ void softmax_ref(const float* x, float* y, int M, int N) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= M) return;
  float m = -INFINITY, s = 0.f;
  for (int j = 0; j < N; ++j) m = fmaxf(m, x[(long long)r * N + j]);
  for (int j = 0; j < N; ++j) s += expf(x[(long long)r * N + j] - m);
  for (int j = 0; j < N; ++j) y[(long long)r * N + j] = expf(x[(long long)r * N + j] - m) / s;
}
)",
       "launch softmax_ref grid(cdiv(M,128)) block(128) args(x, y, M, N)", 95.0},
      {"row_sum",
       "Sum of each row of a float32 matrix x[M, N]: y[r] = sum_j x[r, j].",
       {"M", "N"}, {{"M", 8192}, {"N", 4096}}, {{{"M", 5}, {"N", 1000}}, {{"M", 100}, {"N", 31}}},
       {input("x", {"M", "N"})}, {output("y", {"M"}, 1e-4)},
       R"(// $L
extern "C" __global__ void row_sum(const float* __restrict__ x, float* __restrict__ y, int M, int N) {
  int row = blockIdx.x * ($B / 32) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (row >= M) return;
  const float* r = x + (long long)row * N;
  float acc[$I] = {};
  for (int j = lane; j < N; j += 32 * $I) {
#pragma unroll
    for (int k = 0; k < $I; ++k)
      if (j + 32 * k < N) acc[k] += r[j + 32 * k];
  }
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < $I; ++k) s += acc[k];
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (lane == 0) y[row] = s;
}
)",
       "launch row_sum grid(cdiv(M,$B/32)) block($B) args(x, y, M, N)",
       R"(extern "C" __global__ void row_sum_ref(const float* x, float* y, int M, int N) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= M) return;
  float s = 0.f;
  for (int j = 0; j < N; ++j) s += x[(long long)r * N + j];
  y[r] = s;
}
)",
       "launch row_sum_ref grid(cdiv(M,128)) block(128) args(x, y, M, N)", 40.0},
      {"matmul",
       "Matrix product of float32 matrices: C[M, N] = A[M, K] * B[K, N].",
       {"M", "N", "K"}, {{"M", 2048}, {"N", 2048}, {"K", 2048}},
       {{{"M", 33}, {"N", 65}, {"K", 17}}, {{"M", 128}, {"N", 128}, {"K", 256}}},
       {input("A", {"M", "K"}), input("B", {"K", "N"})}, {output("C", {"M", "N"}, 1e-3)},
       R"(// $L
extern "C" __global__ void matmul_tiled(const float* __restrict__ A, const float* __restrict__ B,
                                        float* __restrict__ C, int M, int N, int K) {
  __shared__ float As[$T][$T + 1], Bs[$T][$T + 1];
  int r = blockIdx.y * $T + threadIdx.y, c = blockIdx.x * $T + threadIdx.x;
  float acc = 0.f;
  for (int k0 = 0; k0 < K; k0 += $T) {
    As[threadIdx.y][threadIdx.x] = (r < M && k0 + threadIdx.x < K) ? A[(long long)r * K + k0 + threadIdx.x] : 0.f;
    Bs[threadIdx.y][threadIdx.x] = (c < N && k0 + threadIdx.y < K) ? B[(long long)(k0 + threadIdx.y) * N + c] : 0.f;
    __syncthreads();
#pragma unroll $I
    for (int k = 0; k < $T; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
    __syncthreads();
  }
  if (r < M && c < N) C[(long long)r * N + c] = acc;
}
)",
       "launch matmul_tiled grid(cdiv(N,$T), cdiv(M,$T)) block($T, $T) args(A, B, C, M, N, K)",
       R"(extern "C" __global__ void matmul_ref(const float* A, const float* B, float* C, int M, int N, int K) {
  int r = blockIdx.y * blockDim.y + threadIdx.y, c = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= M || c >= N) return;
  float acc = 0.f;
  for (int k = 0; k < K; ++k) acc += A[(long long)r * K + k] * B[(long long)k * N + c];
  C[(long long)r * N + c] = acc;
}
)",
       "launch matmul_ref grid(cdiv(N,16), cdiv(M,16)) block(16, 16) args(A, B, C, M, N, K)", 900.0},
      {"transpose",
       "Transpose of a float32 matrix: y[j, i] = x[i, j] for x[M, N], y[N, M].",
       {"M", "N"}, {{"M", 8192}, {"N", 8192}}, {{{"M", 33}, {"N", 70}}, {{"M", 256}, {"N", 1}}},
       {input("x", {"M", "N"})}, {output("y", {"N", "M"}, 0.0)},
       R"(// $L
extern "C" __global__ void transpose_tiled(const float* __restrict__ x, float* __restrict__ y, int M, int N) {
  __shared__ float tile[$T][$T + 1];
  int c = blockIdx.x * $T + threadIdx.x, r0 = blockIdx.y * $T;
  for (int i = threadIdx.y; i < $T; i += $T / $I)
    if (r0 + i < M && c < N) tile[i][threadIdx.x] = x[(long long)(r0 + i) * N + c];
  __syncthreads();
  int oc = r0 + threadIdx.x, or0 = blockIdx.x * $T;
  for (int i = threadIdx.y; i < $T; i += $T / $I)
    if (or0 + i < N && oc < M) y[(long long)(or0 + i) * M + oc] = tile[threadIdx.x][i];
}
)",
       "launch transpose_tiled grid(cdiv(N,$T), cdiv(M,$T)) block($T, $T/$I) args(x, y, M, N)",
       R"(extern "C" __global__ void transpose_ref(const float* x, float* y, int M, int N) {
  int r = blockIdx.y * blockDim.y + threadIdx.y, c = blockIdx.x * blockDim.x + threadIdx.x;
  if (r < M && c < N) y[(long long)c * M + r] = x[(long long)r * N + c];
}
)",
       "launch transpose_ref grid(cdiv(N,16), cdiv(M,16)) block(16, 16) args(x, y, M, N)", 60.0},
  };
  return all;
}

/// The knobs of one kernel version.
struct kernel_knobs {
  int block = 256;
  int items = 4;
  int tile = 32;
  friend bool operator==(const kernel_knobs&, const kernel_knobs&) = default;
};

inline kernel_knobs random_knobs(rng& r) {
  static constexpr std::array<int, 4> blocks{128, 256, 512, 1024};
  static constexpr std::array<int, 3> items{1, 2, 4};
  static constexpr std::array<int, 2> tiles{16, 32};
  return {r.pick(blocks), r.pick(items), r.pick(tiles)};
}

/// A small revision of `k`: one knob changes (drafts are rewritten, not replaced).
inline kernel_knobs revise(kernel_knobs k, rng& r) {
  kernel_knobs n = random_knobs(r);
  switch (r.below(3)) {
    case 0: k.block = n.block; break;
    case 1: k.items = n.items; break;
    default: k.tile = n.tile; break;
  }
  return k;
}

struct compile_bug {
  std::string_view line;
  std::string_view message;
};
inline constexpr std::array<compile_bug, 3> compile_bugs{{
    {"  float t = tile_acc[threadIdx.x];", "error: identifier \"tile_acc\" is undefined"},
    {"  (void)warp_reduce_sum(0.f);", "error: identifier \"warp_reduce_sum\" is undefined"},
    {"  int lane_id = threadIdx.x & 31", "error: expected a \";\""},
}};

struct rendered_kernel {
  std::string source{};
  std::string plan{};
};

/// The source and plan of one kernel version; a compile bug is inserted as
/// the line before the closing brace. Returns the bug's line number too.
inline rendered_kernel render(const kernel_family& f, const std::string& label, const kernel_knobs& k,
                              const compile_bug* bug, int* bug_line = nullptr) {
  const std::map<char, std::string> values{{'B', std::to_string(k.block)},
                                           {'I', std::to_string(k.items)},
                                           {'T', std::to_string(k.tile)},
                                           {'L', fmt::format("{}: block {}, {} per thread, tile {}", label, k.block,
                                                             k.items, k.tile)}};
  rendered_kernel out{substitute(f.kernel, values), substitute(f.plan, values)};
  if (bug) {
    const std::size_t close = out.source.rfind("\n}");
    out.source.insert(close + 1, std::string(bug->line) + "\n");
    if (bug_line) *bug_line = static_cast<int>(std::count(out.source.begin(), out.source.begin() + static_cast<std::ptrdiff_t>(close) + 1, '\n')) + 1;
  }
  return out;
}

inline std::string fenced(const rendered_kernel& k) {
  return fmt::format("```cuda\n{}```\n\n```plan\n{}\n```\n", k.source, k.plan);
}

// Revision markers are followed by a fence within a few dozen characters
// (published measurements), so each ends the line right before the fence.
inline constexpr std::array<std::string_view, 6> revision_markers{
    "Actually, a different block size is better here:\n",
    "Actually, the loads can be organised better:\n",
    "Let me fix the bounds check:\n",
    "Let me fix the indexing for the last block:\n",
    "Actually, fewer synchronisations suffice:\n",
    "Let me fix the accumulation order:\n",
};

inline constexpr std::array<std::string_view, 8> filler_topics{
    "the memory access pattern",      "considering memory coalescing", "the occupancy trade-off",
    "numerical accuracy",             "the boundary conditions",       "the previous round's feedback",
    "the arithmetic intensity",       "how the reference computes it",
};

/// Design decisions and implementation hints, the only fork points of a
/// think-then-write trace (the SpecGen paper: the triggers that carry speculation there).
inline constexpr std::array<std::string_view, 10> decision_templates{
    "I'll use a tiled approach with $Tx$T tiles, so each block computes one output tile.",
    "Each block handles one row, and each thread computes $I elements with a stride of the block size.",
    "The kernel will load the tile into shared memory, synchronize, and then accumulate from shared memory.",
    "Let's go with $B threads per block; that keeps occupancy high without too many registers.",
    "We'll use warp-level shuffles for the reduction instead of shared memory atomics.",
    "The plan is: read each input element exactly once, keep partial results in registers, and write the output once.",
    "Vectorized loads of float4 would cut the number of memory instructions by four.",
    "Now the kernel structure is clear: a bounds check first, then the main loop with `acc += v`, then one store.",
    "I'll use $B threads and $I items per thread, so a block covers $B*$I elements.",
    "The code would keep the running maximum and the running sum together, so one pass over the data suffices.",
};

/// Appends segments while tracking the token position.
struct trace_builder {
  trace t;
  std::uint64_t tokens = 0;
  void literal(std::string text) {
    const std::uint64_t n = estimate_tokens(text);
    t.segments.push_back({.text = std::move(text), .tokens = n, .filler = false, .topic = ""});
    tokens += n;
  }
  void filler(std::uint64_t n, rng& r) {
    if (n == 0) return;
    t.segments.push_back({.text = "", .tokens = n, .filler = true, .topic = std::string(r.pick(filler_topics))});
    tokens += n;
  }
};

/// Log-uniform draw in [lo, hi].
inline double log_uniform(rng& r, double lo, double hi) { return std::exp(r.uniform(std::log(lo), std::log(hi))); }

/// Draw the first-kernel position: log-normal around the median, clamped to the range.
inline double first_kernel_position(rng& r, const corpus_params& p) {
  // Box-Muller from two uniforms; sigma 0.45 spreads 6-32% around a 12% median.
  const double u1 = std::max(r.uniform(), 1e-12), u2 = r.uniform();
  const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  // A margin inside the range: the final total differs slightly from the target.
  return std::clamp(p.first_kernel_median * std::exp(0.45 * z), p.first_kernel_min * 1.1, p.first_kernel_max * 0.92);
}

/// A kernel that appears in a trace, before its outcome is drawn.
struct kernel_slot {
  std::string label{};
  kernel_knobs knobs;
  double x = 0;                 ///< position in the reasoning (0..1); 1 for the final answer
  std::size_t segment = SIZE_MAX;  ///< the draft's code segment (draft-early), else SIZE_MAX
  bool forced_good = false;     ///< valid and better than the history's mean
  bool keep_below = false;      ///< if valid, no better than the history's mean
  bool final_answer = false;
};

/// What a kernel turns out to be.
struct outcome {
  verdict_kind verdict = verdict_kind::ok;
  double speedup = 0;
  rendered_kernel kernel;
};

inline std::string code_block(const rendered_kernel& k) { return fmt::format("```cuda\n{}```\n\n", k.source); }

class corpus_generator {
 public:
  corpus_generator(const corpus_params& p, std::uint64_t seed) : p_(p), r_(splitmix64(seed ^ 0x5eed5eed5eedull)) {}

  corpus run() {
    specgen::detail::require_valid(p_, "corpus_params");
    std::vector<const kernel_family*> fams;
    for (const auto& name : p_.families) {
      auto it = std::find_if(families().begin(), families().end(), [&](const auto& f) { return f.name == name; });
      if (it == families().end()) throw std::invalid_argument(fmt::format("corpus_params: unknown family \"{}\"", name));
      fams.push_back(&*it);
    }
    if (fams.empty())
      for (const auto& f : families()) fams.push_back(&f);
    for (int i = 0; i < p_.tasks; ++i) make_task(*fams[static_cast<std::size_t>(i) % fams.size()], i);
    return std::move(out_);
  }

 private:
  /// Per-trace constants the outcomes depend on.
  struct trace_state {
    const kernel_family* family = nullptr;
    std::string task;
    double threshold = 1.0;     ///< the history's mean speedup
    double final_speedup = 0;   ///< the final answer's speedup when valid (the round's best)
    double good_at = 0;         ///< where a better-than-history kernel first becomes extractable
    double baseline_us = 0;
  };

  void make_task(const kernel_family& f, int index) {
    task t;
    t.name = fmt::format("gen_{}_{:02}", f.name, index);
    t.description = std::string(f.description);
    t.symbols = f.symbols;
    t.benchmark_shape = f.benchmark;
    t.validation_shapes = f.validation;
    t.inputs = f.inputs;
    t.outputs = f.outputs;
    t.reference = {.source = std::string(f.reference), .plan = std::string(f.reference_plan), .host = ""};
    t.baseline = t.reference;
    out_.tasks.push_back(t);

    const double baseline_us = f.baseline_us * r_.uniform(0.8, 1.25);
    const double start = r_.uniform(p_.speedup_start_min, p_.speedup_start_max);
    const double cap = r_.uniform(p_.speedup_cap_min, p_.speedup_cap_max);
    std::vector<double> history;  // valid final answers of earlier rounds
    for (int round = 0; round < p_.rounds; ++round) {
      double threshold = 1.0;
      if (!history.empty()) {
        threshold = 0;
        for (double s : history) threshold += s;
        threshold /= static_cast<double>(history.size());
      }
      std::vector<double> finals;
      for (int lane = 0; lane < p_.lanes; ++lane) {
        const double progress = 1.0 - std::exp(-(round + 1) / p_.rounds_to_converge);
        const double target = (start + (cap - start) * progress) * r_.uniform(0.85, 1.1);
        trace_state st{&f, t.name, threshold, std::max(target, threshold * 1.08),
                       r_.uniform(p_.good_kernel_min + 0.01, p_.good_kernel_max - 0.08), baseline_us};
        if (auto s = make_trace(st, round, lane)) finals.push_back(*s);
      }
      history.insert(history.end(), finals.begin(), finals.end());
    }
  }

  /// Builds one trace; returns its final answer's speedup when valid.
  std::optional<double> make_trace(const trace_state& st, int round, int lane) {
    const kernel_family& f = *st.family;
    trace_builder b;
    b.t.task = st.task;
    b.t.round = round;
    b.t.lane = lane;
    b.t.id = default_trace_id(b.t);
    const bool draft_early = r_.chance(p_.draft_early_share);
    b.t.style = draft_early ? trace_style::draft_early : trace_style::think_then_write;
    const std::string prefix = fmt::format("{}.r{}.l{}", st.task, round, lane);
    kernel_knobs knobs = random_knobs(r_);

    b.literal(fmt::format("The task: {} The benchmark shape is {}. I need a kernel that is correct on every "
                          "validation shape and faster than the baseline.\n\n",
                          f.description, specgen::detail::binding_text(f.benchmark)));

    std::vector<kernel_slot> slots;       // drafts (draft-early) or decision points (think-then-write)
    std::vector<std::uint64_t> slot_end;  // reasoning tokens up to the end of the slot's segment
    std::size_t good = SIZE_MAX;          // first slot where a better-than-history kernel is extractable
    if (draft_early) {
      const auto total = static_cast<std::uint64_t>(log_uniform(
          r_, static_cast<double>(p_.min_reasoning_tokens) * 1.08, static_cast<double>(p_.max_reasoning_tokens) * 0.95));
      const double first = first_kernel_position(r_, p_);
      const double share = r_.uniform(p_.fenced_share_min + 0.02, p_.fenced_share_max - 0.02);
      const std::uint64_t code = estimate_tokens(code_block(render(f, prefix, knobs, nullptr)));
      // The reasoning before the first kernel is prose; from the first kernel on,
      // code takes the share that makes the whole trace's share come out right.
      const double prose = first * static_cast<double>(total) - static_cast<double>(code);
      const double in_cycle = std::min(0.92, share * static_cast<double>(total) / (static_cast<double>(total) - prose));
      auto draft = [&](std::string marker) {
        const std::string label = fmt::format("{}.d{}", prefix, slots.size());
        b.literal(std::move(marker));
        b.literal(code_block(render(f, label, knobs, nullptr)));  // re-rendered once its outcome is known
        slots.push_back({label, knobs, 0, b.t.segments.size() - 1, false, false, false});
        slot_end.push_back(b.tokens);
      };
      const std::string opener = "Here is a first version:\n";
      const auto first_end = static_cast<std::uint64_t>(first * static_cast<double>(total));
      const std::uint64_t before = b.tokens + code + estimate_tokens(opener);
      b.filler(first_end > before ? first_end - before : 1, r_);
      draft(opener);
      const std::string closing = "This version is final. Let me write the answer with the launch plan.\n";
      for (;;) {
        knobs = revise(knobs, r_);
        const auto marker = std::string(r_.pick(revision_markers));
        const double gap_total = static_cast<double>(code) * (1.0 - in_cycle) / in_cycle;
        const auto gap = static_cast<std::uint64_t>(std::max(1.0, gap_total - static_cast<double>(estimate_tokens(marker))));
        const bool last = b.tokens + gap + 2 * (code + estimate_tokens(marker)) + estimate_tokens(closing) > total;
        b.filler(gap, r_);
        draft(last ? std::string("Let me finalize it:\n") : marker);
        if (last) break;
      }
      b.literal(closing);
      for (std::size_t i = 0; i < slots.size() && good == SIZE_MAX; ++i)
        if (static_cast<double>(slot_end[i]) / static_cast<double>(b.tokens) >= st.good_at) good = i;
      if (good == SIZE_MAX) good = slots.size() - 1;
    } else {
      const double lo = static_cast<double>(std::max(p_.min_reasoning_tokens, p_.think_then_write_min_tokens)) * 1.08;
      const double hi = std::max(lo, static_cast<double>(p_.max_reasoning_tokens) * 0.95);
      const auto total = static_cast<std::uint64_t>(log_uniform(r_, lo, hi));
      const int n = std::clamp(static_cast<int>(total / 1500), std::min(4, p_.fork_points), p_.fork_points);
      std::vector<double> xs;
      for (int i = 1; i < n; ++i) xs.push_back(r_.uniform(0.05, 0.95));
      xs.push_back(st.good_at);
      std::sort(xs.begin(), xs.end());
      for (std::size_t i = 0; i < xs.size(); ++i) {
        if (i > 0 && r_.chance(0.5)) knobs = revise(knobs, r_);
        const std::map<char, std::string> values{{'B', std::to_string(knobs.block)},
                                                 {'I', std::to_string(knobs.items)},
                                                 {'T', std::to_string(knobs.tile)}};
        std::string text = substitute(r_.pick(decision_templates), values) + "\n\n";
        const auto at = static_cast<std::uint64_t>(xs[i] * static_cast<double>(total));
        const std::uint64_t before = b.tokens + estimate_tokens(text);
        b.filler(at > before ? at - before : 1, r_);
        b.literal(std::move(text));
        if (xs[i] == st.good_at && good == SIZE_MAX) good = slots.size();
        slots.push_back({fmt::format("{}.f{}", prefix, i), knobs, 0, SIZE_MAX, false, false, false});
        slot_end.push_back(b.tokens);
      }
      b.filler(total > b.tokens + 30 ? total - b.tokens - 30 : 1, r_);
      b.literal("I think the design is complete. Time to write out the kernel and the launch plan.\n");
    }

    for (std::size_t i = 0; i < slots.size(); ++i) {
      slots[i].x = static_cast<double>(slot_end[i]) / static_cast<double>(b.tokens);
      slots[i].keep_below = i < good;
    }

    // Fork points: the first and last slots, the first better-than-history
    // slot, and others spread evenly; at most fork_points of them.
    const std::size_t want = std::min<std::size_t>(static_cast<std::size_t>(p_.fork_points), slots.size());
    std::vector<std::size_t> points{0, good, slots.size() - 1};
    for (std::size_t k = 0; k < want; ++k) points.push_back(k * (slots.size() - 1) / std::max<std::size_t>(want - 1, 1));
    std::sort(points.begin(), points.end());
    points.erase(std::unique(points.begin(), points.end()), points.end());
    while (points.size() > want) {
      auto it = std::find_if(points.begin() + 1, points.end() - 1, [&](std::size_t q) { return q != good; });
      points.erase(it);
    }

    std::vector<bool> is_point(slots.size(), false);
    for (std::size_t i : points) is_point[i] = true;
    for (std::size_t i = 0; i < slots.size(); ++i) {
      // A draft's fork answers with the draft itself (sample 0) and revisions of it.
      const int samples = is_point[i] ? p_.samples_per_fork : 0;
      fork_point fp{slot_end[i], {}};
      for (int s = 0; s < std::max(samples, draft_early ? 1 : 0); ++s) {
        kernel_slot k = slots[i];
        if (!draft_early || s > 0) {
          k.label = fmt::format("{}.s{}", k.label, s);
          if (s > 0) k.knobs = revise(k.knobs, r_);
        }
        k.forced_good = is_point[i] && i >= good && s == 0;
        const outcome o = evaluate(st, k);
        if (draft_early && s == 0) b.t.segments[k.segment].text = code_block(o.kernel);
        if (s < samples) {
          std::string text = fmt::format("Based on the reasoning so far, here is the kernel.\n\n{}", fenced(o.kernel));
          const std::uint64_t n = estimate_tokens(text);
          fp.samples.push_back({std::move(text), n});
        }
      }
      if (is_point[i]) b.t.forks.push_back(std::move(fp));
    }

    kernel_slot fin{fmt::format("{}.final", prefix), knobs, 1.0, SIZE_MAX, false, false, true};
    const outcome o = evaluate(st, fin);
    b.t.answer.text = "Here is the final kernel and its launch plan.\n\n" + fenced(o.kernel);
    b.t.answer.tokens = estimate_tokens(b.t.answer.text);
    out_.traces.push_back(std::move(b.t));
    if (o.verdict == verdict_kind::ok) return o.speedup;
    return std::nullopt;
  }

  /// Draw a kernel's verdict and speedup, render it, and add it to the cost table.
  outcome evaluate(const trace_state& st, const kernel_slot& k) {
    const kernel_family& f = *st.family;
    outcome o;
    const double fail = k.final_answer ? p_.final_fail : p_.fail_early + (p_.fail_late - p_.fail_early) * k.x;
    if (!k.forced_good && r_.chance(fail)) {
      const double u = r_.uniform();
      o.verdict = u < 0.45   ? verdict_kind::compile_error
                  : u < 0.8  ? verdict_kind::wrong_result
                  : u < 0.86 ? verdict_kind::invalid_plan
                  : u < 0.94 ? verdict_kind::fault
                  : u < 0.97 ? verdict_kind::unstable
                             : verdict_kind::timeout;
    } else if (k.final_answer) {
      o.speedup = st.final_speedup;
    } else if (k.forced_good) {
      // Above the history's mean, growing with the prefix towards the final answer.
      const double lo = st.threshold * 1.03;
      const double along = std::clamp((k.x - st.good_at) / (1.0 - st.good_at), 0.0, 1.0);
      o.speedup = lo + std::max(0.0, st.final_speedup - lo) * along * r_.uniform(0.5, 1.0);
    } else {
      // Later prefixes give better kernels; none beats the round's final answer.
      o.speedup = st.final_speedup * (0.45 + 0.55 * k.x) * r_.uniform(0.85, 1.0);
      if (k.keep_below) o.speedup = std::min(o.speedup, st.threshold * r_.uniform(0.80, 0.97));
    }

    const compile_bug* bug = o.verdict == verdict_kind::compile_error ? &compile_bugs[r_.below(compile_bugs.size())] : nullptr;
    int bug_line = 0;
    o.kernel = render(f, k.label, k.knobs, bug, &bug_line);

    const std::uint64_t key = source_key(o.kernel.source);
    cost_entry e;
    e.task = st.task;
    e.label = k.label;
    e.verdict = o.verdict;
    e.compile_s = r_.uniform(0.3, 1.5);  // NVRTC on a small kernel; chosen
    e.baseline_us = st.baseline_us;
    e.noise = r_.uniform(0.002, 0.012);
    const std::string out_name = f.outputs.front().name;
    switch (o.verdict) {
      case verdict_kind::ok:
        e.validate_s = r_.uniform(p_.validate_s_min, p_.validate_s_max);
        e.profile_s = r_.uniform(p_.profile_s_min, p_.profile_s_max);
        e.runtime_us = st.baseline_us / o.speedup;
        break;
      case verdict_kind::compile_error:
        e.summary = fmt::format("compilation failed: {}", bug->message);
        e.log = fmt::format("kernel.cu({}): {}\n1 error detected in the compilation of \"kernel.cu\".", bug_line,
                            bug->message);
        break;
      case verdict_kind::wrong_result:
        e.validate_s = r_.uniform(0.05, 0.3);
        e.summary = fmt::format("output {} differs from the reference: max abs error {:.1e} at index {} (shape {})",
                                out_name, std::pow(10.0, r_.uniform(-3.0, 0.5)), r_.below(4096),
                                specgen::detail::binding_text(f.validation.front()));
        break;
      case verdict_kind::invalid_plan:
        e.summary = fmt::format("launch plan: block({0}) has {0} threads per block; the limit is 1024", k.knobs.block * 2);
        break;
      case verdict_kind::fault:
        e.validate_s = r_.uniform(0.5, 2.0);  // includes the worker respawn
        e.summary = "the kernel faulted: an illegal memory access was encountered (CUDA error 700)";
        e.log = fmt::format("illegal address at index {} of '{}'", r_.below(1 << 20), out_name);
        break;
      case verdict_kind::unstable:
        e.validate_s = r_.uniform(0.1, 0.6);
        e.summary = fmt::format("repeated runs disagree (max abs difference {:.1e}): a race condition",
                                std::pow(10.0, r_.uniform(-4.0, -1.0)));
        break;
      case verdict_kind::timeout:
        e.validate_s = 2.0;
        e.summary = "the kernel did not finish within 2.0 s; the worker was restarted";
        break;
      case verdict_kind::suspicious:
      case verdict_kind::input_mutation:  // the generator draws none of these three
      case verdict_kind::out_of_bounds_write:
      case verdict_kind::nonfinite_output:
        break;
    }
    out_.costs.kernels.try_emplace(key, std::move(e));
    return o;
  }

  corpus_params p_;
  rng r_;
  corpus out_;
  std::set<std::uint64_t> keys_;
};

}  // namespace detail

/// Generate a corpus: `p.tasks` tasks, a trace for every round and lane of
/// each, and a cost table entry for every kernel that appears in any trace.
/// Same params and seed, same corpus. Throws std::invalid_argument on params
/// that cannot be met (a programming error).
inline corpus generate_corpus(const corpus_params& p, std::uint64_t seed) {
  return detail::corpus_generator(p, seed).run();
}

// ---- files --------------------------------------------------------------------------

namespace detail {

inline expected<void, error> write_json(const std::filesystem::path& path, const nlohmann::json& j) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return unexpected(specgen::detail::file_error(path.string(), "", "cannot create the file"));
  out << j.dump(1) << '\n';
  if (!out) return unexpected(specgen::detail::file_error(path.string(), "", "write failed"));
  return {};
}

}  // namespace detail

/// Write `c` under `dir`: tasks/<name>.json, traces/<task>.json, cost_table.json.
inline expected<void, error> write_corpus(const corpus& c, const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir / "tasks", ec);
  std::filesystem::create_directories(dir / "traces", ec);
  if (ec) return unexpected(specgen::detail::file_error(dir.string(), "", fmt::format("cannot create the directory: {}", ec.message())));
  for (const auto& t : c.tasks) {
    if (auto r = detail::write_json(dir / "tasks" / (t.name + ".json"), to_json(t)); !r) return r;
    std::vector<trace> mine;
    for (const auto& tr : c.traces)
      if (tr.task == t.name) mine.push_back(tr);
    if (auto r = write_traces(dir / "traces" / (t.name + ".json"), mine); !r) return r;
  }
  return detail::write_json(dir / "cost_table.json", nlohmann::json(c.costs));
}

/// Read what write_corpus wrote: the tasks in file-name order (two files
/// defining one task name are an error naming both), the traces and the cost
/// table, each file checked as its loader checks it. Never throws.
inline expected<corpus, error> load_corpus(const std::filesystem::path& dir) noexcept {
  try {
    corpus c;
    const auto table = dir / "cost_table.json";
    return specgen::detail::json_files_in(dir / "tasks")
        .transform_error([&](const error& e) { return detail::whole_file_error((dir / "tasks").string(), e); })
        .and_then([](const std::vector<std::filesystem::path>& files) { return load_tasks(files); })
        .and_then([&](std::vector<task> tasks) {
          c.tasks = std::move(tasks);
          return load_traces(dir / "traces");
        })
        .and_then([&](std::vector<trace> traces) {
          c.traces = std::move(traces);
          return load_cost_table(table).transform_error(
              [&](const error& e) { return detail::whole_file_error(table.string(), e); });
        })
        .transform([&](cost_table costs) {
          c.costs = std::move(costs);
          return std::move(c);
        });
  } catch (const std::exception& e) {  // bad_alloc, or a bug: still an error value for the caller
    return unexpected(specgen::detail::file_error(dir.string(), "", fmt::format("cannot load the corpus: {}", e.what())));
  }
}

}  // namespace replay
SPECGEN_END_NAMESPACE
