// See cupti_range_profiler.hpp.
#include "cupti_range_profiler.hpp"

#include "cupti.hpp"
#include "dynlib.hpp"

#include <cuda.h>
#include <fmt/format.h>

#include <dlfcn.h>

#include <utility>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {
namespace {

/// Loads libnvperf_host.so from libcupti's own directory (see the file
/// comment); empty on success, else why not (CUPTI may still find it itself).
std::string preload_nvperf_host(void* cupti_symbol) {
  Dl_info info{};
  if (dladdr(cupti_symbol, &info) == 0 || !info.dli_fname) return "libcupti's directory is unknown (dladdr failed)";
  const std::string cupti = info.dli_fname;
  const auto slash = cupti.rfind('/');
  if (slash == std::string::npos) return fmt::format("libcupti's directory is unknown ({})", cupti);
  const std::string host = cupti.substr(0, slash) + "/libnvperf_host.so";
  // Never closed, like libcupti: CUPTI keeps using it.
  if (dlopen(host.c_str(), RTLD_NOW | RTLD_LOCAL)) return {};
  const char* e = dlerror();
  return fmt::format("{} could not be loaded: {}", host, e ? e : "unknown error");
}

}  // namespace

expected<rp_api> open_range_profiler(const std::vector<std::string>& candidates) {
  // Never closed: CUPTI keeps threads and hooks for the process's life.
  const auto opened = open_first(candidates);
  if (!opened.handle)
    return unexpected(error{fmt::format("libcupti not found ({} could not be loaded: {}); set SPECGEN_CUPTI_LIBRARY "
                                        "to the path of libcupti.so.{}",
                                        opened.tried, opened.last_error, CUDA_VERSION / 1000)});
  rp_api api;
  api.library = opened.loaded;
  std::string missing;
#define SPECGEN_RP_RESOLVE(fn)                                                                  \
  api.fn = reinterpret_cast<decltype(api.fn)>(dlsym(opened.handle, SPECGEN_RP_STRINGIFY(fn))); \
  if (!api.fn) missing += missing.empty() ? SPECGEN_RP_STRINGIFY(fn) : ", " SPECGEN_RP_STRINGIFY(fn);
  SPECGEN_RP_FUNCTIONS(SPECGEN_RP_RESOLVE)
#undef SPECGEN_RP_RESOLVE
  if (api.cuptiGetVersion && api.cuptiGetVersion(&api.version) != CUPTI_SUCCESS) api.version = 0;
  if (!missing.empty())
    return unexpected(error{fmt::format("{} (CUPTI API version {}) lacks {}: the range profiler needs libcupti from "
                                        "CUDA 12.6 Update 2 or newer (these headers are CUDA {}.{}'s)",
                                        opened.loaded, api.version, missing, CUDA_VERSION / 1000,
                                        CUDA_VERSION % 1000 / 10)});
  // Versions 1..28 count releases up to 12.9; 12.6 was 24. From 13.0 on it is 130000 and up.
  if (api.version < 24)
    return unexpected(error{fmt::format("{} is CUPTI API version {}: the range profiler needs CUDA 12.6 "
                                        "Update 2 or newer",
                                        opened.loaded, api.version)});
  api.nvperf_note = preload_nvperf_host(reinterpret_cast<void*>(api.cuptiGetResultString));
  return api;
}

const expected<const rp_api*>& load_range_profiler() {
  static const expected<const rp_api*> loaded = open_range_profiler(cupti_candidates()).transform([](rp_api api) {
    static const rp_api kept = std::move(api);
    return &kept;
  });
  return loaded;
}

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
