#include "driver.hpp"

#include "dynlib.hpp"

#include <fmt/format.h>

#include <dlfcn.h>

#include <cstdlib>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {
namespace {

#define SPECGEN_STRINGIFY_(x) #x
#define SPECGEN_STRINGIFY(x) SPECGEN_STRINGIFY_(x)

}  // namespace

std::vector<std::string> driver_candidates() {
  if (const char* forced = std::getenv("SPECGEN_CUDA_LIBRARY"); forced && *forced) return {forced};
  return {"libcuda.so.1", "libcuda.so"};
}

expected<driver_api, runtime_error> open_driver(const std::vector<std::string>& candidates) {
  // Never closed: the driver must outlive every context, module and buffer.
  const auto [lib, loaded, tried, last_error] = detail::open_first(candidates);
  if (!lib)
    return unexpected(runtime_error{
        runtime_error::kind::no_driver,
        fmt::format("no NVIDIA driver found ({} could not be loaded): {}; install the NVIDIA driver or set "
                    "SPECGEN_CUDA_LIBRARY to the path of libcuda.so.1",
                    tried, last_error),
        {}});

  driver_api api;
  api.library = loaded;
  std::string missing;
#define SPECGEN_CUDA_RESOLVE(fn)                                                                  \
  api.fn = reinterpret_cast<decltype(api.fn)>(dlsym(lib, SPECGEN_STRINGIFY(fn)));                 \
  if (!api.fn) missing += missing.empty() ? SPECGEN_STRINGIFY(fn) : ", " SPECGEN_STRINGIFY(fn);
  SPECGEN_CUDA_FUNCTIONS(SPECGEN_CUDA_RESOLVE)
#undef SPECGEN_CUDA_RESOLVE
  if (!missing.empty())
    return unexpected(runtime_error{
        runtime_error::kind::no_driver,
        fmt::format("the NVIDIA driver {} lacks {}; a driver for CUDA {}.{} or newer is needed", loaded, missing,
                    CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10),
        {}});
  return api;
}

const expected<const driver_api*, runtime_error>& load_driver() {
  static const expected<const driver_api*, runtime_error> loaded =
      open_driver(driver_candidates()).and_then([](driver_api api) -> expected<const driver_api*, runtime_error> {
        static const driver_api kept = std::move(api);
        if (CUresult r = kept.cuInit(0); r != CUDA_SUCCESS)
          return unexpected(cuda_failure(kept, r,
                                         r == CUDA_ERROR_NO_DEVICE ? runtime_error::kind::no_device
                                                                   : runtime_error::kind::no_driver,
                                         fmt::format("cuInit (driver {})", kept.library)));
        return &kept;
      });
  return loaded;
}

std::string error_name(const driver_api& api, CUresult r) {
  const char* name = nullptr;
  if (api.cuGetErrorName(r, &name) != CUDA_SUCCESS || !name) return fmt::format("CUresult {}", static_cast<int>(r));
  return name;
}

std::string describe(const driver_api& api, CUresult r) {
  const char* text = nullptr;
  if (api.cuGetErrorString(r, &text) != CUDA_SUCCESS || !text) return error_name(api, r);
  return fmt::format("{}: {}", error_name(api, r), text);
}

bool is_sticky_error(CUresult r) noexcept {
  switch (r) {
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_ECC_UNCORRECTABLE:
    case CUDA_ERROR_CONTEXT_IS_DESTROYED: return true;
    default: return false;
  }
}

runtime_error cuda_failure(const driver_api& api, CUresult r, runtime_error::kind k, std::string_view what) {
  if (is_sticky_error(r)) k = runtime_error::kind::fault;
  if (r == CUDA_ERROR_OUT_OF_MEMORY) k = runtime_error::kind::out_of_memory;
  return {k, fmt::format("{} failed: {}", what, describe(api, r)), error_name(api, r)};
}

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
