// specgen-custom-loop: a search loop of your own, without the engine.
//
// One GPU through a `device_session`: each candidate is compiled, validated
// and profiled by direct calls, and what went wrong is turned into the text
// your model reads next. Here the "model" is a list of hand-written variants.
#include <specgen/gpu/evaluation.hpp>
#include <specgen/task_io.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

using namespace specgen;

namespace {

constexpr const char* task_json = R"json({
  "name": "vector_add", "description": "c[i] = a[i] + b[i], float32", "symbols": ["N"],
  "benchmark_shape": {"N": 16777216}, "validation_shapes": [{"N": 1}, {"N": 1000}, {"N": 1048579}],
  "inputs": [{"name": "a", "dtype": "f32", "shape": ["N"]}, {"name": "b", "dtype": "f32", "shape": ["N"]}],
  "outputs": [{"name": "c", "dtype": "f32", "shape": ["N"], "tolerance": {"abs": 1e-6, "rel": 1e-6}}],
  "reference": {"plan": "launch add grid(cdiv(N, 256)) block(256) args(a, b, c, N)",
    "source": "extern \"C\" __global__ void add(const float* a, const float* b, float* c, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) c[i] = a[i] + b[i]; }"}
})json";

// What a model might write, round by round.
struct variant {
  std::string name, source, plan;
};
const std::vector<variant> variants = {
    {"too few blocks", R"cu(extern "C" __global__ void add(const float* a, const float* b, float* c, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) c[i] = a[i] + b[i];
})cu", "launch add grid(8) block(128) args(a, b, c, N)"},
    {"typo", R"cu(extern "C" __global__ void add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) c[i] = a[i] + b[j];
})cu", "launch add grid(cdiv(N, 256)) block(256) args(a, b, c, N)"},
    {"off by one", R"cu(extern "C" __global__ void add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n - 1) c[i] = a[i] + b[i];
})cu", "launch add grid(cdiv(N, 256)) block(256) args(a, b, c, N)"},
    {"float4", R"cu(extern "C" __global__ void add(const float* a, const float* b, float* c, int n) {
  const int i = 4 * (blockIdx.x * blockDim.x + threadIdx.x);  // four elements per thread
  if (i + 3 < n) {  // the buffers are 16-byte aligned
    const float4 x = ((const float4*)a)[i / 4], y = ((const float4*)b)[i / 4];
    ((float4*)c)[i / 4] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
  } else {
    for (int j = i; j < n; ++j) c[j] = a[j] + b[j];
  }
})cu", "launch add grid(cdiv(N, 1024)) block(256) args(a, b, c, N)"},
};

// The text fed back to the model after a failure: the verdict's one-line
// summary, where the outputs disagreed, and the compiler's log.
std::string feedback_for(const verdict& v) {
  std::string text = fmt::format("{}: {}", to_string(v.kind), v.summary);
  if (const auto& m = v.mismatch)
    text += fmt::format("\n  output {} at {}: {} of {} elements wrong (first at index {}), max abs error {:g}",
                        m->output, m->shape, m->count, m->total, m->first_indices.empty() ? 0 : m->first_indices[0],
                        m->max_abs);
  if (!v.log.empty()) text += "\n  log: " + v.log.substr(0, v.log.find_last_not_of(" \n") + 1).substr(0, 300);
  return text;
}

}  // namespace

int main() {
  auto j = nlohmann::json::parse(task_json);
  const task t = parse_task(j, "<embedded>").value();
  auto session = gpu::device_session::open({.device = 0});
  if (!session) {  // "no GPU: <reason>" on a machine without one: nothing went wrong
    fmt::print("would try {} variants of {}\n{}\n", variants.size(), t.name, session.error().what());
    return session.error().what().starts_with("no GPU") ? 0 : 1;
  }
  gpu::device_session& gpu = **session;
  fmt::print("{} ({}), task {}\n", gpu.device().name, gpu.device().arch, t.name);

  std::optional<evaluation> best;
  std::size_t best_index = 0;
  std::string feedback;  // what the next prompt would carry
  for (std::size_t i = 0; i < variants.size(); ++i) {
    const candidate c{.id = i + 1, .task = t.name, .source = variants[i].source, .plan = variants[i].plan};
    fmt::print("\n[{}] {}\n", c.id, variants[i].name);
    const gpu::compile_outcome built = gpu.compile(t, c);
    if (built.result.kind != verdict_kind::ok) {
      feedback = feedback_for(built.result);
    } else if (const verdict v = gpu.validate(t, c); v.kind != verdict_kind::ok) {
      feedback = feedback_for(v);
    } else if (const evaluation e = gpu.profile(t, c); !e.timing) {
      feedback = feedback_for(e.result);  // e.g. suspicious: faster than the memory allows
    } else {
      feedback = fmt::format("ok: {:.1f} us, {:.2f}x the baseline; {} registers, {} bytes spilled", e.timing->median_us,
                             e.timing->speedup, built.report.registers, built.report.spill_bytes);
      if (!best || e.timing->median_us < best->timing->median_us) {
        best = e;
        best_index = i;
      }
    }
    fmt::print("  -> model: {}\n", feedback);
  }
  if (!best) return 1;
  fmt::print("\nbest: [{}] {} at {:.1f} us ({:.2f}x)\n", best_index + 1, variants[best_index].name,
             best->timing->median_us, best->timing->speedup);
  return 0;
}
