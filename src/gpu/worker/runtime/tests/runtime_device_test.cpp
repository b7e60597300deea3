// Plans on a real GPU, through the real specgen-worker and its supervisor, so
// that faults and hangs take the path they take in a search; the shared-memory
// poison through a prepared_plan in this process, the worker's own executor.
// Every test skips (with "no GPU: <reason>") on a machine without a driver, a
// GPU or NVRTC.
#include "executor.hpp"

#include <specgen/gpu/compiler.hpp>
#include <specgen/gpu/evaluation.hpp>  // the poison words
#include "runtime.hpp"
#include "gpu/supervisor/worker_host.hpp"
#include <specgen/inputs.hpp>
#include <specgen/task_io.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <string>
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
extern "C" __global__ void sneaky(const float* a, const float* b, float* c, int n) {
  // Correct, except that it writes one past the end when a[0] is negative.
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
  if (i == n && a[0] < 0.0f) c[n] = 1.0f;
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
  REQUIRE(o["offset"].get<std::size_t>() + n * sizeof(float) <= r.payload().size());
  std::memcpy(c.data(), r.payload().data() + o["offset"].get<std::size_t>(), n * sizeof(float));
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

namespace {

/// a + b computed here from the inputs the worker generates itself.
std::vector<float> host_sums(int elements, std::uint64_t seed_a, std::uint64_t seed_b,
                             std::optional<distribution> dist_b = std::nullopt) {
  const task t = vector_task();
  const auto a = make_input(t.inputs[0], elements, seed_a), b = make_input(t.inputs[1], elements, seed_b, dist_b);
  std::vector<float> c(static_cast<std::size_t>(elements));
  for (std::size_t i = 0; i < c.size(); ++i) {
    float x = 0, y = 0;
    std::memcpy(&x, a.data() + 4 * i, 4);
    std::memcpy(&y, b.data() + 4 * i, 4);
    c[i] = x + y;
  }
  return c;
}

std::vector<float> floats_at(const response& r, const nlohmann::json& output) {
  std::vector<float> v(output["length"].get<std::size_t>() / sizeof(float));
  const auto offset = output["offset"].get<std::size_t>();
  REQUIRE(offset + v.size() * sizeof(float) <= r.payload().size());
  std::memcpy(v.data(), r.payload().data() + offset, v.size() * sizeof(float));
  return v;
}

/// A "run" of vector_add on inputs the worker generates, by module key.
request generated_run(const std::string& key, bool send_cubin, int repeats) {
  request r{.op = "run",
            .args = {{"task", to_json(vector_task())},
                     {"plan", "launch vector_add grid(cdiv(N, 256)) block(256) args(a, b, c, N)"},
                     {"shape", {{"N", n}}},
                     {"module_key", key},
                     {"inputs", {{{"name", "a"}, {"seed", 7}}, {{"name", "b"}, {"seed", 8}, {"distribution", "uniform"}}}},
                     {"repeats", repeats},
                     {"deadline_ms", 2000}},
            .binary = {}};
  if (send_cubin) {
    r.args["cubin"] = {{"offset", 0}, {"length", cubin().size()}};
    r.binary = cubin();
  }
  return r;
}

/// A "profile" of `kernel` at N = `elements`, against vector_add when `with_baseline`.
request profile_request(const std::string& kernel, int elements, bool with_baseline, std::uint64_t seed,
                        std::uint64_t recheck_seed) {
  const std::string plan = "launch " + kernel + " grid(cdiv(N, 256)) block(256) args(a, b, c, N)";
  const nlohmann::json whole = {{"offset", 0}, {"length", cubin().size()}};
  nlohmann::json args = {{"task", to_json(vector_task())},
                         {"shape", {{"N", elements}}},
                         {"candidate", {{"plan", plan}, {"cubin", whole}, {"module_key", "device-test-kernels"}}},
                         {"baseline", nullptr},
                         {"seed", seed},
                         {"recheck_seed", recheck_seed},
                         {"warmup", 3},
                         {"min_samples", 10},
                         {"max_samples", 60},
                         {"target_noise", 0.02},
                         {"max_seconds", 5},
                         {"flush_l2", true},
                         {"interleave", true},
                         {"cupti", true},
                         {"cupti_runs", 3},
                         {"guard", 256},
                         {"deadline_ms", 2000}};
  if (with_baseline)
    args["baseline"] = {{"plan", "launch vector_add grid(cdiv(N, 256)) block(256) args(a, b, c, N)"},
                        {"module_key", "device-test-kernels"}};  // loaded with the candidate's cubin
  return {.op = "profile", .args = std::move(args), .binary = cubin()};
}

void check_timing(const nlohmann::json& side, double target, int max_samples) {
  INFO(side.dump());
  const auto samples = side["samples_us"].get<std::vector<double>>();
  REQUIRE_FALSE(samples.empty());
  for (double us : samples) CHECK(us > 0);
  CHECK(side["median_us"].get<double>() > 0);
  CHECK(side["spread"].get<double>() >= 0);
  const bool quiet = side["noise"].is_number() && side["noise"].get<double>() <= target;
  CHECK((quiet || static_cast<int>(samples.size()) == max_samples));
}

}  // namespace

TEST_CASE("run generates its inputs, repeats with fresh poison, and keeps modules by key") {
  if (!gpu_ready()) return;
  const auto want = host_sums(n, 7, 8, distribution::uniform);
  auto r = call(generated_run("device-test-vector-add", true, 3));
  INFO(r.result.dump());
  REQUIRE(r.result["ok"] == true);
  REQUIRE(r.result["runs"].size() == 3);
  CHECK(r.payload().size() == 3 * n * sizeof(float));
  for (const auto& run : r.result["runs"]) {
    CHECK(run["guards_intact"] == true);
    CHECK(run["inputs_intact"] == true);
    CHECK(run["elapsed_ms"].get<double>() > 0);
    REQUIRE(run["outputs"].size() == 1);
    CHECK(floats_at(r, run["outputs"][0]) == want);
  }
  CHECK(r.result["outputs"] == r.result["runs"][0]["outputs"]);  // the top level describes the first run
  CHECK(r.result["fresh_module_per_run"] == false);  // no __device__ globals

  // The key is loaded now: no cubin needed.
  auto again = call(generated_run("device-test-vector-add", false, 1));
  INFO(again.result.dump());
  REQUIRE(again.result["ok"] == true);
  CHECK(floats_at(again, again.result["outputs"][0]) == want);

  auto missing = call(generated_run("device-test-never-sent", false, 1));
  INFO(missing.result.dump());
  CHECK(missing.result["ok"] == false);
  CHECK(missing.result["error_kind"] == "module_missing");
  CHECK(missing.result["module_key"] == "device-test-never-sent");
}

namespace {

/// State kept between runs: a call counter in a module global, and what a
/// scratch buffer holds when a run starts.
constexpr const char* stateful_kernels = R"(
__device__ unsigned int calls;
extern "C" __global__ void count_call() { calls = calls + 1; }
extern "C" __global__ void write_calls(float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = (float)calls;
}
)";

constexpr const char* scratch_kernels = R"(
extern "C" __global__ void show_scratch(const unsigned int* kept, const unsigned int* zeroed, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = (kept[i] == 0xA5A5A5A5u && zeroed[i] == 0u) ? 1.0f : 0.0f;
}
extern "C" __global__ void scribble(unsigned int* kept, unsigned int* zeroed, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { kept[i] = 7u; zeroed[i] = 7u; }
}
)";

const std::string& cubin_of(const char* source) {
  static std::map<const char*, std::string> made;
  auto [it, fresh] = made.try_emplace(source);
  if (fresh) {
    compiler nvrtc;
    auto r = nvrtc.compile(source, {.arch = query_device(0)->arch});
    if (!r) FAIL("compile failed: " << r.error().message << "\n" << r.error().log);
    it->second.assign(reinterpret_cast<const char*>((*r)->cubin.data()), (*r)->cubin.size());
  }
  return it->second;
}

/// A run of `plan` on vector_add's buffers (inputs generated), from `source`'s cubin under `key`.
request stateful_run(const char* source, const std::string& key, const std::string& plan, bool send_cubin,
                     int repeats) {
  auto r = generated_run(key, false, repeats);
  r.args["plan"] = plan;
  if (send_cubin) {
    r.args["cubin"] = {{"offset", 0}, {"length", cubin_of(source).size()}};
    r.binary = cubin_of(source);
  }
  return r;
}

}  // namespace

TEST_CASE("a kernel counting its calls in a __device__ global sees 1 on every run: each run gets a fresh module") {
  if (!gpu_ready()) return;
  const std::string plan =
      "launch count_call grid(1) block(1)\nlaunch write_calls grid(cdiv(N, 256)) block(256) args(c, N)";
  const std::vector<float> ones(n, 1.0f);
  auto r = call(stateful_run(stateful_kernels, "device-test-counter", plan, true, 4));
  INFO(r.result.dump());
  REQUIRE(r.result["ok"] == true);
  CHECK(r.result["fresh_module_per_run"] == true);
  REQUIRE(r.result["runs"].size() == 4);
  for (const auto& run : r.result["runs"]) CHECK(floats_at(r, run["outputs"][0]) == ones);

  // The module kept by key: the next request starts from a fresh instance too.
  auto again = call(stateful_run(stateful_kernels, "device-test-counter", plan, false, 2));
  INFO(again.result.dump());
  REQUIRE(again.result["ok"] == true);
  for (const auto& run : again.result["runs"]) CHECK(floats_at(again, run["outputs"][0]) == ones);

  // Profiled: warm-up, samples, CUPTI runs, then the re-check, which still sees 1.
  request p = profile_request("vector_add", n, false, 101, 102);
  p.args["candidate"] = {{"plan", plan}, {"cubin", {{"offset", 0}, {"length", cubin_of(stateful_kernels).size()}}}};
  p.args["baseline"] = {{"plan", "launch vector_add grid(cdiv(N, 256)) block(256) args(a, b, c, N)"},
                        {"cubin", {{"offset", cubin_of(stateful_kernels).size()}, {"length", cubin().size()}}}};
  p.binary = cubin_of(stateful_kernels) + cubin();
  auto out = call(p);
  INFO(out.result.dump());
  REQUIRE(out.result["ok"] == true);
  CHECK(out.result["candidate"]["fresh_module_per_run"] == true);
  CHECK(out.result["baseline"]["fresh_module_per_run"] == false);
  const auto& outputs = out.result["recheck"]["outputs"];
  REQUIRE(outputs.size() == 1);
  CHECK(floats_at(out, outputs[0]) == ones);
}

TEST_CASE("scratch is 0xA5 bytes at the start of every run, or zeros when the plan says zero") {
  if (!gpu_ready()) return;
  const std::string plan =
      "scratch kept : i32[N]\nscratch zeroed : i32[N] zero\n"
      "launch show_scratch grid(cdiv(N, 256)) block(256) args(kept, zeroed, c, N)\n"
      "launch scribble grid(cdiv(N, 256)) block(256) args(kept, zeroed, N)";
  const std::vector<float> ones(n, 1.0f);
  auto r = call(stateful_run(scratch_kernels, "device-test-scratch", plan, true, 3));
  INFO(r.result.dump());
  REQUIRE(r.result["ok"] == true);
  CHECK(r.result["fresh_module_per_run"] == false);  // no globals: the module is shared, at no cost
  for (const auto& run : r.result["runs"]) CHECK(floats_at(r, run["outputs"][0]) == ones);
}

TEST_CASE("an output the kernel never writes keeps its dtype's poison (a NaN for floats)") {
  if (!gpu_ready()) return;
  auto r = generated_run("device-test-vector-add", true, 1);
  r.args["plan"] = "launch vector_add grid(1) block(256) args(a, b, c, N)";  // covers the first 256 elements only
  auto out = call(r);
  INFO(out.result.dump());
  REQUIRE(out.result["ok"] == true);
  const auto c = floats_at(out, out.result["outputs"][0]);
  const auto pattern = poison_pattern(dtype::f32);
  CHECK(std::memcmp(&c[999], pattern.data(), 4) == 0);
  CHECK(c[999] != c[999]);
  CHECK(c[0] == c[0]);
}

TEST_CASE("profile times a candidate against a baseline, cross-checks with CUPTI and re-checks on fresh inputs") {
  if (!gpu_ready()) return;
  constexpr int elements = 1 << 22;
  auto r = call(profile_request("vector_add", elements, true, 101, 102));
  const auto& p = r.result;
  INFO(p.dump().substr(0, 4000));
  REQUIRE(p["ok"] == true);
  check_timing(p["candidate"], 0.02, 60);
  check_timing(p["baseline"], 0.02, 60);
  CHECK(p["persisting_l2_reset"].is_boolean());
  const auto info = query_device(0);
  REQUIRE(info);
  CHECK(p["l2_flush_bytes"] == 2 * info->l2_bytes);
  CHECK(info->multiprocessors > 0);
  CHECK(info->peak_dram_gbps > 0);
  CHECK_FALSE(info->pci_bus_id.empty());
  if (p["sm_clock_mhz"].is_null()) WARN("NVML unavailable: no SM clock readings");
  else CHECK(p["sm_clock_mhz"]["min"].get<unsigned>() > 0);

  const nlohmann::json cupti = p["cupti"];
  REQUIRE(cupti.contains("available"));
  REQUIRE(cupti.contains("reason"));
  CHECK(cupti["runs"] == 3);
  CHECK(cupti["expected_kernels_per_run"] == 1);
  if (cupti["available"] == true) {
    CHECK(cupti["kernels"] == 3);
    CHECK(cupti["kernel_names"] == nlohmann::json::array({"vector_add"}));
    CHECK(cupti["foreign_kernels"] == 0);
    CHECK(cupti["foreign_streams"] == 0);
    REQUIRE(cupti["kernel_us"].size() == 3);
    REQUIRE(cupti["event_us"].size() == 3);
    for (const auto& us : cupti["kernel_us"]) CHECK(us.get<double>() > 0);
  } else {
    WARN("CUPTI unavailable: " << cupti["reason"].get<std::string>());
  }

  CHECK(p["timed_check"]["guards_intact"] == true);
  CHECK(p["timed_check"]["inputs_intact"] == true);
  const nlohmann::json recheck = p["recheck"];
  CHECK(recheck["seed"] == 102);
  CHECK(recheck["guards_intact"] == true);
  CHECK(recheck["inputs_intact"] == true);
  REQUIRE(recheck["outputs"].size() == 1);
  CHECK(floats_at(r, recheck["outputs"][0]) == host_sums(elements, 102, 102));
}

TEST_CASE("profile reports a kernel that writes out of bounds only on the re-check inputs") {
  if (!gpu_ready()) return;
  // A timed seed whose a[0] is not negative and a re-check seed whose a[0] is.
  const task t = vector_task();
  const tensor_spec& a = t.inputs[0];
  auto first = [&](bool negative, std::uint64_t from) {
    for (std::uint64_t s = from;; ++s) {
      float x = 0;
      std::memcpy(&x, make_input(a, n, s).data(), 4);
      if ((x < 0) == negative) return s;
    }
  };
  const std::uint64_t seed = first(false, 1), recheck_seed = first(true, 1);
  auto r = call(profile_request("sneaky", n, false, seed, recheck_seed));
  const auto& p = r.result;
  INFO(p.dump().substr(0, 4000));
  REQUIRE(p["ok"] == true);
  CHECK(p["baseline"].is_null());
  CHECK(p["timed_check"]["guards_intact"] == true);
  CHECK(p["recheck"]["guards_intact"] == false);
  CHECK(p["recheck"]["guards_broken"] == nlohmann::json::array({"c"}));
  CHECK(floats_at(r, p["recheck"]["outputs"][0]) == host_sums(n, recheck_seed, recheck_seed));
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
  request p{.op = "profile",
            .args = {{"task", to_json(vector_task())},
                     {"shape", {{"N", n}}},
                     {"candidate", {{"plan", "launch vector_add grid(4) block(256) args(a, b, c, N)"},
                                    {"cubin", {{"offset", 0}, {"length", 0}}}}}},
            .binary = {}};
  auto prof = w.call(p, 5s);
  REQUIRE(prof);
  CHECK(prof->result["ok"] == false);
  CHECK(prof->result["error_kind"] == "no_driver");
  auto echo = w.call({.op = "echo", .args = {{"x", 1}}, .binary = {}}, 5s);
  REQUIRE(echo);
  CHECK(echo->result["x"] == 1);
  CHECK(w.stats().respawns == 0);
}

// ---- shared memory poison -------------------------------------------------------------

namespace {

namespace rt = specgen::gpu::detail;

constexpr const char* smem_kernels = R"(
// Copies its block's static shared memory, which it never writes, to `out`.
extern "C" __global__ void read_static_smem(unsigned* out) {
  __shared__ unsigned s[12288];  // 48 KiB: the most a kernel may declare
  const volatile unsigned* v = s;
  for (int i = threadIdx.x; i < 12288; i += blockDim.x) out[blockIdx.x * 12288 + i] = v[i];
}
// The same for all the dynamic shared memory it was given.
extern "C" __global__ void read_dynamic_smem(unsigned* out, int words) {
  extern __shared__ unsigned d[];
  const volatile unsigned* v = d;
  for (int i = threadIdx.x; i < words; i += blockDim.x) out[(size_t)blockIdx.x * words + i] = v[i];
}
// Leaves 0x5EED5EED in its shared memory: what a later kernel must not read.
extern "C" __global__ void scribble_smem(int words) {
  extern __shared__ unsigned d[];
  volatile unsigned* v = d;
  for (int i = threadIdx.x; i < words; i += blockDim.x) v[i] = 0x5EED5EEDu;
}
// Correct: reads only what it wrote.
extern "C" __global__ void reverse_via_smem(unsigned* out) {
  __shared__ unsigned s[256];
  s[threadIdx.x] = blockIdx.x * 256 + threadIdx.x;
  __syncthreads();
  out[blockIdx.x * 256 + threadIdx.x] = s[255 - threadIdx.x];
}
)";

constexpr std::uint32_t scribble = 0x5EED5EEDu;

resolved_arg out_arg() { return {.is_buffer = true, .buffer = "out", .role = buffer_role::output}; }
resolved_arg i32_arg(std::int64_t v) { return {.value = v, .type = scalar_type::i32}; }

resolved_launch launch(std::string kernel, std::uint32_t grid, std::uint32_t block, std::uint32_t smem,
                       std::vector<resolved_arg> args) {
  return {.kernel = std::move(kernel), .grid = {grid, 1, 1}, .block = {block, 1, 1}, .smem_bytes = smem,
          .smem_opt_in = smem > 48 * 1024, .args = std::move(args), .line = 1};
}

/// Everything a poison test needs: a context, the kernels, and a buffer `out`
/// as large as the largest plan below writes.
struct smem_fixture {
  std::unique_ptr<gpu_context> ctx;
  std::vector<std::byte> cubin;
  std::optional<module> mod;
  std::optional<device_buffer> out;
  std::uint32_t sms = 0;
  std::uint32_t optin_bytes = 0;  // the device's opt-in dynamic shared memory per block

  smem_fixture() {
    auto c = gpu_context::create(0);
    REQUIRE(c.has_value());
    ctx = std::move(*c);
    sms = static_cast<std::uint32_t>(ctx->info().multiprocessors);
    optin_bytes = static_cast<std::uint32_t>(ctx->info().limits.max_dynamic_smem_bytes);
    compiler nvrtc;
    auto r = nvrtc.compile(smem_kernels, {.arch = ctx->info().arch});
    if (!r) FAIL("compile failed: " << r.error().message << "\n" << r.error().log);
    cubin = (*r)->cubin;
    auto m = ctx->load_module(cubin);
    REQUIRE(m.has_value());
    mod.emplace(std::move(*m));
    const std::size_t words_per_sm = std::max<std::size_t>(4 * 12288, 2 * optin_bytes / 4);
    auto b = ctx->allocate(words_per_sm * sms * sizeof(std::uint32_t));
    REQUIRE(b.has_value());
    out.emplace(std::move(*b));
  }

  rt::context_state& state() { return rt::context_access::state(*ctx); }

  expected<rt::prepared_plan, runtime_error> prepare(const resolved_plan& plan, bool fresh_module = false) {
    return rt::prepared_plan::prepare(
        *ctx, plan, *mod, {{"out", out->pointer()}},
        fresh_module ? std::make_shared<const std::vector<std::byte>>(cubin) : nullptr);
  }

  /// Clears `out`, runs the plan (timed, or queued alone) and returns the
  /// first `words` words of `out`.
  std::vector<std::uint32_t> run(rt::prepared_plan& p, std::size_t words, bool timed = true) {
    REQUIRE(out->fill(std::byte{0}));
    REQUIRE(state().api->cuCtxSynchronize() == CUDA_SUCCESS);  // the fill went through the legacy stream
    if (timed) {
      auto ms = p.timed_run(std::chrono::steady_clock::now() + 10s, seconds(10));
      INFO((ms ? std::string() : ms.error().message));
      REQUIRE(ms.has_value());
    } else {
      auto q = p.enqueue();
      INFO((q ? std::string() : q.error().message));
      REQUIRE(q.has_value());
      REQUIRE(state().api->cuCtxSynchronize() == CUDA_SUCCESS);
    }
    auto bytes = out->download();
    REQUIRE(bytes.has_value());
    REQUIRE(words * sizeof(std::uint32_t) <= bytes->size());
    std::vector<std::uint32_t> out_words(words);
    std::memcpy(out_words.data(), bytes->data(), words * sizeof(std::uint32_t));
    return out_words;
  }

  /// The kernel's preferred shared memory carveout, as the driver reports it.
  int carveout(const char* kernel) {
    CUfunction f = nullptr;
    REQUIRE(state().api->cuModuleGetFunction(&f, rt::context_access::handle(*mod), kernel) == CUDA_SUCCESS);
    int v = 0;
    REQUIRE(state().api->cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, f) ==
            CUDA_SUCCESS);
    return v;
  }
};

/// How many of `words` differ from `expected`, and the first that does.
std::string mismatches(const std::vector<std::uint32_t>& words, std::uint32_t expected) {
  std::size_t bad = 0, first = words.size();
  for (std::size_t i = 0; i < words.size(); ++i)
    if (words[i] != expected && bad++ == 0) first = i;
  if (bad == 0) return {};
  return fmt::format("{} of {} words are not {:#010x}; the first is word {}: {:#010x}", bad, words.size(), expected,
                     first, words[first]);
}

}  // namespace

TEST_CASE("the poison kernel is sized to fill every SM's shared memory") {
  // H200: 132 SMs, 227 KiB of opt-in shared memory per block.
  CHECK(rt::smem_poison_geometry_for(232448, 132, 1024) ==
        rt::smem_poison_geometry{.blocks = 528, .threads = 1024, .bytes = 232448});
  CHECK(rt::smem_poison_geometry_for(101376 + 7, 84, 768) ==
        rt::smem_poison_geometry{.blocks = 336, .threads = 768, .bytes = 101376});
  CHECK(rt::smem_poison_geometry_for(0, 132, 1024).blocks == 0);
  CHECK(rt::smem_poison_geometry_for(232448, 0, 1024).blocks == 0);
  const auto ptx = rt::smem_poison_ptx();
  CHECK(ptx.starts_with(".version 7.0\n.target sm_52\n"));
  CHECK(ptx.find(std::string(".entry ") + rt::smem_poison_entry + "(") != std::string_view::npos);
  CHECK(ptx.data()[ptx.size()] == '\0');  // cuModuleLoadData reads PTX up to its NUL
  CHECK(gpu::smem_poison_patterns ==
        std::array<std::uint32_t, 3>{gpu::smem_poison_ones, gpu::smem_poison_high, gpu::smem_poison_low});
}

TEST_CASE("with shared memory poisoned, a kernel reading shared memory it never wrote reads exactly the pattern") {
  if (!gpu_ready()) return;
  smem_fixture f;
  const std::uint32_t optin_words = f.optin_bytes / 4;
  const std::size_t static_words = std::size_t{4} * f.sms * 12288, dynamic_words = std::size_t{2} * f.sms * optin_words;
  const auto scribble_all = launch("scribble_smem", 2 * f.sms, 1024, f.optin_bytes, {i32_arg(optin_words)});
  // Four 48 KiB blocks per SM, so blocks sit at several places in an SM's shared memory.
  resolved_plan statics{.launches = {scribble_all, launch("read_static_smem", 4 * f.sms, 256, 0, {out_arg()})}};
  auto p = f.prepare(statics);
  INFO((p ? std::string() : p.error().message));
  REQUIRE(p.has_value());

  // Without poison the reader sees the scribble (or anything else): not asserted, only reported.
  const auto before = f.run(*p, static_words);
  WARN("without poison: " << mismatches(before, scribble) << " (empty: every word read the scribble)");
  CHECK(f.carveout("read_static_smem") == CU_SHAREDMEM_CARVEOUT_DEFAULT);

  for (const auto pattern : gpu::smem_poison_patterns) {
    INFO(fmt::format("pattern {:#010x}", pattern));
    const auto set = p->poison_shared_memory(pattern);
    INFO((set ? std::string() : set.error().message));
    REQUIRE(set.has_value());
    CHECK(p->shared_memory_poison() == pattern);
    CHECK(f.carveout("read_static_smem") == CU_SHAREDMEM_CARVEOUT_MAX_SHARED);
    CHECK(mismatches(f.run(*p, static_words), pattern).empty());
    CHECK(mismatches(f.run(*p, static_words, /*timed=*/false), pattern).empty());
  }
  REQUIRE(p->poison_shared_memory(std::nullopt).has_value());
  CHECK_FALSE(p->shared_memory_poison().has_value());
  CHECK(f.carveout("read_static_smem") == CU_SHAREDMEM_CARVEOUT_DEFAULT);

  // All the dynamic shared memory a block can have, one block per SM at a time.
  resolved_plan dynamics{.launches = {scribble_all, launch("read_dynamic_smem", 2 * f.sms, 1024, f.optin_bytes,
                                                           {out_arg(), i32_arg(optin_words)})}};
  auto d = f.prepare(dynamics);
  INFO((d ? std::string() : d.error().message));
  REQUIRE(d.has_value());
  for (const auto pattern : gpu::smem_poison_patterns) {
    INFO(fmt::format("dynamic, pattern {:#010x}", pattern));
    REQUIRE(d->poison_shared_memory(pattern).has_value());
    CHECK(mismatches(f.run(*d, dynamic_words), pattern).empty());
  }

  // A plan whose module is loaded afresh for every run keeps the poison across reload().
  auto fresh = f.prepare(statics, /*fresh_module=*/true);
  REQUIRE(fresh.has_value());
  REQUIRE(fresh->poison_shared_memory(gpu::smem_poison_high).has_value());
  for (int run = 0; run < 2; ++run) {
    INFO("fresh module, run " << run + 1);
    REQUIRE(fresh->reload().has_value());
    CHECK(mismatches(f.run(*fresh, static_words), gpu::smem_poison_high).empty());
  }
}

TEST_CASE("with shared memory poisoned, a kernel that reads only what it wrote is unaffected") {
  if (!gpu_ready()) return;
  smem_fixture f;
  auto prepared = f.prepare({.launches = {launch("reverse_via_smem", 4 * f.sms, 256, 0, {out_arg()})}});
  REQUIRE(prepared.has_value());
  std::optional<rt::prepared_plan> p(std::move(*prepared));
  for (const auto pattern : gpu::smem_poison_patterns) {
    INFO(fmt::format("pattern {:#010x}", pattern));
    REQUIRE(p->poison_shared_memory(pattern).has_value());
    const auto words = f.run(*p, std::size_t{4} * f.sms * 256);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < words.size(); ++i)
      wrong += words[i] != static_cast<std::uint32_t>(i / 256 * 256 + 255 - i % 256);
    CHECK(wrong == 0);
  }
  // Destroying a poisoned plan gives its kernels the default carveout back.
  p.reset();
  CHECK(f.carveout("reverse_via_smem") == CU_SHAREDMEM_CARVEOUT_DEFAULT);
}
