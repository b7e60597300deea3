#pragma once
// The worker's "run" operation: one launch plan, run `repeats` times on
// guarded buffers with poisoned outputs. The request and response layout is
// documented in docs/gpu-runtime.md.
#include "worker_state.hpp"

#include <specgen/detail/config.hpp>
#include "gpu/protocol/protocol.hpp"

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {

struct run_outcome {
  response reply;
  /// A fault or a timeout left the context unusable: answer, then exit.
  bool must_exit = false;
};

/// Runs request `r` on the worker's GPU, creating its context on first use.
run_outcome run_op(worker_state& w, const request& r);

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
