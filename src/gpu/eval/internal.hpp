#pragma once
// Pieces of the GPU evaluator shared by the session and the pool, and tested
// on their own: decoding the worker's answers (never trusting an offset or a
// length), the host-side reference cache, and the compile-and-check step.
#include <specgen/compare.hpp>
#include <specgen/gpu/evaluation.hpp>
#include <specgen/inputs.hpp>
#include <specgen/plan.hpp>
#include <specgen/task_io.hpp>

#include "gpu/common/bounded_cache.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace gpu {

/// Owned reference outputs, in the task's output order.
using output_set = std::vector<std::vector<std::byte>>;

/// Bounded, thread-safe map from a reference key to its outputs; the oldest
/// entries go first when the byte budget is exceeded (lookups do not renew an
/// entry: a reference is computed once per shape and seed, and read in bursts).
/// The newest entry stays even when it alone exceeds the budget.
class reference_cache {
 public:
  // A budget of 0 keeps the newest entry only.
  explicit reference_cache(std::size_t budget_bytes)
      : cache_({.max_entries = budget_bytes == 0 ? std::size_t{1} : 0, .max_bytes = budget_bytes}) {}

  std::shared_ptr<const output_set> find(const std::string& key) const {
    std::lock_guard lock(mutex_);
    const auto* hit = cache_.peek(key);
    return hit ? *hit : nullptr;
  }

  void insert(const std::string& key, std::shared_ptr<const output_set> outputs) {
    std::size_t bytes = 0;
    for (const auto& o : *outputs) bytes += o.size();
    std::lock_guard lock(mutex_);
    if (cache_.contains(key)) return;
    cache_.put(key, std::move(outputs), bytes);
  }

  [[nodiscard]] std::size_t bytes() const {
    std::lock_guard lock(mutex_);
    return cache_.bytes();
  }

 private:
  mutable std::mutex mutex_;
  detail::bounded_cache<std::shared_ptr<const output_set>> cache_;
};

namespace eval_detail {

using json = nlohmann::json;

/// "N=7,M=1000".
inline std::string shape_text(const shape_binding& s) { return specgen::detail::binding_text(s); }

/// Whether the evaluator's validation case `vc` applies to `t`: a case with
/// the inputs' own distributions always does; one that replaces them
/// (`vc.floats`) only where the task's tolerances hold for it: the task lists
/// it in `distributions`, or lists nothing and every floating-point output
/// has a `terms` allowance (which scales with the inputs).
inline bool case_applies(const task& t, const validation_case& vc) {
  if (!vc.floats) return true;
  if (t.distributions) return std::find(t.distributions->begin(), t.distributions->end(), *vc.floats) != t.distributions->end();
  return std::all_of(t.outputs.begin(), t.outputs.end(),
                     [](const tensor_spec& o) { return !specgen::detail::is_float(o.type) || o.tol.terms > 0; });
}

/// One set of inputs a plan runs on: a seed and every input's distribution.
struct input_case {
  std::uint64_t seed = 1;
  std::vector<distribution> dists{};  ///< per task input, in order
  /// Floating-point inputs replaced by their absolute values: the reference on
  /// them gives the magnitude of the terms behind each output.
  bool absolute = false;
  std::optional<distribution> floats{};  ///< the validation case's replacement (for messages)
  /// A stored reference's case (its index in the file): the inputs are sent
  /// from the file instead of generated, and the reference outputs are read
  /// from it. `seed` and `dists` are then unused.
  std::optional<std::size_t> stored{};
  std::string what{};  ///< a stored case's description, for messages
};

/// The inputs of validation case `vc` at validation shape `shape_index`:
/// each input's init (or the task's init for that shape), replaced by
/// `vc.floats` where the input is floating-point and its distribution is a
/// replaceable one (named and random: a stated or constant one is kept).
inline input_case make_case(const task& t, std::size_t shape_index, const validation_case& vc) {
  input_case c{.seed = vc.seed, .dists = {}, .absolute = false, .floats = vc.floats};
  for (const auto& spec : t.inputs) {
    distribution d = spec.init;
    if (shape_index < t.validation_inits.size())
      if (auto it = t.validation_inits[shape_index].find(spec.name); it != t.validation_inits[shape_index].end())
        d = it->second;
    if (vc.floats && specgen::detail::is_float(spec.type) && d.is_replaceable()) d = *vc.floats;
    c.dists.push_back(d);
  }
  return c;
}

/// The inputs of a timed run at the benchmark shape: each input's init, `seed`.
inline input_case own_case(const task& t, std::uint64_t seed) {
  input_case c{.seed = seed, .dists = {}, .absolute = false, .floats = {}};
  for (const auto& spec : t.inputs) c.dists.push_back(spec.init);
  return c;
}

/// "seed 3, uniform float inputs" / "seed 1, the inputs' own distributions" (+ ", x: normal(1000, 1)").
inline std::string case_text(const task& t, const input_case& c) {
  if (c.stored) return c.what.empty() ? fmt::format("stored case {}", *c.stored) : c.what;
  std::string s = fmt::format("seed {}, {}", c.seed,
                              c.floats ? fmt::format("{} float inputs", to_string(*c.floats))
                                       : std::string("the inputs' own distributions"));
  for (std::size_t i = 0; i < t.inputs.size() && i < c.dists.size(); ++i)
    if (!c.dists[i].is_replaceable() && c.dists[i] != t.inputs[i].init)
      s += fmt::format(", {}: {}", t.inputs[i].name, to_string(c.dists[i]));
  return s;
}

/// The run request's inputs for `c`: every input generated by the worker.
inline json inputs_json(const task& t, const input_case& c) {
  json inputs = json::array();
  for (std::size_t i = 0; i < t.inputs.size(); ++i) {
    json in{{"name", t.inputs[i].name}, {"seed", c.seed}, {"distribution", to_string(c.dists.at(i))}};
    if (c.absolute) in["abs"] = true;
    inputs.push_back(std::move(in));
  }
  return inputs;
}

/// Bytes of `t` at `shape`, or why not.
inline expected<std::size_t, error> tensor_bytes(const tensor_spec& t, const shape_binding& shape) {
  auto n = element_count(t, shape);
  if (!n) return unexpected(n.error());
  std::size_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<std::size_t>(*n), size_of(t.type), &bytes))
    return unexpected(error{fmt::format("buffer '{}' is too large to address", t.name)});
  return bytes;
}

/// Content hash of a task: everything that changes its reference outputs.
inline std::uint64_t task_hash(const task& t) { return fnv1a(to_json(t).dump()); }

/// The reference cache key of (task, shape, inputs).
inline std::string reference_key(std::uint64_t task_hash, const shape_binding& shape, const input_case& c) {
  std::vector<std::string> dists;
  for (const auto& d : c.dists) dists.push_back(to_string(d));
  return fmt::format("{:016x}|{}|{}|{}{}", task_hash, shape_text(shape), c.seed, fmt::join(dists, ";"),
                     c.absolute ? "|abs" : "");
}

/// One run of a plan as the worker reported it; outputs point into the
/// response's binary part, in the task's output order.
struct decoded_run {
  double elapsed_ms = 0;
  bool guards_intact = true;
  std::vector<std::string> guards_broken{};
  bool inputs_intact = true;
  std::vector<std::string> inputs_changed{};
  std::vector<std::span<const std::byte>> outputs{};
};

inline expected<std::vector<std::string>> string_list(const json& j, const char* field) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return std::vector<std::string>{};
  if (!it->is_array()) return unexpected(error{fmt::format("\"{}\" is not an array", field)});
  std::vector<std::string> out;
  for (const auto& e : *it) {
    if (!e.is_string()) return unexpected(error{fmt::format("\"{}\" holds a non-string", field)});
    out.push_back(e.get<std::string>());
  }
  return out;
}

inline expected<bool> flag(const json& j, const char* field) {
  auto it = j.find(field);
  if (it == j.end() || !it->is_boolean())
    return unexpected(error{fmt::format("\"{}\" is missing or not a boolean", field)});
  return it->get<bool>();
}

/// Decodes one run entry (`{"elapsed_ms", "guards_intact", ..., "outputs"}`)
/// against `binary` and the byte sizes the task's outputs must have.
/// Every offset and length is checked; nothing here trusts the worker.
inline expected<decoded_run> decode_run(const json& j, std::span<const std::byte> binary, const task& t,
                                        const std::vector<std::size_t>& output_bytes) {
  if (!j.is_object()) return unexpected(error{"a run is not a JSON object"});
  decoded_run r;
  if (auto it = j.find("elapsed_ms"); it != j.end() && it->is_number()) r.elapsed_ms = it->get<double>();
  auto gi = flag(j, "guards_intact");
  if (!gi) return unexpected(gi.error());
  auto ii = flag(j, "inputs_intact");
  if (!ii) return unexpected(ii.error());
  auto gb = string_list(j, "guards_broken");
  if (!gb) return unexpected(gb.error());
  auto ic = string_list(j, "inputs_changed");
  if (!ic) return unexpected(ic.error());
  r.guards_intact = *gi && gb->empty();
  r.guards_broken = std::move(*gb);
  r.inputs_intact = *ii && ic->empty();
  r.inputs_changed = std::move(*ic);
  if (!*gi && r.guards_broken.empty()) r.guards_broken.push_back("?");
  if (!*ii && r.inputs_changed.empty()) r.inputs_changed.push_back("?");
  auto outs = j.find("outputs");
  if (outs == j.end() || !outs->is_array()) return unexpected(error{"\"outputs\" is missing or not an array"});
  for (std::size_t k = 0; k < t.outputs.size(); ++k) {
    const std::string& name = t.outputs[k].name;
    const json* found = nullptr;
    for (const auto& o : *outs)
      if (o.is_object() && o.contains("name") && o["name"].is_string() && o["name"].get<std::string>() == name) {
        if (found) return unexpected(error{fmt::format("output '{}' is listed twice", name)});
        found = &o;
      }
    if (!found) return unexpected(error{fmt::format("output '{}' is missing", name)});
    const json& o = *found;
    auto natural = [&](const char* f) -> std::optional<std::uint64_t> {
      auto it = o.find(f);
      if (it == o.end() || !it->is_number_integer()) return std::nullopt;
      if (it->is_number_unsigned()) return it->get<std::uint64_t>();
      const auto v = it->get<std::int64_t>();
      return v < 0 ? std::nullopt : std::optional<std::uint64_t>(static_cast<std::uint64_t>(v));
    };
    const auto off = natural("offset"), len = natural("length");
    if (!off || !len)
      return unexpected(error{fmt::format("output '{}' needs non-negative integer \"offset\" and \"length\"", name)});
    const std::uint64_t offset = *off, length = *len;
    if (offset > binary.size() || length > binary.size() - offset)
      return unexpected(error{fmt::format("output '{}' (offset {}, length {}) lies outside the {} binary bytes", name,
                                          offset, length, binary.size())});
    if (length != output_bytes[k])
      return unexpected(error{fmt::format("output '{}' has {} bytes; the task's shape needs {}", name, length,
                                          output_bytes[k])});
    r.outputs.push_back(binary.subspan(static_cast<std::size_t>(offset), static_cast<std::size_t>(length)));
  }
  return r;
}

/// The runs of a successful `run` result: `runs` when present (protocol
/// additions), else the top-level fields as the only run.
inline expected<std::vector<decoded_run>> decode_runs(const json& result, std::span<const std::byte> binary,
                                                      const task& t, const std::vector<std::size_t>& output_bytes,
                                                      int expected_runs) {
  std::vector<decoded_run> runs;
  auto it = result.find("runs");
  if (it != result.end() && !it->is_null()) {
    if (!it->is_array()) return unexpected(error{"\"runs\" is not an array"});
    for (const auto& r : *it) {
      auto d = decode_run(r, binary, t, output_bytes);
      if (!d) return unexpected(error{fmt::format("run {}: {}", runs.size() + 1, d.error().message)});
      runs.push_back(std::move(*d));
    }
  } else {
    auto d = decode_run(result, binary, t, output_bytes);
    if (!d) return unexpected(d.error());
    runs.push_back(std::move(*d));
  }
  if (static_cast<int>(runs.size()) != expected_runs)
    return unexpected(error{fmt::format("{} runs reported, {} requested", runs.size(), expected_runs)});
  return runs;
}

/// The median of `v` (0 when empty).
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// The compile options a session uses for `t`: the configured ones, the
/// device's arch when none is configured, the task's options appended.
inline compile_options options_for(const session_config& c, const device_info& d, const task& t) {
  compile_options o = c.compile;
  if (o.arch.empty()) o.arch = d.arch.empty() ? std::string("sm_90a") : d.arch;
  o.options.insert(o.options.end(), t.compile_options.begin(), t.compile_options.end());
  return o;
}

inline std::string first_line(std::string_view s) {
  const auto nl = s.find('\n');
  return std::string(nl == std::string_view::npos ? s : s.substr(0, nl));
}

/// The compile verdict for a compiler failure.
inline verdict compile_failure_verdict(const compile_failure& f) {
  std::string summary = first_line(f.message);
  if (f.kind == compile_failure_kind::timeout) summary = "compilation timed out: " + summary;
  else if (f.kind == compile_failure_kind::unavailable) summary = "NVRTC is not available: " + summary;
  else if (f.kind == compile_failure_kind::internal) summary = "the compiler failed: " + summary;
  return verdict{.kind = verdict_kind::compile_error, .summary = std::move(summary), .log = f.log, .mismatch = {}};
}

/// Parses a candidate's plan (no library calls) and resolves it at every
/// validation shape and the benchmark shape against `limits`; checks that every launched kernel is an
/// entry point of the cubin when ptxas reported any. Empty when fine.
inline std::optional<verdict> check_plan(const task& t, const std::string& plan_text, const device_info& dev,
                                         const compiled* binary) {
  auto invalid = [](std::string summary) {
    return verdict{.kind = verdict_kind::invalid_plan, .summary = std::move(summary), .log = {}, .mismatch = {}};
  };
  auto plan = parse_plan(plan_text);
  if (!plan) return invalid(fmt::format("the plan does not parse: {}", plan.error().what()));
  if (auto refused = check_candidate_plan(*plan)) return invalid(refused->what());
  std::vector<shape_binding> shapes = t.validation_shapes;
  shapes.push_back(t.benchmark_shape);
  for (const auto& s : shapes) {
    auto r = resolve(*plan, t, s, dev.limits);
    if (!r) return invalid(fmt::format("at {}: {}", shape_text(s), r.error().what()));
  }
  if (binary && !binary->kernels.empty()) {
    std::vector<std::string> defined;
    for (const auto& k : binary->kernels) defined.push_back(k.name);
    for (const auto& name : kernel_names(*plan))
      if (std::find(defined.begin(), defined.end(), name) == defined.end())
        return invalid(fmt::format("the plan launches '{}', which the source does not define as an extern \"C\" "
                                   "__global__ kernel (defined: {})",
                                   name, specgen::detail::join_names(defined)));
  }
  return std::nullopt;
}

/// Compile result + plan check -> compile_outcome (the shared compile step
/// of the session and the pool's compile jobs).
inline compile_outcome finish_compile(const task& t, const candidate& c, const device_info& dev,
                                      const compiler::result& r) {
  compile_outcome out;
  if (!r) {
    out.result = compile_failure_verdict(r.error());
    return out;
  }
  out.report = to_report(**r);
  if (auto bad = check_plan(t, c.plan, dev, r->get())) {
    out.result = std::move(*bad);
    out.result.log = (*r)->log;
    return out;
  }
  out.result = verdict{.kind = verdict_kind::ok, .summary = {}, .log = (*r)->log, .mismatch = {}};
  out.binary = *r;
  return out;
}

}  // namespace eval_detail
}  // namespace gpu
SPECGEN_END_NAMESPACE
