// CUPTI's range profiler, loaded at run time by the loader
// (gpu/loader/cupti_range_profiler.hpp): every parameter struct carries the
// header's *_STRUCT_SIZE, which is how CUPTI tells versions apart.
#include "cupti_metrics.hpp"

#include "gpu/loader/cupti.hpp"
#include "gpu/loader/cupti_range_profiler.hpp"
#include "gpu/loader/driver.hpp"

#include <cupti_profiler_target.h>
#include <cupti_profiler_host.h>
#include <cupti_range_profiler.h>
#include <cupti_result.h>
#include <cupti_target.h>
#include <cupti_version.h>
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <exception>
#include <mutex>
#include <utility>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {
namespace {

/// A CUPTI parameter struct, zeroed, with the size the header gives it.
template <class P>
P params(std::size_t struct_size) {
  P p{};
  p.structSize = struct_size;
  return p;
}
#define SPECGEN_RP_PARAMS(T) params<T>(T##_STRUCT_SIZE)

std::string result_name(const rp_api& api, CUptiResult r) {
  const char* text = nullptr;
  if (api.cuptiGetResultString(r, &text) != CUPTI_SUCCESS || !text) return fmt::format("CUptiResult {}", static_cast<int>(r));
  return text;
}

/// What a person can do about `r`, or nothing.
const char* hint(CUptiResult r) {
  switch (r) {
    case CUPTI_ERROR_INSUFFICIENT_PRIVILEGES:
      return "ERR_NVGPUCTRPERM: the NVIDIA driver lets only administrators use the GPU performance counters; an "
             "administrator can allow every user (nvidia module option NVreg_RestrictProfilingToAdminUsers=0) or run "
             "the worker with CAP_SYS_ADMIN; https://developer.nvidia.com/ERR_NVGPUCTRPERM";
    case CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES:
      return "the hypervisor does not allow profiling on this virtual GPU";
    case CUPTI_ERROR_HARDWARE_BUSY:
      return "another profiler (Nsight Compute, DCGM profiling) holds the GPU's performance monitors";
    case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:
    case CUPTI_ERROR_DISABLED:
      return "another CUPTI client or NVIDIA tool is attached to this process";
    case CUPTI_ERROR_NOT_SUPPORTED:
    case CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_CONFIDENTIAL_COMPUTING_NOT_SUPPORTED:
    case CUPTI_ERROR_CMP_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_SLI_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_WSL_DEVICE_NOT_SUPPORTED:
      return "this GPU or its configuration cannot be profiled";
    case CUPTI_ERROR_NOT_INITIALIZED:
      return "CUPTI could not connect to the CUDA driver";
    default: return nullptr;
  }
}

/// "range profiler: <step> failed: CUPTI_ERROR_X (what to do)".
error failure(const rp_api& api, std::string_view step, CUptiResult r) {
  error e{fmt::format("range profiler: {} failed: {}", step, result_name(api, r))};
  if (const char* h = hint(r)) e.message += fmt::format(" ({})", h);
  return e;
}

error cuda_failed(const driver_api& drv, std::string_view step, CUresult r) {
  return error{fmt::format("range profiler: {} failed: {}", step, describe(drv, r))};
}

/// cuptiProfilerInitialize for the first open pass of the process,
/// cuptiProfilerDeInitialize after the last is gone.
std::mutex& profiler_mutex() {
  static std::mutex m;
  return m;
}
int profiler_users = 0;  // guarded by profiler_mutex()

expected<void> acquire_profiler(const rp_api& api) {
  std::lock_guard lock(profiler_mutex());
  if (profiler_users == 0) {
    auto p = SPECGEN_RP_PARAMS(CUpti_Profiler_Initialize_Params);
    if (CUptiResult r = api.cuptiProfilerInitialize(&p); r != CUPTI_SUCCESS)
      return unexpected(failure(api, "cuptiProfilerInitialize", r));
  }
  ++profiler_users;
  return {};
}

void release_profiler(const rp_api& api) noexcept {
  std::lock_guard lock(profiler_mutex());
  if (--profiler_users == 0) {
    auto p = SPECGEN_RP_PARAMS(CUpti_Profiler_DeInitialize_Params);
    (void)api.cuptiProfilerDeInitialize(&p);
  }
}

/// CUPTI's profiler host object (config image building and evaluation).
class host_object {
 public:
  host_object() = default;
  host_object(const rp_api* api, CUpti_Profiler_Host_Object* p) : api_(api), p_(p) {}
  host_object(host_object&& o) noexcept : api_(o.api_), p_(std::exchange(o.p_, nullptr)) {}
  host_object& operator=(host_object&& o) noexcept {
    if (this != &o) {
      reset();
      api_ = o.api_;
      p_ = std::exchange(o.p_, nullptr);
    }
    return *this;
  }
  ~host_object() { reset(); }
  void reset() noexcept {
    if (!p_) return;
    auto d = SPECGEN_RP_PARAMS(CUpti_Profiler_Host_Deinitialize_Params);
    d.pHostObject = p_;
    (void)api_->cuptiProfilerHostDeinitialize(&d);
    p_ = nullptr;
  }
  /// Forgets the object without a CUPTI call (after abandon()).
  void leak() noexcept { p_ = nullptr; }
  [[nodiscard]] CUpti_Profiler_Host_Object* get() const noexcept { return p_; }

 private:
  const rp_api* api_ = nullptr;
  CUpti_Profiler_Host_Object* p_ = nullptr;
};

/// The config image for `metrics` on `chip` and the host object that made it
/// (kept: the evaluation needs it).
struct config {
  host_object host{};
  std::vector<std::uint8_t> image{};
  std::size_t passes = 0;
};

expected<config> make_config(const rp_api& api, const std::string& chip, const std::uint8_t* counter_availability,
                             std::vector<const char*>& metrics) {
  if (metrics.empty()) return unexpected(error{"range profiler: no metrics to measure"});
  auto init = SPECGEN_RP_PARAMS(CUpti_Profiler_Host_Initialize_Params);
  init.profilerType = CUPTI_PROFILER_TYPE_RANGE_PROFILER;
  init.pChipName = chip.c_str();
  init.pCounterAvailabilityImage = counter_availability;
  if (CUptiResult r = api.cuptiProfilerHostInitialize(&init); r != CUPTI_SUCCESS) {
    error e = failure(api, fmt::format("cuptiProfilerHostInitialize for chip {}", chip), r);
    if (!api.nvperf_note.empty())
      e.message += fmt::format("; libnvperf_host.so, which CUPTI needs here: {}", api.nvperf_note);
    return unexpected(std::move(e));
  }
  config c;
  c.host = host_object(&api, init.pHostObject);

  auto add = SPECGEN_RP_PARAMS(CUpti_Profiler_Host_ConfigAddMetrics_Params);
  add.pHostObject = c.host.get();
  add.ppMetricNames = metrics.data();
  add.numMetrics = metrics.size();
  if (CUptiResult r = api.cuptiProfilerHostConfigAddMetrics(&add); r != CUPTI_SUCCESS) {
    // Name the metrics the chip does not know, one by one.
    std::string unknown;
    for (const char* m : metrics) {
      auto prop = SPECGEN_RP_PARAMS(CUpti_Profiler_Host_GetMetricProperties_Params);
      prop.pHostObject = c.host.get();
      prop.pMetricName = m;
      if (api.cuptiProfilerHostGetMetricProperties(&prop) != CUPTI_SUCCESS) unknown += unknown.empty() ? m : fmt::format(", {}", m);
    }
    error e = failure(api, "cuptiProfilerHostConfigAddMetrics", r);
    if (!unknown.empty()) e.message += fmt::format("; not metrics of {}: {}", chip, unknown);
    return unexpected(std::move(e));
  }
  auto size = SPECGEN_RP_PARAMS(CUpti_Profiler_Host_GetConfigImageSize_Params);
  size.pHostObject = c.host.get();
  if (CUptiResult r = api.cuptiProfilerHostGetConfigImageSize(&size); r != CUPTI_SUCCESS)
    return unexpected(failure(api, "cuptiProfilerHostGetConfigImageSize", r));
  c.image.assign(size.configImageSize, 0);
  auto image = SPECGEN_RP_PARAMS(CUpti_Profiler_Host_GetConfigImage_Params);
  image.pHostObject = c.host.get();
  image.configImageSize = c.image.size();
  image.pConfigImage = c.image.data();
  if (CUptiResult r = api.cuptiProfilerHostGetConfigImage(&image); r != CUPTI_SUCCESS)
    return unexpected(failure(api, "cuptiProfilerHostGetConfigImage", r));
  auto passes = SPECGEN_RP_PARAMS(CUpti_Profiler_Host_GetNumOfPasses_Params);
  passes.configImageSize = c.image.size();
  passes.pConfigImage = c.image.data();
  if (CUptiResult r = api.cuptiProfilerHostGetNumOfPasses(&passes); r != CUPTI_SUCCESS)
    return unexpected(failure(api, "cuptiProfilerHostGetNumOfPasses", r));
  if (passes.numOfPasses == 0) return unexpected(error{"range profiler: the config image has no passes"});
  c.passes = passes.numOfPasses;
  return c;
}

std::vector<const char*> c_names(const std::vector<std::string>& names) {
  std::vector<const char*> out;
  out.reserve(names.size());
  for (const auto& n : names) out.push_back(n.c_str());
  return out;
}

const char* level_name(CUpti_Profiler_Support_Level l) {
  switch (l) {
    case CUPTI_PROFILER_CONFIGURATION_UNSUPPORTED: return "unsupported";
    case CUPTI_PROFILER_CONFIGURATION_DISABLED: return "disabled";
    case CUPTI_PROFILER_CONFIGURATION_SUPPORTED: return "supported";
    default: return "unknown";
  }
}

/// Runs a caller's step; an exception becomes its error.
expected<void> run_step(const metrics_pass::step& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    return unexpected(error{fmt::format("threw: {}", e.what())});
  } catch (...) {
    return unexpected(error{"threw a non-standard exception"});
  }
}

}  // namespace

struct metrics_pass::state {
  const rp_api* api = nullptr;
  const driver_api* drv = nullptr;
  CUcontext ctx = nullptr;
  int device = 0;
  std::vector<std::string> metrics{};
  std::vector<const char*> names{};  // into `metrics`, which never changes after open
  std::string chip{};
  std::vector<std::uint8_t> counter_availability{};
  config cfg{};
  bool profiler_acquired = false;
  bool abandoned = false;
  // A range profiler a failed measure left enabled (and maybe started, with
  // the range pushed): disabled by cleanup().
  CUpti_RangeProfiler_Object* live = nullptr;
  bool started = false;
  bool pushed = false;

  /// Pops, stops and disables what a failed measure left, ignoring errors.
  void cleanup() noexcept {
    if (!live || abandoned) return;
    if (pushed) {
      auto p = SPECGEN_RP_PARAMS(CUpti_RangeProfiler_PopRange_Params);
      p.pRangeProfilerObject = live;
      (void)api->cuptiRangeProfilerPopRange(&p);
    }
    if (started) {
      auto p = SPECGEN_RP_PARAMS(CUpti_RangeProfiler_Stop_Params);
      p.pRangeProfilerObject = live;
      (void)api->cuptiRangeProfilerStop(&p);
    }
    auto d = SPECGEN_RP_PARAMS(CUpti_RangeProfiler_Disable_Params);
    d.pRangeProfilerObject = live;
    (void)api->cuptiRangeProfilerDisable(&d);
    live = nullptr;
    started = pushed = false;
  }

  ~state() {
    if (abandoned) {
      // No CUPTI call: the GPU may be hung and the worker is about to exit.
      cfg.host.leak();
      return;
    }
    cleanup();
    cfg.host.reset();
    if (profiler_acquired) release_profiler(*api);
  }
};

std::vector<std::string> default_metric_names() {
  return {"dram__throughput.avg.pct_of_peak_sustained_elapsed",
          "dram__bytes.sum",
          "dram__bytes.sum.per_second",
          "lts__throughput.avg.pct_of_peak_sustained_elapsed",
          "sm__throughput.avg.pct_of_peak_sustained_elapsed",
          "sm__warps_active.avg.pct_of_peak_sustained_active",
          "gpu__time_duration.sum",
          "gpc__cycles_elapsed.max"};
}

expected<std::string> probe_range_profiler(const std::vector<std::string>& candidates) {
  return open_range_profiler(candidates).transform([](const rp_api& api) { return api.library; });
}

expected<std::size_t> metric_passes(const std::string& chip, const std::vector<std::string>& metrics) {
  try {
    const auto& loaded = load_range_profiler();
    if (!loaded) return unexpected(error{fmt::format("range profiler: {}", loaded.error().message)});
    auto names = c_names(metrics);
    return make_config(**loaded, chip, nullptr, names).transform([](const config& c) { return c.passes; });
  } catch (const std::exception& e) {
    return unexpected(error{fmt::format("range profiler: {}", e.what())});
  }
}

metrics_pass::metrics_pass(std::unique_ptr<state> s) noexcept : s_(std::move(s)) {}
metrics_pass::metrics_pass(metrics_pass&&) noexcept = default;
metrics_pass& metrics_pass::operator=(metrics_pass&&) noexcept = default;
metrics_pass::~metrics_pass() = default;

std::size_t metrics_pass::passes() const noexcept { return s_ ? s_->cfg.passes : 0; }
const std::string& metrics_pass::chip() const noexcept {
  static const std::string none;
  return s_ ? s_->chip : none;
}
const std::vector<std::string>& metrics_pass::metric_names() const noexcept {
  static const std::vector<std::string> none;
  return s_ ? s_->metrics : none;
}
void metrics_pass::abandon() noexcept {
  if (s_) s_->abandoned = true;
}
void metrics_pass::cleanup() noexcept {
  if (s_) s_->cleanup();
}

expected<metrics_pass> metrics_pass::open(CUcontext ctx, int device_ordinal, std::vector<std::string> metric_names) {
  try {
    // 1. libcupti with every function of the pass (and libnvperf_host.so next to it).
    const auto& loaded = load_range_profiler();
    if (!loaded) return unexpected(error{fmt::format("range profiler: {}", loaded.error().message)});
    const rp_api& api = **loaded;
    if (metric_names.empty()) return unexpected(error{"range profiler: no metrics to measure"});
    // 2. The driver (the same process-wide one the runtime uses) and the context.
    const auto& drv_or = load_driver();
    if (!drv_or) return unexpected(error{fmt::format("range profiler: {}", drv_or.error().message)});
    const driver_api& drv = **drv_or;
    if (!ctx) return unexpected(error{"range profiler: no CUDA context to profile"});

    auto s = std::make_unique<state>();
    s->api = &api;
    s->drv = &drv;
    s->ctx = ctx;
    s->device = device_ordinal;
    s->metrics = std::move(metric_names);
    s->names = c_names(s->metrics);
    if (CUresult r = drv.cuCtxSetCurrent(ctx); r != CUDA_SUCCESS) return unexpected(cuda_failed(drv, "cuCtxSetCurrent", r));

    // 3. CUPTI's profiler (once per process while any pass is open).
    if (auto a = acquire_profiler(api); !a) return unexpected(a.error());
    s->profiler_acquired = true;

    // 4. Whether this device can be profiled at all, and why not.
    CUdevice dev = 0;
    if (CUresult r = drv.cuDeviceGet(&dev, device_ordinal); r != CUDA_SUCCESS)
      return unexpected(cuda_failed(drv, fmt::format("cuDeviceGet({})", device_ordinal), r));
    auto supported = SPECGEN_RP_PARAMS(CUpti_Profiler_DeviceSupported_Params);
    supported.cuDevice = dev;
    supported.api = CUPTI_PROFILER_RANGE_PROFILING;
    if (CUptiResult r = api.cuptiProfilerDeviceSupported(&supported); r != CUPTI_SUCCESS)
      return unexpected(failure(api, "cuptiProfilerDeviceSupported", r));
    if (supported.isSupported != CUPTI_PROFILER_CONFIGURATION_SUPPORTED) {
      std::string why;
      const std::pair<const char*, CUpti_Profiler_Support_Level> parts[] = {
          {"architecture", supported.architecture}, {"SLI", supported.sli},
          {"vGPU", supported.vGpu},                 {"confidential computing", supported.confidentialCompute},
          {"CMP", supported.cmp},                   {"WSL", supported.wsl}};
      for (const auto& [what, level] : parts)
        if (level != CUPTI_PROFILER_CONFIGURATION_SUPPORTED)
          why += fmt::format("{}{}: {}", why.empty() ? "" : ", ", what, level_name(level));
      return unexpected(error{fmt::format("range profiler: device {} does not support range profiling ({}: {})",
                                          device_ordinal, level_name(supported.isSupported),
                                          why.empty() ? "no reason given" : why)});
    }

    // 5. The chip's name and the counters this context can use.
    auto chip = SPECGEN_RP_PARAMS(CUpti_Device_GetChipName_Params);
    chip.deviceIndex = static_cast<std::size_t>(device_ordinal);
    if (CUptiResult r = api.cuptiDeviceGetChipName(&chip); r != CUPTI_SUCCESS || !chip.pChipName)
      return unexpected(failure(api, fmt::format("cuptiDeviceGetChipName({})", device_ordinal), r));
    s->chip = chip.pChipName;
    auto avail = SPECGEN_RP_PARAMS(CUpti_Profiler_GetCounterAvailability_Params);
    avail.ctx = ctx;
    avail.pCounterAvailabilityImage = nullptr;  // first the size
    if (CUptiResult r = api.cuptiProfilerGetCounterAvailability(&avail); r != CUPTI_SUCCESS)
      return unexpected(failure(api, "cuptiProfilerGetCounterAvailability (size)", r));
    s->counter_availability.assign(avail.counterAvailabilityImageSize, 0);
    avail.pCounterAvailabilityImage = s->counter_availability.data();
    if (CUptiResult r = api.cuptiProfilerGetCounterAvailability(&avail); r != CUPTI_SUCCESS)
      return unexpected(failure(api, "cuptiProfilerGetCounterAvailability", r));

    // 6. The config image: which counters each pass collects.
    auto cfg = make_config(api, s->chip, s->counter_availability.data(), s->names);
    if (!cfg) return unexpected(cfg.error());
    s->cfg = std::move(*cfg);

    // 7. Enable and disable once, so that missing permissions show here.
    auto enable = SPECGEN_RP_PARAMS(CUpti_RangeProfiler_Enable_Params);
    enable.ctx = ctx;
    if (CUptiResult r = api.cuptiRangeProfilerEnable(&enable); r != CUPTI_SUCCESS)
      return unexpected(failure(api, "cuptiRangeProfilerEnable", r));
    auto disable = SPECGEN_RP_PARAMS(CUpti_RangeProfiler_Disable_Params);
    disable.pRangeProfilerObject = enable.pRangeProfilerObject;
    if (CUptiResult r = api.cuptiRangeProfilerDisable(&disable); r != CUPTI_SUCCESS)
      return unexpected(failure(api, "cuptiRangeProfilerDisable", r));
    return metrics_pass(std::move(s));
  } catch (const std::exception& e) {
    return unexpected(error{fmt::format("range profiler: open failed: {}", e.what())});
  }
}

expected<range_metrics> metrics_pass::measure(const step& launch_once, const step& before_pass) {
  if (!s_) return unexpected(error{"range profiler: measure on a moved-from pass"});
  state& s = *s_;
  if (s.abandoned) return unexpected(error{"range profiler: abandoned after a fault or a timeout"});
  if (!launch_once) return unexpected(error{"range profiler: no launch step"});
  const rp_api& api = *s.api;
  const driver_api& drv = *s.drv;
  try {
    const auto t0 = std::chrono::steady_clock::now();
    s.cleanup();  // what an earlier failed measure left
    // Every failure of a CUPTI call below disables the profiler at once; a
    // failed step or CUDA call leaves it to cleanup() (see the header).
    const auto cupti_error = [&](std::string_view step, CUptiResult r) {
      error e = failure(api, step, r);
      s.cleanup();
      return unexpected(std::move(e));
    };

    // Nothing queued earlier may run inside the range.
    if (CUresult r = drv.cuCtxSetCurrent(s.ctx); r != CUDA_SUCCESS) return unexpected(cuda_failed(drv, "cuCtxSetCurrent", r));
    if (CUresult r = drv.cuCtxSynchronize(); r != CUDA_SUCCESS)
      return unexpected(cuda_failed(drv, "cuCtxSynchronize before profiling", r));

    auto enable = SPECGEN_RP_PARAMS(CUpti_RangeProfiler_Enable_Params);
    enable.ctx = s.ctx;
    if (CUptiResult r = api.cuptiRangeProfilerEnable(&enable); r != CUPTI_SUCCESS)
      return unexpected(failure(api, "cuptiRangeProfilerEnable", r));
    s.live = enable.pRangeProfilerObject;

    // One range: the counter data image holds one range, one tree node.
    auto size = SPECGEN_RP_PARAMS(CUpti_RangeProfiler_GetCounterDataSize_Params);
    size.pRangeProfilerObject = s.live;
    size.pMetricNames = s.names.data();
    size.numMetrics = s.names.size();
    size.maxNumOfRanges = 1;
    size.maxNumRangeTreeNodes = 1;
    if (CUptiResult r = api.cuptiRangeProfilerGetCounterDataSize(&size); r != CUPTI_SUCCESS)
      return cupti_error("cuptiRangeProfilerGetCounterDataSize", r);
    std::vector<std::uint8_t> counter_data(size.counterDataSize, 0);
    auto init = SPECGEN_RP_PARAMS(CUpti_RangeProfiler_CounterDataImage_Initialize_Params);
    init.pRangeProfilerObject = s.live;
    init.counterDataSize = counter_data.size();
    init.pCounterData = counter_data.data();
    if (CUptiResult r = api.cuptiRangeProfilerCounterDataImageInitialize(&init); r != CUPTI_SUCCESS)
      return cupti_error("cuptiRangeProfilerCounterDataImageInitialize", r);

    auto set = SPECGEN_RP_PARAMS(CUpti_RangeProfiler_SetConfig_Params);
    set.pRangeProfilerObject = s.live;
    set.configSize = s.cfg.image.size();
    set.pConfig = s.cfg.image.data();
    set.counterDataImageSize = counter_data.size();
    set.pCounterDataImage = counter_data.data();
    set.range = CUPTI_UserRange;
    set.replayMode = CUPTI_UserReplay;
    set.maxRangesPerPass = 1;
    set.numNestingLevels = 1;
    set.minNestingLevel = 1;
    set.passIndex = 0;
    set.targetNestingLevel = 1;
    if (CUptiResult r = api.cuptiRangeProfilerSetConfig(&set); r != CUPTI_SUCCESS)
      return cupti_error("cuptiRangeProfilerSetConfig", r);

    range_metrics out;
    const std::size_t limit = s.cfg.passes + 2;  // CUPTI should be done after cfg.passes
    for (bool all_submitted = false; !all_submitted;) {
      const std::size_t pass = out.passes;
      if (pass >= limit)
        return cupti_error(fmt::format("cuptiRangeProfilerStop after {} passes (the config image has {}): CUPTI still "
                                       "wants more",
                                       pass, s.cfg.passes),
                           CUPTI_ERROR_UNKNOWN);
      const auto where = [&](std::string_view what) {
        return fmt::format("pass {} of {}: {}", pass + 1, s.cfg.passes, what);
      };
      if (before_pass)
        if (auto b = run_step(before_pass); !b)
          return unexpected(error{
              fmt::format("range profiler: {}", where(fmt::format("before_pass failed: {}", b.error().message)))});
      if (CUresult r = drv.cuCtxSynchronize(); r != CUDA_SUCCESS)
        return unexpected(cuda_failed(drv, where("cuCtxSynchronize after before_pass"), r));

      auto start = SPECGEN_RP_PARAMS(CUpti_RangeProfiler_Start_Params);
      start.pRangeProfilerObject = s.live;
      if (CUptiResult r = api.cuptiRangeProfilerStart(&start); r != CUPTI_SUCCESS)
        return cupti_error(where("cuptiRangeProfilerStart"), r);
      s.started = true;
      auto push = SPECGEN_RP_PARAMS(CUpti_RangeProfiler_PushRange_Params);
      push.pRangeProfilerObject = s.live;
      push.pRangeName = "specgen";
      if (CUptiResult r = api.cuptiRangeProfilerPushRange(&push); r != CUPTI_SUCCESS)
        return cupti_error(where("cuptiRangeProfilerPushRange"), r);
      s.pushed = true;

      if (auto l = run_step(launch_once); !l)
        return unexpected(
            error{fmt::format("range profiler: {}", where(fmt::format("launch failed: {}", l.error().message)))});
      // launch_once waited already; this only makes sure nothing is left in the range.
      if (CUresult r = drv.cuCtxSynchronize(); r != CUDA_SUCCESS)
        return unexpected(cuda_failed(drv, where("cuCtxSynchronize after the launch"), r));

      auto pop = SPECGEN_RP_PARAMS(CUpti_RangeProfiler_PopRange_Params);
      pop.pRangeProfilerObject = s.live;
      if (CUptiResult r = api.cuptiRangeProfilerPopRange(&pop); r != CUPTI_SUCCESS)
        return cupti_error(where("cuptiRangeProfilerPopRange"), r);
      s.pushed = false;
      auto stop = SPECGEN_RP_PARAMS(CUpti_RangeProfiler_Stop_Params);
      stop.pRangeProfilerObject = s.live;
      if (CUptiResult r = api.cuptiRangeProfilerStop(&stop); r != CUPTI_SUCCESS)
        return cupti_error(where("cuptiRangeProfilerStop"), r);
      s.started = false;
      all_submitted = stop.isAllPassSubmitted != 0;
      ++out.passes;
    }

    // Decode (synchronises the context), then the profiler is not needed any more.
    auto decode = SPECGEN_RP_PARAMS(CUpti_RangeProfiler_DecodeData_Params);
    decode.pRangeProfilerObject = s.live;
    if (CUptiResult r = api.cuptiRangeProfilerDecodeData(&decode); r != CUPTI_SUCCESS)
      return cupti_error("cuptiRangeProfilerDecodeData", r);
    auto disable = SPECGEN_RP_PARAMS(CUpti_RangeProfiler_Disable_Params);
    disable.pRangeProfilerObject = s.live;
    const CUptiResult disabled = api.cuptiRangeProfilerDisable(&disable);
    s.live = nullptr;
    if (disabled != CUPTI_SUCCESS) return unexpected(failure(api, "cuptiRangeProfilerDisable", disabled));
    if (decode.numOfRangeDropped != 0)
      return unexpected(
          error{fmt::format("range profiler: {} range(s) dropped while decoding", decode.numOfRangeDropped)});

    auto info = SPECGEN_RP_PARAMS(CUpti_RangeProfiler_GetCounterDataInfo_Params);
    info.pCounterDataImage = counter_data.data();
    info.counterDataImageSize = counter_data.size();
    if (CUptiResult r = api.cuptiRangeProfilerGetCounterDataInfo(&info); r != CUPTI_SUCCESS)
      return unexpected(failure(api, "cuptiRangeProfilerGetCounterDataInfo", r));
    if (info.numTotalRanges == 0)
      return unexpected(error{"range profiler: the counter data holds no range (did launch_once launch anything?)"});

    std::vector<double> values(s.names.size(), 0.0);
    auto eval = SPECGEN_RP_PARAMS(CUpti_Profiler_Host_EvaluateToGpuValues_Params);
    eval.pHostObject = s.cfg.host.get();
    eval.pCounterDataImage = counter_data.data();
    eval.counterDataImageSize = counter_data.size();
    eval.rangeIndex = 0;
    eval.ppMetricNames = s.names.data();
    eval.numMetrics = s.names.size();
    eval.pMetricValues = values.data();
    if (CUptiResult r = api.cuptiProfilerHostEvaluateToGpuValues(&eval); r != CUPTI_SUCCESS)
      return unexpected(failure(api, "cuptiProfilerHostEvaluateToGpuValues", r));
    for (std::size_t i = 0; i < values.size(); ++i) {
      if (std::isfinite(values[i]))
        out.values[s.metrics[i]] = values[i];
      else
        out.not_evaluated.push_back(s.metrics[i]);
    }
    out.seconds_spent = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return out;
  } catch (const std::exception& e) {
    // Only allocations throw here (the steps' exceptions are caught by run_step).
    s.cleanup();
    return unexpected(error{fmt::format("range profiler: measure failed: {}", e.what())});
  }
}

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
