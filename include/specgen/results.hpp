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
       {"terminations", s.terminations},
       {"verdicts", s.verdicts}};
}

inline void to_json(nlohmann::json& j, const run_result& r) {
  j = {{"e2e_seconds", r.e2e_seconds},
       {"pool_utilization", r.pool_utilization},
       {"generated_tokens", r.generated_tokens},
       {"profiled_kernels", r.profiled_kernels},
       {"best_speedup_geomean", r.best_speedup_geomean},
       {"events", r.events},
       {"scheduler", r.scheduler},
       {"searches", r.searches}};
}

SPECGEN_END_NAMESPACE
