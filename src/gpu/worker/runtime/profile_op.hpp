#pragma once
// The worker's "profile" operation: timed samples of a candidate plan (and,
// interleaved, a baseline), an optional CUPTI cross-check, and a re-check run
// on fresh inputs. The request and response layout is documented in
// docs/gpu-runtime.md, "The profile operation".
#include "run_op.hpp"
#include "worker_state.hpp"

#include <specgen/detail/config.hpp>
#include "gpu/protocol/protocol.hpp"

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {

/// Profiles request `r` on the worker's GPU, creating its context on first use.
run_outcome profile_op(worker_state& w, const request& r);

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
