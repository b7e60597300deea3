#pragma once
// The worker's "run" operation: one launch plan on fresh, guarded buffers.
// The request and response layout is documented in docs/gpu-runtime.md.
#include <specgen/detail/config.hpp>
#include <specgen/gpu/protocol.hpp>
#include <specgen/gpu/runtime.hpp>

#include <memory>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {

struct run_outcome {
  response reply;
  /// A fault or a timeout left the context unusable: answer, then exit.
  bool must_exit = false;
};

/// Runs request `r` on GPU `device`, creating `ctx` on first use.
run_outcome run_op(std::unique_ptr<gpu_context>& ctx, int device, const request& r);

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
