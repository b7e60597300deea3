#pragma once
// The CUDA driver API resolved at run time (dlopen), so nothing links libcuda
// and a machine without a driver gets an error value, not a loader failure.
#include <specgen/detail/config.hpp>
#include <specgen/expected.hpp>
#include <specgen/gpu/device_info.hpp>

#include <cuda.h>

#include <string>
#include <string_view>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {

// Each entry is declared through cuda.h's own macro (cuMemAlloc -> cuMemAlloc_v2),
// and its symbol name is that macro's expansion, so the type and the versioned
// name always agree with the header we compile against.
#define SPECGEN_CUDA_FUNCTIONS(X)                                                                        \
  X(cuGetErrorName) X(cuGetErrorString) X(cuInit) X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName) \
  X(cuDeviceGetAttribute) X(cuDeviceTotalMem) X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease)  \
  X(cuCtxSetCurrent) X(cuStreamCreate) X(cuStreamDestroy) X(cuEventCreate) X(cuEventDestroy)            \
  X(cuEventRecord) X(cuEventQuery) X(cuEventElapsedTime) X(cuMemAlloc) X(cuMemFree) X(cuMemcpyHtoD)     \
  X(cuMemcpyDtoH) X(cuMemsetD8) X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction)            \
  X(cuFuncSetAttribute) X(cuLaunchKernel) X(cuCtxSynchronize) X(cuMemsetD8Async) X(cuMemcpyDtoDAsync)          \
  X(cuCtxResetPersistingL2Cache) X(cuDeviceGetPCIBusId) X(cuMemAllocHost) X(cuMemFreeHost)                     \
  X(cuMemHostRegister) X(cuMemHostUnregister)                                                                 \
  X(cuStreamWaitValue32) X(cuMemHostGetDevicePointer)                                                        \
  /* the GPU KV store (src/gpu/kv): memory of its own, streams, peer and IPC transfers */                      \
  X(cuCtxGetCurrent) X(cuMemGetInfo) X(cuMemHostAlloc) X(cuStreamSynchronize) X(cuStreamWaitEvent)              \
  X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync) X(cuMemcpyPeerAsync) X(cuDeviceCanAccessPeer)                       \
  X(cuCtxEnablePeerAccess) X(cuIpcGetMemHandle) X(cuIpcOpenMemHandle) X(cuIpcCloseMemHandle)                \
  /* the shared-memory poison kernel (smem_poison.hpp): loaded from PTX with its JIT log */                    \
  X(cuModuleLoadDataEx) X(cuFuncGetAttribute)

struct driver_api {
#define SPECGEN_CUDA_MEMBER(fn) decltype(&::fn) fn = nullptr;
  SPECGEN_CUDA_FUNCTIONS(SPECGEN_CUDA_MEMBER)
#undef SPECGEN_CUDA_MEMBER
  std::string library;  ///< the file that was loaded
};

/// The libraries to try, in order: $SPECGEN_CUDA_LIBRARY alone when set.
std::vector<std::string> driver_candidates();

/// Loads and resolves the driver from `candidates` (uncached; for tests).
expected<driver_api, runtime_error> open_driver(const std::vector<std::string>& candidates);

/// The process-wide driver, loaded and initialised (cuInit) on the first call;
/// later calls return the same outcome.
const expected<const driver_api*, runtime_error>& load_driver();

/// "CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered".
std::string describe(const driver_api& api, CUresult r);
/// The error name alone.
std::string error_name(const driver_api& api, CUresult r);

/// Sticky errors leave the context unusable; see the driver API's error docs.
bool is_sticky_error(CUresult r) noexcept;

/// A runtime_error for `r` in `what` ("cuMemAlloc of 4096 bytes").
runtime_error cuda_failure(const driver_api& api, CUresult r, runtime_error::kind k, std::string_view what);

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
