#pragma once
// CUPTI's activity API, loaded at run time (dlopen), for the profile op's
// cross-check: which kernels really ran, on which stream, for how long.
// A machine without libcupti only loses the cross-check.
#include <specgen/detail/config.hpp>
#include <specgen/expected.hpp>

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {

/// The libraries to try, in order: $SPECGEN_CUPTI_LIBRARY alone when set;
/// else libcupti.so.<CUDA major> and libcupti.so on the loader's path, the
/// toolkit's usual places under /usr/local/cuda, and the library (or its
/// directory) CMake's CUDAToolkit found at build time.
std::vector<std::string> cupti_candidates();

/// Loads libcupti from `candidates` and resolves what the activity pass
/// needs (uncached; for tests): the file loaded, or why none could be.
expected<std::string> probe_cupti(const std::vector<std::string>& candidates);

/// One kernel as a CUPTI activity record reports it.
struct kernel_record {
  std::string name;
  std::uint64_t start_ns = 0;
  std::uint64_t end_ns = 0;
  std::uint32_t stream_id = 0;
};

/**
 * Concurrent-kernel activity recording, from `start` to destruction (which
 * disables it again). One at a time per process. CUPTI's buffers are handed
 * to it through process-wide callbacks registered once.
 */
class cupti_activity {
 public:
  /// Loads libcupti (once per process), enables CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL
  /// and finds `stream`'s id; the error says why CUPTI is not available.
  static expected<std::unique_ptr<cupti_activity>> start(CUcontext context, CUstream stream);
  ~cupti_activity();
  cupti_activity(const cupti_activity&) = delete;
  cupti_activity& operator=(const cupti_activity&) = delete;

  /// CUPTI's id of the stream given to `start`.
  [[nodiscard]] std::uint32_t stream_id() const noexcept { return stream_id_; }
  /// Flushes CUPTI's buffers (forced) and returns the kernel records
  /// completed since the last call. Call after the kernels have finished.
  expected<std::vector<kernel_record>> collect();
  /// CUPTI's clock now, in the records' time base (ns); 0 when it cannot say.
  [[nodiscard]] std::uint64_t timestamp() const;
  /// Records CUPTI dropped for lack of buffer space since the last call
  /// (CUPTI resets its count when asked; 0 when it cannot say).
  [[nodiscard]] std::uint64_t dropped();

 private:
  cupti_activity(CUcontext context, std::uint32_t stream_id) : context_(context), stream_id_(stream_id) {}
  CUcontext context_ = nullptr;
  std::uint32_t stream_id_ = 0;
};

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
