// Plans on a real GPU, through the real specgen-worker and its supervisor, so
// that faults and hangs take the path they take in a search. Every test skips
// (with "no GPU: <reason>") on a machine without a driver, a GPU or NVRTC.
#include <specgen/gpu/compiler.hpp>
#include <specgen/gpu/runtime.hpp>
#include <specgen/gpu/worker_host.hpp>
#include <specgen/inputs.hpp>
#include <specgen/task_io.hpp>

#include <catch2/catch.hpp>

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
