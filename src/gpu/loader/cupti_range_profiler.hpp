#pragma once
// CUPTI's range profiler API, loaded at run time (dlopen) like the activity
// API (cupti.hpp), for the worker's hardware-metrics pass
// (gpu/worker/runtime/cupti_metrics.hpp). Every function is typed by the CUPTI
// headers we compile against (cupti_range_profiler.h, cupti_profiler_host.h,
// cupti_profiler_target.h, cupti_target.h).
//
// Since CUDA 12.6 Update 2 the host side (config image, number of passes,
// evaluation) is in libcupti itself (cuptiProfilerHost*): nothing calls
// nvperf_host directly. libcupti does dlopen("libnvperf_host.so") by that bare
// name when its host API is first used (seen with LD_DEBUG on CUDA 13.0), which
// only the loader's search path finds; so it is loaded here first, by its full
// path next to the libcupti we loaded, and CUPTI's dlopen then matches it by
// its soname.
#include <specgen/detail/config.hpp>
#include <specgen/expected.hpp>

#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_range_profiler.h>
#include <cupti_result.h>
#include <cupti_target.h>
#include <cupti_version.h>

#include <cstdint>
#include <string>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {

#define SPECGEN_RP_STRINGIFY_(x) #x
#define SPECGEN_RP_STRINGIFY(x) SPECGEN_RP_STRINGIFY_(x)

// Everything the pass calls; a libcupti lacking any of them is too old (the
// range profiler and the host API arrived with CUDA 12.6 Update 2).
#define SPECGEN_RP_FUNCTIONS(X)                                                                                      \
  X(cuptiGetResultString) X(cuptiGetVersion) X(cuptiProfilerInitialize) X(cuptiProfilerDeInitialize)               \
  X(cuptiProfilerDeviceSupported) X(cuptiDeviceGetChipName) X(cuptiProfilerGetCounterAvailability)                 \
  X(cuptiProfilerHostInitialize) X(cuptiProfilerHostDeinitialize) X(cuptiProfilerHostConfigAddMetrics)            \
  X(cuptiProfilerHostGetConfigImageSize) X(cuptiProfilerHostGetConfigImage) X(cuptiProfilerHostGetNumOfPasses)     \
  X(cuptiProfilerHostGetMetricProperties) X(cuptiProfilerHostEvaluateToGpuValues) X(cuptiRangeProfilerEnable)      \
  X(cuptiRangeProfilerDisable) X(cuptiRangeProfilerGetCounterDataSize)                                             \
  X(cuptiRangeProfilerCounterDataImageInitialize) X(cuptiRangeProfilerSetConfig) X(cuptiRangeProfilerStart)        \
  X(cuptiRangeProfilerStop) X(cuptiRangeProfilerPushRange) X(cuptiRangeProfilerPopRange)                           \
  X(cuptiRangeProfilerDecodeData) X(cuptiRangeProfilerGetCounterDataInfo)

/// The range profiler's entry points in one loaded libcupti.
struct rp_api {
#define SPECGEN_RP_MEMBER(fn) decltype(&::fn) fn = nullptr;
  SPECGEN_RP_FUNCTIONS(SPECGEN_RP_MEMBER)
#undef SPECGEN_RP_MEMBER
  std::string library;       ///< the file that was loaded
  std::uint32_t version = 0; ///< cuptiGetVersion: 130000 for CUDA 13.0, 24 for 12.6
  std::string nvperf_note;   ///< why libnvperf_host.so could not be loaded next to libcupti, or empty
};

/// Loads libcupti from `candidates` and resolves the range profiler (uncached;
/// for tests): the API, or why it cannot be used.
expected<rp_api> open_range_profiler(const std::vector<std::string>& candidates);

/// libcupti with the range profiler, loaded once per process from
/// `cupti_candidates()`; later calls return the same outcome.
const expected<const rp_api*>& load_range_profiler();

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
