// NVML through dlopen, with the declarations nvml.h would give (the ABI is
// stable: these entry points have not changed since NVML 2.285 / CUDA 5).
#include "nvml.hpp"

#include "dynlib.hpp"

#include <fmt/format.h>

#include <dlfcn.h>

#include <cstdlib>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {
namespace {

// nvml.h: typedef enum nvmlReturn_enum {NVML_SUCCESS = 0, ...} nvmlReturn_t;
// typedef struct nvmlDevice_st* nvmlDevice_t; typedef enum nvmlClockType_enum
// {NVML_CLOCK_GRAPHICS = 0, NVML_CLOCK_SM = 1, NVML_CLOCK_MEM = 2, ...}.
using nvml_return = int;
using nvml_device_handle = void*;
constexpr nvml_return nvml_success = 0;
constexpr int nvml_clock_sm = 1;
constexpr int nvml_clock_mem = 2;

struct nvml_api {
  nvml_return (*init)() = nullptr;                                                       // nvmlInit_v2
  nvml_return (*handle_by_pci_bus_id)(const char*, nvml_device_handle*) = nullptr;      // nvmlDeviceGetHandleByPciBusId_v2
  nvml_return (*clock_info)(nvml_device_handle, int, unsigned*) = nullptr;              // nvmlDeviceGetClockInfo
  nvml_return (*max_clock_info)(nvml_device_handle, int, unsigned*) = nullptr;          // nvmlDeviceGetMaxClockInfo
  nvml_return (*memory_bus_width)(nvml_device_handle, unsigned*) = nullptr;             // nvmlDeviceGetMemoryBusWidth
  const char* (*error_string)(nvml_return) = nullptr;                                    // nvmlErrorString
};

template <class F>
void resolve(void* lib, F& fn, const char* name) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
}

std::string nvml_error(const nvml_api& api, nvml_return r) {
  const char* text = api.error_string ? api.error_string(r) : nullptr;
  return text ? fmt::format("{} (NVML error {})", text, r) : fmt::format("NVML error {}", r);
}

/// NVML loaded and initialised once per process (never shut down: the
/// worker exits without destructors after a fault anyway).
const expected<const nvml_api*>& load_nvml() {
  static const expected<const nvml_api*> loaded = []() -> expected<const nvml_api*> {
    const auto opened = open_first(nvml_candidates());
    if (!opened.handle)
      return unexpected(error{fmt::format("NVML not found ({} could not be loaded: {}); set SPECGEN_NVML_LIBRARY to "
                                          "the path of libnvidia-ml.so.1",
                                          opened.tried, opened.last_error)});
    static nvml_api api;
    resolve(opened.handle, api.init, "nvmlInit_v2");
    resolve(opened.handle, api.handle_by_pci_bus_id, "nvmlDeviceGetHandleByPciBusId_v2");
    resolve(opened.handle, api.clock_info, "nvmlDeviceGetClockInfo");
    resolve(opened.handle, api.max_clock_info, "nvmlDeviceGetMaxClockInfo");
    resolve(opened.handle, api.memory_bus_width, "nvmlDeviceGetMemoryBusWidth");
    resolve(opened.handle, api.error_string, "nvmlErrorString");
    if (!api.init || !api.handle_by_pci_bus_id || !api.clock_info)
      return unexpected(error{fmt::format(
          "{} lacks nvmlInit_v2, nvmlDeviceGetHandleByPciBusId_v2 or nvmlDeviceGetClockInfo", opened.loaded)});
    if (nvml_return r = api.init(); r != nvml_success)
      return unexpected(error{fmt::format("nvmlInit_v2 failed: {}", nvml_error(api, r))});
    return &api;
  }();
  return loaded;
}

}  // namespace

std::vector<std::string> nvml_candidates() {
  if (const char* forced = std::getenv("SPECGEN_NVML_LIBRARY"); forced && *forced) return {forced};
  return {"libnvidia-ml.so.1"};
}

expected<nvml_device> nvml_device::open(const std::string& pci_bus_id) {
  const auto& api = load_nvml();
  if (!api) return unexpected(api.error());
  nvml_device_handle h = nullptr;
  if (nvml_return r = (*api)->handle_by_pci_bus_id(pci_bus_id.c_str(), &h); r != nvml_success)
    return unexpected(
        error{fmt::format("NVML does not know the GPU at PCI {}: {}", pci_bus_id, nvml_error(**api, r))});
  return nvml_device(h);
}

std::optional<unsigned> nvml_device::sm_clock_mhz() const {
  unsigned mhz = 0;
  if ((*load_nvml())->clock_info(handle_, nvml_clock_sm, &mhz) != nvml_success) return std::nullopt;
  return mhz;
}

std::optional<unsigned> nvml_device::max_memory_clock_mhz() const {
  const nvml_api& api = **load_nvml();
  unsigned mhz = 0;
  if (!api.max_clock_info || api.max_clock_info(handle_, nvml_clock_mem, &mhz) != nvml_success || mhz == 0)
    return std::nullopt;
  return mhz;
}

std::optional<unsigned> nvml_device::memory_bus_width_bits() const {
  const nvml_api& api = **load_nvml();
  unsigned bits = 0;
  if (!api.memory_bus_width || api.memory_bus_width(handle_, &bits) != nvml_success || bits == 0) return std::nullopt;
  return bits;
}

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
