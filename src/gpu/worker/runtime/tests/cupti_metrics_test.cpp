// The range profiler pass (cupti_metrics.hpp). On any machine: the loader's
// errors, the default metrics checked against the Hopper chip with CUPTI's
// host API (no GPU needed), and `open` failing with a message instead of a
// crash when there is no context. On a GPU: one memory-bound kernel (a copy of
// 256 MiB) and one compute-bound kernel (an FMA loop) are measured on the
// worker's kind of context (primary context, non-blocking stream, an L2 flush
// before each pass). Where the driver keeps the performance counters from this
// user (ERR_NVGPUCTRPERM) or another profiler holds them, the GPU case says
// "SKIP: <reason>" and passes.
#include "gpu/loader/cupti.hpp"
#include "cupti_metrics.hpp"
#include "gpu/loader/driver.hpp"
#include "executor.hpp"

#include <specgen/gpu/compiler.hpp>
#include "runtime.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

using namespace specgen;
using namespace specgen::gpu;
namespace rt = specgen::gpu::detail;

TEST_CASE("a libcupti that cannot be loaded is a range profiler error naming the file and the variable") {
  auto r = rt::probe_range_profiler({"/nonexistent/libcupti.so.13"});
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().message,
             Catch::StartsWith("libcupti not found (/nonexistent/libcupti.so.13 could not be loaded"));
  CHECK_THAT(r.error().message, Catch::Contains("SPECGEN_CUPTI_LIBRARY"));
}

TEST_CASE("a library without the range profiler's functions is reported as too old, not called") {
  // libc loads everywhere and has none of CUPTI's functions.
  auto r = rt::probe_range_profiler({"libc.so.6"});
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().message, Catch::StartsWith("libc.so.6 (CUPTI API version 0) lacks cuptiGetResultString"));
  CHECK_THAT(r.error().message, Catch::Contains("cuptiRangeProfilerEnable"));
  CHECK_THAT(r.error().message, Catch::Contains("CUDA 12.6 Update 2 or newer"));
}

namespace {

/// Whether the toolkit's libcupti is here (else the test says why and stops).
bool have_cupti() {
  ::unsetenv("SPECGEN_CUPTI_LIBRARY");
  static const auto probe = rt::probe_range_profiler(rt::cupti_candidates());
  if (!probe) WARN("no libcupti with the range profiler here: " << probe.error().message);
  return probe.has_value();
}

}  // namespace

TEST_CASE("the toolkit's libcupti, where installed, has every function the range profiler pass uses") {
  if (!have_cupti()) return;
  CHECK_FALSE(rt::probe_range_profiler(rt::cupti_candidates())->empty());
}

TEST_CASE("the default metrics are metrics of Hopper (GH100), and their passes are known without a GPU") {
  if (!have_cupti()) return;
  auto passes = rt::metric_passes("GH100", rt::default_metric_names());
  INFO((passes ? std::string() : passes.error().message));
  REQUIRE(passes);
  // CUDA 13.0: 8 (sm__throughput alone takes 8); never 0, and not absurd.
  CHECK(*passes >= 1);
  CHECK(*passes <= 16);
  auto one = rt::metric_passes("GH100", {"dram__throughput.avg.pct_of_peak_sustained_elapsed"});
  REQUIRE(one);
  CHECK(*one == 1);

  auto unknown = rt::metric_passes("GH100", {"dram__throughput.avg.pct_of_peak_sustained_elapsed", "no__such.sum"});
  REQUIRE_FALSE(unknown);
  // CUDA 13.0 says CUPTI_ERROR_INVALID_PARAMETER here; the pass names the metric itself.
  CHECK_THAT(unknown.error().message,
             Catch::StartsWith("range profiler: cuptiProfilerHostConfigAddMetrics failed: CUPTI_ERROR_"));
  CHECK_THAT(unknown.error().message, Catch::EndsWith("not metrics of GH100: no__such.sum"));

  auto chip = rt::metric_passes("XX999", {"dram__throughput.avg.pct_of_peak_sustained_elapsed"});
  REQUIRE_FALSE(chip);
  CHECK_THAT(chip.error().message,
             Catch::StartsWith("range profiler: cuptiProfilerHostInitialize for chip XX999 failed: CUPTI_ERROR_"));

  auto none = rt::metric_passes("GH100", {});
  REQUIRE_FALSE(none);
  CHECK(none.error().message == "range profiler: no metrics to measure");
}

TEST_CASE("open without a CUDA context is an error naming the step, never a crash") {
  auto p = rt::metrics_pass::open(nullptr, 0);
  REQUIRE_FALSE(p);
  INFO(p.error().message);
  CHECK_THAT(p.error().message, Catch::StartsWith("range profiler: "));
  // Which step it is depends on the machine: no libcupti, no driver, no GPU
  // (cuInit), or with all of them the missing context itself.
  CHECK_THAT(p.error().message, Catch::Contains("libcupti") || Catch::Contains("no NVIDIA driver") ||
                            Catch::Contains("cuInit") || Catch::Contains("no CUDA context to profile"));
}

namespace {

constexpr const char* kernels = R"(
extern "C" __global__ void copy4(const float4* __restrict__ in, float4* __restrict__ out, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i];
}
extern "C" __global__ void fma_loop(float* out, int iterations) {
  float v[8];
  #pragma unroll
  for (int k = 0; k < 8; ++k) v[k] = (threadIdx.x + k) * 1e-3f + blockIdx.x * 1e-6f;
  for (int i = 0; i < iterations; ++i) {
    #pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = fmaf(v[k], 0.9999f, 0.0001f);
  }
  float s = 0.0f;
  #pragma unroll
  for (int k = 0; k < 8; ++k) s += v[k];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
)";

/// Errors that mean "this machine does not let us profile", not a bug.
bool environment_refuses(const std::string& e) {
  for (const char* why : {"CUPTI_ERROR_INSUFFICIENT_PRIVILEGES", "CUPTI_ERROR_VIRTUALIZED_DEVICE",
                          "CUPTI_ERROR_HARDWARE_BUSY", "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED",
                          "CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED", "CUPTI_ERROR_CMP_DEVICE_NOT_SUPPORTED",
                          "CUPTI_ERROR_CONFIDENTIAL_COMPUTING_NOT_SUPPORTED", "does not support range profiling",
                          "libcupti not found"})
    if (e.find(why) != std::string::npos) return true;
  return false;
}

std::string listing(const rt::range_metrics& m) {
  std::string s = fmt::format("{} passes, {:.3f} s:", m.passes, m.seconds_spent);
  for (const auto& [name, value] : m.values) s += fmt::format("\n  {} = {:.6g}", name, value);
  for (const auto& name : m.not_evaluated) s += fmt::format("\n  {} not evaluated", name);
  return s;
}

double value_of(const rt::range_metrics& m, const std::string& name) {
  auto it = m.values.find(name);
  return it == m.values.end() ? -1.0 : it->second;
}

}  // namespace

TEST_CASE("on a GPU a 256 MiB copy is DRAM-bound and an FMA loop SM-bound, as the range profiler measures them") {
  auto dev = query_device(0);
  if (!dev) {
    WARN("no GPU: " << dev.error().message);
    return;
  }
  if (auto v = compiler::nvrtc_version(); !v) {
    WARN("no GPU: " << v.error().message);
    return;
  }
  auto ctx = gpu_context::create(0);
  INFO((ctx ? std::string() : ctx.error().message));
  REQUIRE(ctx);
  auto& st = rt::context_access::state(**ctx);
  const rt::driver_api& api = *st.api;

  compiler nvrtc;
  auto compiled = nvrtc.compile(kernels, {.arch = dev->arch});
  if (!compiled) FAIL("compile failed: " << compiled.error().message << "\n" << compiled.error().log);
  auto mod = (*ctx)->load_module((*compiled)->cubin);
  REQUIRE(mod);
  CUfunction copy = nullptr, fma = nullptr;
  REQUIRE(api.cuModuleGetFunction(&copy, rt::context_access::handle(*mod), "copy4") == CUDA_SUCCESS);
  REQUIRE(api.cuModuleGetFunction(&fma, rt::context_access::handle(*mod), "fma_loop") == CUDA_SUCCESS);

  constexpr std::size_t bytes = std::size_t{256} << 20;
  auto in = (*ctx)->allocate(bytes);
  auto out = (*ctx)->allocate(bytes);
  REQUIRE(in);
  REQUIRE(out);
  REQUIRE(in->fill(std::byte{1}));
  const unsigned fma_blocks = static_cast<unsigned>(dev->multiprocessors) * 8;
  auto sums = (*ctx)->allocate(std::size_t{fma_blocks} * 256 * sizeof(float));
  REQUIRE(sums);
  // The L2 flush the profile op does before every sample: outside the range.
  std::optional<device_buffer> flush;
  if (dev->l2_bytes > 0) {
    auto f = (*ctx)->allocate(2 * static_cast<std::size_t>(dev->l2_bytes));
    REQUIRE(f);
    flush = std::move(*f);
  }
  const rt::metrics_pass::step flush_l2 = [&]() -> expected<void> {
    if (!flush) return {};
    if (auto m = st.memset_async(flush->pointer(), 0, flush->size()); !m) return unexpected(error{m.error().message});
    return {};
  };

  CUdeviceptr src = in->pointer(), dst = out->pointer(), acc = sums->pointer();
  long long n = static_cast<long long>(bytes / 16);
  int iterations = 4096;
  void* copy_args[] = {&src, &dst, &n};
  void* fma_args[] = {&acc, &iterations};
  const auto launcher = [&](CUfunction f, unsigned grid, void** args) -> rt::metrics_pass::step {
    return [&api, &st, f, grid, args]() -> expected<void> {
      if (CUresult r = api.cuLaunchKernel(f, grid, 1, 1, 256, 1, 1, 0, st.stream, args, nullptr); r != CUDA_SUCCESS)
        return unexpected(error{rt::describe(api, r)});
      if (CUresult r = api.cuCtxSynchronize(); r != CUDA_SUCCESS) return unexpected(error{rt::describe(api, r)});
      return {};
    };
  };
  const auto copy_once = launcher(copy, static_cast<unsigned>(n / 256), copy_args);
  const auto fma_once = launcher(fma, fma_blocks, fma_args);
  // Warm-up, outside any profiling: module loading and first-launch costs.
  REQUIRE(copy_once());
  REQUIRE(fma_once());

  auto pass = rt::metrics_pass::open(st.context, 0);
  if (!pass) {
    if (environment_refuses(pass.error().message)) {
      WARN("SKIP: " << pass.error().message);
      return;
    }
    FAIL(pass.error().message);
  }
  CHECK_FALSE(pass->chip().empty());  // "GH100" on an H100/H200; logged below
  CHECK(pass->passes() >= 1);

  auto m = pass->measure(copy_once, flush_l2);
  if (!m && environment_refuses(m.error().message)) {
    WARN("SKIP: " << m.error().message);
    return;
  }
  INFO((m ? std::string() : m.error().message));
  REQUIRE(m);
  WARN(fmt::format("{} ({}), copy of 256 MiB: {}", dev->name, pass->chip(), listing(*m)));
  CHECK(m->passes == pass->passes());
  CHECK(m->seconds_spent > 0);
  CHECK(m->not_evaluated.empty());
  for (const auto& name : rt::default_metric_names()) CHECK(m->values.contains(name));
  const double dram = value_of(*m, "dram__throughput.avg.pct_of_peak_sustained_elapsed");
  const double sm = value_of(*m, "sm__throughput.avg.pct_of_peak_sustained_elapsed");
  CHECK(dram > 30);
  CHECK(dram <= 101);
  CHECK(sm < dram);
  // Read once and written once; L2 (50 MB on an H200) may keep part of the
  // writes, and the flush before the range is not counted.
  const double moved = value_of(*m, "dram__bytes.sum");
  CHECK(moved > 0.5 * 2 * bytes);
  CHECK(moved < 2.0 * 2 * bytes);
  CHECK(value_of(*m, "gpu__time_duration.sum") > 0);
  CHECK(value_of(*m, "gpc__cycles_elapsed.max") > 0);
  if (dev->peak_dram_gbps > 0) CHECK(value_of(*m, "dram__bytes.sum.per_second") < 1.2 * dev->peak_dram_gbps * 1e9);

  // The same pass again, on a compute-bound kernel.
  auto c = pass->measure(fma_once, flush_l2);
  INFO((c ? std::string() : c.error().message));
  REQUIRE(c);
  WARN(fmt::format("{} ({}), FMA loop: {}", dev->name, pass->chip(), listing(*c)));
  CHECK(value_of(*c, "sm__throughput.avg.pct_of_peak_sustained_elapsed") >
        value_of(*c, "dram__throughput.avg.pct_of_peak_sustained_elapsed"));
  CHECK(value_of(*c, "sm__warps_active.avg.pct_of_peak_sustained_active") > 0);
}
