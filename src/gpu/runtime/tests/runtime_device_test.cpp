// Plans on a real GPU, through the real specgen-worker and its supervisor, so
// that faults and hangs take the path they take in a search. Every test skips
// (with "no GPU: <reason>") on a machine without a driver, a GPU or NVRTC.
#include <specgen/gpu/compiler.hpp>
#include <specgen/gpu/runtime.hpp>
#include <specgen/gpu/worker_host.hpp>
#include <specgen/task_io.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>
#include <optional>
#include <vector>

using namespace specgen;
using namespace specgen::gpu;
using namespace std::chrono_literals;

namespace {

constexpr const char* kernels = R"(
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
extern "C" __global__ void one_past_end(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
  if (i == n) c[n] = 1.0f;
}
extern "C" __global__ void clobber_input(float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { c[i] = a[i] + b[i]; a[i] = 0.0f; }
}
extern "C" __global__ void illegal_address(const float* a, const float* b, float* c, int n) {
  *reinterpret_cast<volatile float*>(0x8) = a[0] + b[0] + c[0] + n;
}
extern "C" __global__ void endless(const float* a, const float* b, float* c, int n) {
  // A volatile local can be optimised away; a sleep and a volatile global read cannot.
  const volatile float* p = a;
  for (;;) {
    __nanosleep(1000);
    if (p[0] != p[0]) break;  // never true for the finite inputs the test uploads
  }
  c[0] = a[0] + b[0] + n;
}
extern "C" __global__ void add_via_smem(const float* a, const float* b, float* c, int n) {
  extern __shared__ float staged[];  // 100 KiB: needs the opt-in attribute
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  staged[25599 - threadIdx.x] = i < n ? a[i] : 0.0f;
  __syncthreads();
  if (i < n) c[i] = staged[25599 - threadIdx.x] + b[i];
}
)";

constexpr int n = 1000;

/// Why this machine cannot run these tests, or nothing.
std::optional<std::string> no_gpu_reason() {
  auto d = query_device(0);
  if (!d) return d.error().message;
  if (auto v = compiler::nvrtc_version(); !v) return v.error().message;
  return std::nullopt;
}

bool gpu_ready() {
  static const std::optional<std::string> reason = no_gpu_reason();
  if (reason) WARN("no GPU: " << *reason);
  return !reason;
}

task vector_task() {
  task t;
  t.name = "vector_add";
  t.description = "c = a + b";
  t.symbols = {"N"};
  t.benchmark_shape = {{"N", n}};
  t.validation_shapes = {{{"N", n}}};
  t.inputs = {{.name = "a", .type = dtype::f32, .shape = {"N"}}, {.name = "b", .type = dtype::f32, .shape = {"N"}}};
  t.outputs = {{.name = "c", .type = dtype::f32, .shape = {"N"}}};
  t.reference = {.source = kernels, .plan = "launch vector_add grid(cdiv(N, 256)) block(256) args(a, b, c, N)"};
  t.baseline = t.reference;
  return t;
}

const std::string& cubin() {
  static const std::string bytes = [] {
    compiler nvrtc;
    auto r = nvrtc.compile(kernels, {.arch = query_device(0)->arch});
    if (!r) FAIL("compile failed: " << r.error().message << "\n" << r.error().log);
    return std::string(reinterpret_cast<const char*>((*r)->cubin.data()), (*r)->cubin.size());
  }();
  return bytes;
}

std::vector<float> values(float base) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = base + static_cast<float>(i);
  return v;
}

/// A "run" request: the cubin, then a, then b, in the binary part.
request run_request(const std::string& kernel, const std::string& smem = "0", double deadline_ms = 2000) {
  const auto a = values(1), b = values(1000);
  std::string binary = cubin();
  const std::size_t bytes = n * sizeof(float);
  nlohmann::json inputs = nlohmann::json::array();
  for (const auto* v : {&a, &b}) {
    inputs.push_back({{"name", v == &a ? "a" : "b"}, {"offset", binary.size()}, {"length", bytes}});
    binary.append(reinterpret_cast<const char*>(v->data()), bytes);
  }
  return {.op = "run",
          .args = {{"task", to_json(vector_task())},
                   {"plan", "launch " + kernel + " grid(cdiv(N, 256)) block(256) smem(" + smem + ") args(a, b, c, N)"},
                   {"shape", {{"N", n}}},
                   {"cubin", {{"offset", 0}, {"length", cubin().size()}}},
                   {"inputs", inputs},
                   {"outputs", {"c"}},
                   {"guard", 256},
                   {"deadline_ms", deadline_ms}},
          .binary = std::move(binary)};
}

worker_host& worker() {
  static worker_host w({.program = SPECGEN_WORKER, .startup_timeout = 30s});
  return w;
}

/// The response to `r`. A worker that exited after reporting a fault is only
/// noticed by the host at the next call, which then starts a fresh one.
response call(const request& r) {
  auto out = worker().call(r, 10s);
  if (!out && out.error().what == worker_failure::kind::crashed) out = worker().call(r, 10s);
  if (!out) FAIL("worker failed: " << out.error().message);
  return *out;
}

std::vector<float> output_c(const response& r) {
  std::vector<float> c(n);
  const auto& o = r.result["outputs"][0];
  REQUIRE(o["name"] == "c");
  REQUIRE(o["length"] == n * sizeof(float));
  std::memcpy(c.data(), r.binary.data() + o["offset"].get<std::size_t>(), n * sizeof(float));
  return c;
}

void check_sums(const response& r) {
  auto c = output_c(r);
  for (int i = 0; i < n; ++i) REQUIRE(c[static_cast<std::size_t>(i)] == 1001.0f + 2.0f * static_cast<float>(i));
}

}  // namespace

TEST_CASE("vector_add runs in the worker and its output is a + b with guards and inputs intact") {
  if (!gpu_ready()) return;
  auto r = call(run_request("vector_add"));
  INFO(r.result.dump());
  REQUIRE(r.result["ok"] == true);
  CHECK(r.result["guards_intact"] == true);
  CHECK(r.result["inputs_intact"] == true);
  CHECK(r.result["elapsed_ms"].get<double>() > 0);
  check_sums(r);
}

TEST_CASE("a kernel writing one element past its output breaks the guard zone") {
  if (!gpu_ready()) return;
  auto r = call(run_request("one_past_end"));
  INFO(r.result.dump());
  REQUIRE(r.result["ok"] == true);
  CHECK(r.result["guards_intact"] == false);
  CHECK(r.result["guards_broken"] == nlohmann::json::array({"c"}));
  CHECK(r.result["inputs_intact"] == true);
}

TEST_CASE("a kernel writing its input is reported as inputs not intact") {
  if (!gpu_ready()) return;
  auto r = call(run_request("clobber_input"));
  INFO(r.result.dump());
  REQUIRE(r.result["ok"] == true);
  CHECK(r.result["inputs_intact"] == false);
  CHECK(r.result["inputs_changed"] == nlohmann::json::array({"a"}));
  CHECK(r.result["guards_intact"] == true);
  check_sums(r);
}

TEST_CASE("a plan with 100 KiB of dynamic shared memory runs") {
  if (!gpu_ready()) return;
  auto r = call(run_request("add_via_smem", "102400"));
  INFO(r.result.dump());
  REQUIRE(r.result["ok"] == true);
  check_sums(r);
}

TEST_CASE("a plan naming a kernel the cubin lacks is invalid_plan and the worker stays") {
  if (!gpu_ready()) return;
  const int pid = worker().info().pid;
  auto r = call(run_request("no_such_kernel"));
  CHECK(r.result["ok"] == false);
  CHECK(r.result["error_kind"] == "invalid_plan");
  CHECK_THAT(r.result["message"].get<std::string>(), Catch::Contains("no_such_kernel"));
  CHECK(worker().info().pid == pid);
}

TEST_CASE("an illegal address is a fault with the CUDA error name, and the next run gets a fresh worker") {
  if (!gpu_ready()) return;
  const int pid = worker().info().pid;
  auto r = call(run_request("illegal_address"));
  INFO(r.result.dump());
  CHECK(r.result["ok"] == false);
  CHECK(r.result["error_kind"] == "fault");
  CHECK(r.result["cuda_error"] == "CUDA_ERROR_ILLEGAL_ADDRESS");
  auto again = call(run_request("vector_add"));
  REQUIRE(again.result["ok"] == true);
  check_sums(again);
  CHECK(worker().info().pid != pid);
}

TEST_CASE("an endless kernel times out at a 200 ms deadline, and the next run gets a fresh worker") {
  if (!gpu_ready()) return;
  const int pid = worker().info().pid;
  const auto t0 = std::chrono::steady_clock::now();
  auto r = call(run_request("endless", "0", 200));
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(r.result.dump());
  CHECK(r.result["ok"] == false);
  CHECK(r.result["error_kind"] == "timeout");
  CHECK(took >= 0.2);
  CHECK(took < 2.0);
  auto again = call(run_request("vector_add"));
  REQUIRE(again.result["ok"] == true);
  check_sums(again);
  CHECK(worker().info().pid != pid);
}

TEST_CASE("without a GPU the worker answers run with the driver's reason, not a crash") {
  if (gpu_ready()) return;  // the GPU case is the tests above
  worker_host w({.program = SPECGEN_WORKER});
  REQUIRE(w.start());
  CHECK(w.info().hello["device"]["name"] == "none");
  request r{.op = "run",
            .args = {{"task", to_json(vector_task())},
                     {"plan", "launch vector_add grid(4) block(256) args(a, b, c, N)"},
                     {"shape", {{"N", n}}},
                     {"cubin", {{"offset", 0}, {"length", 0}}}},
            .binary = {}};
  auto out = w.call(r, 5s);
  REQUIRE(out);
  CHECK(out->result["ok"] == false);
  CHECK(out->result["error_kind"] == "no_driver");
  CHECK_THAT(out->result["message"].get<std::string>(), Catch::StartsWith("no NVIDIA driver found"));
  auto echo = w.call({.op = "echo", .args = {{"x", 1}}, .binary = {}}, 5s);
  REQUIRE(echo);
  CHECK(echo->result["x"] == 1);
  CHECK(w.stats().respawns == 0);
}
