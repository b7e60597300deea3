#pragma once
// What a gpu_context holds behind its CUDA-free public header.
#include "driver.hpp"

#include <specgen/gpu/runtime.hpp>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {

struct context_state {
  const driver_api* api = nullptr;
  device_info info{};
  CUdevice device = 0;
  CUcontext context = nullptr;  // the device's primary context, retained
  CUstream stream = nullptr;    // non-blocking: never serialised with the legacy default stream
  CUevent start = nullptr;
  CUevent stop = nullptr;
  bool usable = true;  // false after a sticky error or a timeout

  /// CUDA_SUCCESS, or the error as a value (marking the context unusable when sticky).
  expected<void, runtime_error> check(CUresult r, runtime_error::kind k, std::string_view what) {
    if (r == CUDA_SUCCESS) return {};
    auto e = cuda_failure(*api, r, k, what);
    if (is_sticky(e.what)) usable = false;
    return unexpected(std::move(e));
  }
  expected<void, runtime_error> require_usable() const;
};

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
