#pragma once
// Shared by the evaluator's tests: a tiny task (c = a + b) and candidates
// whose first kernel's name scripts specgen-fake-worker's answers (see the
// comment at the top of src/gpu/worker/tests/fake_worker.cpp). The sources are real
// CUDA and are compiled with NVRTC; only running them is faked.
#include <specgen/gpu/evaluation.hpp>

#include <fmt/format.h>

#include <cstring>
#include <memory>
#include <string>

namespace fixture {

using namespace specgen;
using namespace specgen::gpu;

inline device_info fake_device(double peak_gbps = 4800) {
  device_info d;
  d.index = 0;
  d.name = "fake H200";
  d.sm_major = 9;
  d.sm_minor = 0;
  d.arch = "sm_90a";
  d.l2_bytes = 50 << 20;
  d.memory_bytes = std::int64_t{141} << 30;
  d.multiprocessors = 132;
  d.peak_dram_gbps = peak_gbps;
  return d;
}

inline std::string add_source(const std::string& kernel) {
  return fmt::format(
      "extern \"C\" __global__ void {}(const float* a, const float* b, float* c, int n) {{\n"
      "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
      "  if (i < n) c[i] = a[i] + b[i];\n"
      "}}\n",
      kernel);
}

inline std::string add_plan(const std::string& kernel) {
  return fmt::format("launch {} grid(cdiv(N, 256)) block(256) args(a, b, c, N)", kernel);
}

inline task sum_task() {
  task t;
  t.name = "sum";
  t.description = "c = a + b, element-wise, float32.";
  t.symbols = {"N"};
  t.benchmark_shape = {{"N", 1 << 21}};
  t.validation_shapes = {{{"N", 1}}, {{"N", 1000}}};
  t.inputs = {{.name = "a", .type = dtype::f32, .shape = {"N"}, .init = distribution::normal, .tol = {}},
              {.name = "b", .type = dtype::f32, .shape = {"N"}, .init = distribution::uniform, .tol = {}}};
  t.outputs = {{.name = "c", .type = dtype::f32, .shape = {"N"}, .init = distribution::normal, .tol = {1e-6, 1e-6}}};
  t.reference = {.source = add_source("ref_add"), .plan = add_plan("ref_add"), .host = {}};
  t.baseline = t.reference;
  return t;
}

inline candidate make_candidate(const std::string& kernel, candidate_id id = 1) {
  candidate c;
  c.id = id;
  c.task = "sum";
  c.source = add_source(kernel);
  c.plan = add_plan(kernel);
  return c;
}

/// One compiler for every test of a binary: repeated sources are memory hits.
inline std::shared_ptr<compiler> shared_compiler() {
  static auto c = std::make_shared<compiler>(compiler_config{.cache_dir = {}, .memory_entries = 256, .threads = 2,
                                                             .toolkit_include_dir = {}});
  return c;
}

inline session_config fake_config(device_info dev = fake_device()) {
  session_config c;
  c.worker_program = SPECGEN_FAKE_WORKER;
  c.worker.heartbeat_interval = std::chrono::seconds(10);
  c.worker.heartbeat_timeout = std::chrono::seconds(2);
  c.worker.startup_timeout = std::chrono::seconds(5);
  c.call_margin = std::chrono::seconds(2);
  c.shared_compiler = shared_compiler();
  c.validation.run_deadline = std::chrono::milliseconds(200);
  c.profile.run_deadline = std::chrono::milliseconds(200);
  c.profile.max_seconds = 1;
  c.profile.warmup = 1;
  c.assumed_device = dev;
  return c;
}

}  // namespace fixture
