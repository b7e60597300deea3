// specgen-autotune: an autotuner over a parameterised kernel's tuning space.
//
//   specgen-autotune [TASK.json]     (default: the matmul task embedded below)
//
// The kernel is a template whose parameters are `#define`s prepended to its
// source; the launch plan is formatted from the same values. Every point of
// the cross product becomes a `specgen::candidate`, and `evaluate_batch`
// compiles, validates and profiles them all on every visible GPU. Points the
// device cannot launch (too many threads per block, too much shared memory)
// come back `invalid_plan`: no need to filter the space by hand.
#include <specgen/gpu/evaluation.hpp>
#include <specgen/task_io.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>
#include <vector>

using namespace specgen;

namespace {

// The task: C[M, N] = A[M, K] * B[K, N], checked against a naive kernel and
// timed against a 16x16 shared-memory tiling (tasks/examples/matmul.json at
// a smaller benchmark shape).
constexpr const char* task_json = R"json({
  "name": "matmul",
  "description": "C[M, N] = A[M, K] * B[K, N], row-major float32.",
  "symbols": ["M", "N", "K"],
  "benchmark_shape": {"M": 2048, "N": 2048, "K": 2048},
  "validation_shapes": [{"M": 1, "N": 1, "K": 1}, {"M": 37, "N": 61, "K": 129}, {"M": 256, "N": 128, "K": 300}],
  "inputs": [{"name": "A", "dtype": "f32", "shape": ["M", "K"], "init": "signed_uniform"},
             {"name": "B", "dtype": "f32", "shape": ["K", "N"], "init": "signed_uniform"}],
  "outputs": [{"name": "C", "dtype": "f32", "shape": ["M", "N"], "tolerance": {"abs": 1e-3, "rel": 1e-3}}],
  "reference": {"plan": "launch matmul_naive grid(cdiv(N, 16), cdiv(M, 16)) block(16, 16) args(A, B, C, M, N, K)"},
  "baseline": {"plan": "launch matmul_tiled grid(cdiv(N, 16), cdiv(M, 16)) block(16, 16) args(A, B, C, M, N, K)"}
})json";
constexpr const char* task_source = R"cu(
extern "C" __global__ void matmul_naive(const float* A, const float* B, float* C, int m, int n, int k) {
  const int row = blockIdx.y * blockDim.y + threadIdx.y, col = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= m || col >= n) return;
  float acc = 0.f;
  for (int i = 0; i < k; ++i) acc += A[(long long)row * k + i] * B[(long long)i * n + col];
  C[(long long)row * n + col] = acc;
}
extern "C" __global__ void matmul_tiled(const float* A, const float* B, float* C, int m, int n, int k) {
  __shared__ float As[16][16], Bs[16][16];
  const int row = blockIdx.y * 16 + threadIdx.y, col = blockIdx.x * 16 + threadIdx.x;
  float acc = 0.f;
  for (int t = 0; t < k; t += 16) {
    As[threadIdx.y][threadIdx.x] = (row < m && t + threadIdx.x < k) ? A[(long long)row * k + t + threadIdx.x] : 0.f;
    Bs[threadIdx.y][threadIdx.x] = (t + threadIdx.y < k && col < n) ? B[(long long)(t + threadIdx.y) * n + col] : 0.f;
    __syncthreads();
    for (int i = 0; i < 16; ++i) acc += As[threadIdx.y][i] * Bs[i][threadIdx.x];
    __syncthreads();
  }
  if (row < m && col < n) C[(long long)row * n + col] = acc;
}
)cu";

// The template: a TILE x TILE block of C per thread block, each thread
// computing RPT rows of one column (so TILE * TILE / RPT threads per block).
constexpr const char* kernel_template = R"cu(
extern "C" __global__ void matmul_tuned(const float* A, const float* B, float* C, int m, int n, int k) {
  __shared__ float As[TILE][TILE], Bs[TILE][TILE];
  const int col = blockIdx.x * TILE + threadIdx.x, row0 = blockIdx.y * TILE + threadIdx.y * RPT;
  float acc[RPT] = {};
  for (int t = 0; t < k; t += TILE) {
    for (int r = 0; r < RPT; ++r) {
      const int lr = threadIdx.y * RPT + r, ar = blockIdx.y * TILE + lr;
      As[lr][threadIdx.x] = (ar < m && t + threadIdx.x < k) ? A[(long long)ar * k + t + threadIdx.x] : 0.f;
      Bs[lr][threadIdx.x] = (t + lr < k && col < n) ? B[(long long)(t + lr) * n + col] : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < TILE; ++i) {
      const float b = Bs[i][threadIdx.x];
#pragma unroll
      for (int r = 0; r < RPT; ++r) acc[r] += As[threadIdx.y * RPT + r][i] * b;
    }
    __syncthreads();
  }
  for (int r = 0; r < RPT; ++r)
    if (row0 + r < m && col < n) C[(long long)(row0 + r) * n + col] = acc[r];
}
)cu";
constexpr const char* plan_template =
    "launch matmul_tuned grid(cdiv(N, {0}), cdiv(M, {0})) block({0}, {1}) args(A, B, C, M, N, K)";

struct point {
  int tile, rpt;
};

}  // namespace

int main(int argc, char** argv) {
  // 1. The task: a file from the command line, or the embedded one.
  auto embedded = nlohmann::json::parse(task_json);
  embedded["reference"]["source"] = embedded["baseline"]["source"] = task_source;
  auto t = argc > 1 ? load_task(argv[1]) : parse_task(embedded, "<embedded>");
  if (!t || t->name != "matmul") {
    fmt::print(stderr, "specgen-autotune: {}\n", t ? "this template tunes matmul tasks" : t.error().what());
    return 2;
  }

  // 2. The tuning space (TILE x RPT) and one candidate per point.
  std::vector<point> space;
  for (int tile : {16, 32, 64})
    for (int rpt : {1, 2, 4, 8}) space.push_back({tile, rpt});
  std::vector<candidate> candidates;
  for (const auto& p : space)
    candidates.push_back({.id = candidates.size() + 1,
                          .task = t->name,
                          .source = fmt::format("#define TILE {}\n#define RPT {}\n{}", p.tile, p.rpt, kernel_template),
                          .plan = fmt::format(plan_template, p.tile, p.tile / p.rpt)});
  fmt::print("task {}: {} points (TILE in 16,32,64 x RPT in 1,2,4,8)\n", t->name, space.size());
  for (std::size_t i = 0; i < space.size(); ++i)
    fmt::print("  #{:<2} TILE={:<2} RPT={}  {}\n", i + 1, space[i].tile, space[i].rpt, candidates[i].plan);

  // 3. Which GPUs? None: say why and stop (successfully: nothing went wrong).
  auto gpus = gpu::device_count();
  if (!gpus || *gpus == 0) {
    fmt::print("no GPU: {}\n", gpus ? "the driver reports no devices" : gpus.error().message);
    return 0;
  }

  // 4. Evaluate all points on all GPUs; progress arrives as each one finishes.
  fmt::print("evaluating on {} GPU(s)...\n", *gpus);
  auto evals = gpu::evaluate_batch({}, *t, candidates, [&](std::size_t i, const evaluation& e) {
    fmt::print("  done #{:<2} {}\n", i + 1, to_string(e.result.kind));
    std::fflush(stdout);
  });
  if (!evals) {
    fmt::print(stderr, "specgen-autotune: {}\n", evals.error().what());
    return 1;
  }

  // 5. The table and the best point.
  fmt::print("\n{:>4} {:>5} {:>4}  {:<13} {:>10} {:>8}  {}\n", "#", "TILE", "RPT", "verdict", "median us", "speedup",
             "registers/summary");
  std::size_t best = space.size();
  for (std::size_t i = 0; i < space.size(); ++i) {
    const evaluation& e = (*evals)[i];
    const bool ok = e.result.kind == verdict_kind::ok && e.timing;
    fmt::print("{:>4} {:>5} {:>4}  {:<13} {:>10} {:>8}  {}\n", i + 1, space[i].tile, space[i].rpt,
               to_string(e.result.kind), ok ? fmt::format("{:.1f}", e.timing->median_us) : "-",
               ok ? fmt::format("{:.2f}x", e.timing->speedup) : "-",
               ok ? fmt::format("{} regs", e.compile.registers) : e.result.summary);
    if (ok && (best == space.size() || e.timing->median_us < (*evals)[best].timing->median_us)) best = i;
  }
  if (best == space.size()) {
    fmt::print("\nno point passed validation\n");
    return 1;
  }
  const auto& m = *(*evals)[best].timing;
  fmt::print("\nbest: TILE={} RPT={}: {:.1f} us, {:.2f}x the baseline ({:.1f} us)\n", space[best].tile,
             space[best].rpt, m.median_us, m.speedup, m.baseline_median_us);
  return 0;
}
