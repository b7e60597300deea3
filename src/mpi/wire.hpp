#pragma once
// What crosses between rank 0 and a worker rank: JSON text, through the
// core's (de)serialisation of verdicts, compile reports and measurements, so
// a verdict arrives exactly as it left. docs/distributed.md describes it.
#include <specgen/evaluator.hpp>
#include <specgen/json.hpp>

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

SPECGEN_BEGIN_NAMESPACE
namespace mpi::wire {

/// MPI tags of the messages.
enum tag : int {
  hello = 1,      // worker -> 0: {"devices", "compile_slots", "host", "cores", "device_names"}
  job = 2,        // 0 -> worker: job_message
  result = 3,     // worker -> 0: an eval_outcome
  cancel = 4,     // 0 -> worker: {"id"}
  stop = 5,       // 0 -> worker: {"ranks_lost"}
  heartbeat = 6,  // worker -> 0: {}
};

/// A job as it goes out: only what the worker cannot know already. The task
/// travels by name (every rank loads the same task files).
struct job_message {
  job_id id = 0;
  stage kind = stage::compile;
  int device = -1;  ///< the worker's local device; -1 for compile
  std::string task{};
  std::string source{};
  std::string plan{};
};

inline std::string encode(const job_message& m) {
  nlohmann::json j{{"id", m.id}, {"stage", m.kind},     {"device", m.device},
                   {"task", m.task}, {"source", m.source}, {"plan", m.plan}};
  return j.dump();
}

inline job_message decode_job(std::string_view text) {
  const auto j = nlohmann::json::parse(text);
  job_message m;
  detail::read(j, "id", m.id);
  detail::read(j, "stage", m.kind);
  detail::read(j, "device", m.device);
  detail::read(j, "task", m.task);
  detail::read(j, "source", m.source);
  detail::read(j, "plan", m.plan);
  return m;
}

inline std::string encode(const eval_outcome& o) {
  nlohmann::json j{{"id", o.id},
                   {"stage", o.kind},
                   {"device", o.device},
                   {"cancelled", o.cancelled},
                   {"unjudged", o.unjudged},
                   {"result", o.result},
                   {"compile", o.compile},
                   {"busy_ns", o.busy.count()}};
  if (o.timing) j["timing"] = *o.timing;
  return j.dump();
}

inline eval_outcome decode_outcome(std::string_view text) {
  const auto j = nlohmann::json::parse(text);
  eval_outcome o;
  detail::read(j, "id", o.id);
  detail::read(j, "stage", o.kind);
  detail::read(j, "device", o.device);
  detail::read(j, "cancelled", o.cancelled);
  detail::read(j, "unjudged", o.unjudged);
  detail::read(j, "result", o.result);
  detail::read(j, "compile", o.compile);
  detail::read(j, "timing", o.timing);
  detail::read(j, "busy_ns", o.busy);
  return o;
}

}  // namespace mpi::wire
SPECGEN_END_NAMESPACE
