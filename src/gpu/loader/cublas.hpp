#pragma once
// cuBLAS, loaded at run time (dlopen), for the library calls of trusted plans
// (a task's reference or baseline: `call gemm(...)`, docs/plan-language.md).
// Nothing links libcublas: a worker without it still runs every kernel plan and
// fails only a plan that calls, saying which library it looked for.
#include "driver.hpp"

#include <specgen/expected.hpp>
#include <specgen/plan.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {

/// The libraries to try: $SPECGEN_CUBLAS_LIBRARY alone when set, else the
/// toolkit's major version, then older ones.
std::vector<std::string> cublas_candidates();

/**
 * One cuBLAS handle on one context's stream. Created on the first plan that
 * calls (the handle allocates its workspace then), destroyed with the context.
 *
 * @code
 *   auto blas = cublas_session::open(ctx_state);      // error: "cuBLAS is not available: ..."
 *   blas->enqueue(call, pointers);                     // queued on ctx_state.stream
 * @endcode
 */
class cublas_session {
 public:
  static expected<std::unique_ptr<cublas_session>, runtime_error> open(CUstream stream);
  ~cublas_session();
  cublas_session(const cublas_session&) = delete;
  cublas_session& operator=(const cublas_session&) = delete;

  /// Queues `call` on the session's stream; buffer arguments are looked up in `pointers`.
  expected<void, runtime_error> enqueue(const resolved_call& call, const std::map<std::string, std::uint64_t>& pointers);

  [[nodiscard]] const std::string& library() const noexcept;

 private:
  struct impl;
  explicit cublas_session(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
