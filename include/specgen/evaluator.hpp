#pragma once
/// The evaluator concept: compile, validate and profile candidates.
///
/// Implemented by the GPU runtime (a worker process per GPU) and by the
/// simulated device (a cost table in virtual time). The engine's scheduler owns
/// the queues and the pool policy; an evaluator runs one job per device at a
/// time, on the device the scheduler picked, and reports busy time.
///
/// Compilation runs on CPU slots (`compile_slots()`), validation and profiling
/// on devices `0 .. devices()-1`. Results arrive on the loop thread.
#include <specgen/detail/config.hpp>
#include <specgen/task.hpp>
#include <specgen/types.hpp>

#include <concepts>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

SPECGEN_BEGIN_NAMESPACE

using job_id = std::uint64_t;

struct eval_job {
  job_id id = 0;
  stage kind = stage::compile;
  int device = -1;                              ///< -1 for compile jobs
  std::shared_ptr<const candidate> cand{};
  std::shared_ptr<const task> for_task{};
};

struct eval_outcome {
  job_id id = 0;
  stage kind = stage::compile;
  int device = -1;
  bool cancelled = false;            ///< the job was cancelled; `result` is meaningless
  /// The evaluator cannot judge this kernel (the simulated device has no
  /// measurement of it, say): `result.summary` says why, and its kind means
  /// nothing. The candidate gets no verdict, since one the evaluator did not
  /// obtain would be made up.
  bool unjudged = false;
  verdict result{};                    ///< for compile: ok or compile_error / invalid_plan
  compile_report compile{};            ///< for compile jobs
  std::optional<measurement> timing{}; ///< for profile jobs with an ok verdict
  duration busy{0};                  ///< device (or compile slot) time the job held
};

using eval_callback = std::function<void(eval_outcome)>;

template <class E>
concept evaluator = requires(E& e, const E& ce, eval_job j, eval_callback cb, job_id id) {
  { ce.devices() } -> std::convertible_to<int>;
  { ce.compile_slots() } -> std::convertible_to<int>;
  /// Start a job. For validate/profile jobs `j.device` is free (the caller
  /// guarantees one job per device). `cb` is called exactly once.
  { e.submit(std::move(j), std::move(cb)) } -> std::same_as<void>;
  /// Cancel a queued or running job; its callback reports `cancelled`.
  { e.cancel(id) } -> std::same_as<bool>;
};

SPECGEN_END_NAMESPACE
