/// Stand-ins for the names the headers' `@code` examples take as given (a candidate `cand`, a task
/// `task`, a loop, something to `use(...)` a value with), so that each example compiles as written.
/// Only declared: the generated translation units are compiled, never linked or run.
#pragma once

#include <specgen/compare.hpp>
#include <specgen/cost_table.hpp>
#include <specgen/engine.hpp>
#include <specgen/inputs.hpp>
#include <specgen/journal.hpp>
#include <specgen/modes.hpp>
#include <specgen/plan.hpp>
#include <specgen/replay/replay_model.hpp>
#include <specgen/replay/trace_gen.hpp>
#include <specgen/sim/simulated_device.hpp>
#include <specgen/task.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace specgen::doc_examples {

// What an example hands its results to.
template <class... A> void use(A&&...);
template <class... A> void fail(A&&...);
template <class... A> void report(A&&...);
template <class... A> void record(A&&...);
template <class... A> void refuse(A&&...);
template <class... A> void requeue(A&&...);
template <class... A> void submit(A&&...);
template <class... A> void feedback_for_model(A&&...);
template <class... A> void on_code_block(A&&...);
template <class... A> void on_function_complete(A&&...);
template <class... A> void fill(A&&...);
template <class... A> void log(fmt::format_string<A...>, A&&...);
expected<int, error> parse(std::string_view text);

// The values it starts from.
extern event_loop<virtual_clock> loop;
extern candidate cand;
extern task task;
extern tensor_spec spec, y;
extern comparison c;
extern std::vector<std::byte> got, want, got_bytes, want_bytes, want_on_abs_inputs, first_run, second_run;
extern std::vector<std::string> stream;
extern std::string answer, text, source, src, path, prompt, p;
extern std::filesystem::path dir;
extern std::size_t n;
extern int samples, round;
extern std::uint64_t seed, stream_seed;
extern nlohmann::json config_json;
extern std::string tasks_json;
extern std::string corpus_fingerprint;
extern eval_outcome outcome;
extern run_identity journaled;
extern stream_sink& sink;
extern replay::replay_model model;
extern replay::corpus corpus;
extern sim::simulated_device gpus, dev;
extern expected<cost_table, error> table, measured, procedural;
extern cost_entry entry;
extern std::function<void(eval_outcome)> on_validated, on_done;
extern launch_plan plan;
extern verdict candidate_verdict;

}  // namespace specgen::doc_examples
