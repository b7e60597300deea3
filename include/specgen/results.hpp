#pragma once
/// The results file of a run: JSON for `run_result` and `search_result`.
#include <specgen/detail/config.hpp>
#include <specgen/engine.hpp>
#include <specgen/json.hpp>

#include <nlohmann/json.hpp>

SPECGEN_BEGIN_NAMESPACE

inline void to_json(nlohmann::json& j, const search_result& s) {
  j = {{"search", s.search},
       {"task", s.task},
       {"rounds", s.rounds},
       {"end_reason", s.end_reason},
       {"best_speedup", s.best_speedup},
       {"best_candidate", s.best},
       {"end_seconds", s.end_seconds},
       {"seconds_to_target", s.seconds_to_target ? nlohmann::json(*s.seconds_to_target) : nlohmann::json(nullptr)},
       {"usage", s.tokens},
       {"generated_tokens", s.generated_tokens},
       {"candidates", s.candidates},
       {"from_forks", s.from_forks},
       {"forks", s.forks},
       {"forks_skipped", s.forks_skipped},
       {"extract_failures", s.extract_failures},
       {"compiled_ok", s.compiled_ok},
       {"validated_ok", s.validated_ok},
       {"profiled", s.profiled},
       {"cancelled", s.cancelled},
       {"reused", s.reused},
       {"unjudged", s.unjudged},
       {"terminations", s.terminations},
       {"stream_failures", s.stream_failures},
       {"first_stream_error", s.first_stream_error.empty() ? nlohmann::json(nullptr) : nlohmann::json(s.first_stream_error)},
       {"every_stream_failed", s.every_stream_failed()},
       {"verdicts", s.verdicts}};
}

inline void to_json(nlohmann::json& j, const run_segment& s) {
  j = {{"start_seconds", s.start_seconds}, {"end_seconds", s.end_seconds}, {"completed", s.completed}};
}

inline void to_json(nlohmann::json& j, const run_result& r) {
  j = {{"e2e_seconds", r.e2e_seconds},
       {"pool_utilization", r.pool_utilization},
       {"pool_utilization_covers", r.pool_utilization_whole_run ? "run" : "last segment"},
       {"idle_while_queued_seconds", r.idle_while_queued_seconds},
       {"generated_tokens", r.generated_tokens},
       {"profiled_kernels", r.profiled_kernels},
       {"stream_failures", r.stream_failures},
       {"best_speedup_geomean", r.best_speedup_geomean},
       {"events", r.events},
       {"scheduler", r.scheduler},
       {"segments", r.segments},
       {"searches", r.searches}};
}

SPECGEN_END_NAMESPACE
