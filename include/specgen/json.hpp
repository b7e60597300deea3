#pragma once
/// JSON for the core's value types (nlohmann::json, found by ADL).
///
/// Conventions, the same for every type:
/// - enums are their names (`"wrong_result"`, `"fork"`, `"bf16"`; see names.hpp);
/// - durations and timestamps are integral nanoseconds in a field ending in
///   `_ns`, so a journal replays bit for bit (a double of seconds would not);
/// - a non-finite double (an infinite relative error against a zero
///   reference, say) is the string `"inf"`, `"-inf"` or `"nan"`, because JSON
///   has no such numbers and nlohmann would silently write `null`;
/// - an empty `std::optional` is an absent key;
/// - reading, an absent (or null) key keeps the field's default (so a config
///   may name only what it changes), unknown keys are ignored (so newer
///   journals stay readable: the format is deliberately open), and a present
///   key of the wrong type or an unknown enum name throws
///   `detail::json_read_error` (a `nlohmann::json::exception`) naming the JSON
///   pointer of the value and what is accepted: reading
///   `{"result": {"mismatch": {"max_abs": true}}}` as an evaluation says
///   "/result/mismatch/max_abs: expected a number (or "inf", "-inf", "nan"), found boolean true".
///   The readers of whole files (load_journal, load_report_runs) turn it into
///   an `error` that also names the file and line. json_fields.hpp holds the
///   shared reading pieces.
///
/// @code
///   nlohmann::json j = specgen::verdict{.kind = specgen::verdict_kind::fault, .summary = "illegal address"};
///   // {"kind":"fault","log":"","summary":"illegal address"}
///   auto v = j.get<specgen::verdict>();
///   auto s = nlohmann::json::parse(R"({"temperature": 0.2})").get<specgen::sampling>();  // top_p keeps 0.95
/// @endcode
#include <specgen/backend.hpp>
#include <specgen/detail/config.hpp>
#include <specgen/detail/json_fields.hpp>
#include <specgen/names.hpp>
#include <specgen/task.hpp>
#include <specgen/types.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <array>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

SPECGEN_BEGIN_NAMESPACE

namespace detail {

using json = nlohmann::json;

inline json number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

inline json numbers(const std::vector<double>& v) {
  json out = json::array();
  for (double x : v) out.push_back(number(x));
  return out;
}

inline json numbers(const std::map<std::string, double>& m) {
  json out = json::object();
  for (const auto& [k, x] : m) out[k] = number(x);
  return out;
}

/// Reads key `key` of `j` into `out`: the shared reader of the open formats
/// (json_fields.hpp's `read_key`), under the name the `from_json` overloads
/// of this library use. An absent or null key keeps `out`'s value (an
/// optional becomes empty); a value of the wrong type throws
/// `json_read_error`, whose pointer names the key, nested as deep as it is.
template <class T>
void read(const json& j, std::string_view key, T& out) {
  read_key(j, key, out);
}

/// 16 lower-case hex digits: how content hashes appear in journals.
inline std::string hex(std::uint64_t h) { return fmt::format("{:016x}", h); }

}  // namespace detail

// ---- enums ---------------------------------------------------------------------

inline void to_json(nlohmann::json& j, verdict_kind v) { j = to_string(v); }
inline void from_json(const nlohmann::json& j, verdict_kind& v) {
  detail::read_name(j, v, verdict_names, "verdict");
}
inline void to_json(nlohmann::json& j, origin o) { j = to_string(o); }
inline void from_json(const nlohmann::json& j, origin& o) { detail::read_name(j, o, origin_names, "origin"); }
inline void to_json(nlohmann::json& j, stage s) { j = to_string(s); }
inline void from_json(const nlohmann::json& j, stage& s) { detail::read_name(j, s, stage_names, "stage"); }
inline void to_json(nlohmann::json& j, finish_reason r) { j = to_string(r); }
inline void from_json(const nlohmann::json& j, finish_reason& r) {
  detail::read_name(j, r, finish_reason_names, "finish reason");
}
inline void to_json(nlohmann::json& j, dtype t) { j = to_string(t); }
inline void from_json(const nlohmann::json& j, dtype& t) { detail::read_name(j, t, dtype_names, "dtype"); }
inline void to_json(nlohmann::json& j, const distribution& d) { j = to_string(d); }
inline void from_json(const nlohmann::json& j, distribution& d) {
  if (!j.is_string()) throw detail::json_read_error({}, detail::wrong_type_problem("a distribution (a string)", j));
  auto parsed = parse_distribution(j.get_ref<const std::string&>());
  if (!parsed) throw detail::json_read_error({}, distribution_error(j.get_ref<const std::string&>()));
  d = *parsed;
}

// ---- verdicts and measurements ---------------------------------------------------

inline void to_json(nlohmann::json& j, const mismatch_stats& m) {
  j = {{"output", m.output},
       {"shape", m.shape},
       {"max_abs", detail::number(m.max_abs)},
       {"max_rel", detail::number(m.max_rel)},
       {"count", m.count},
       {"total", m.total},
       {"first_indices", m.first_indices},
       {"nans", m.nans},
       {"worst_index", m.worst_index},
       {"worst_got", detail::number(m.worst_got)},
       {"worst_want", detail::number(m.worst_want)}};
}
inline void from_json(const nlohmann::json& j, mismatch_stats& m) {
  detail::read(j, "output", m.output);
  detail::read(j, "shape", m.shape);
  detail::read(j, "max_abs", m.max_abs);
  detail::read(j, "max_rel", m.max_rel);
  detail::read(j, "count", m.count);
  detail::read(j, "total", m.total);
  detail::read(j, "first_indices", m.first_indices);
  detail::read(j, "nans", m.nans);
  detail::read(j, "worst_index", m.worst_index);
  detail::read(j, "worst_got", m.worst_got);
  detail::read(j, "worst_want", m.worst_want);
}

inline void to_json(nlohmann::json& j, const verdict& v) {
  j = {{"kind", v.kind}, {"summary", v.summary}, {"log", v.log}};
  if (v.mismatch) j["mismatch"] = *v.mismatch;
}
inline void from_json(const nlohmann::json& j, verdict& v) {
  detail::read(j, "kind", v.kind);
  detail::read(j, "summary", v.summary);
  detail::read(j, "log", v.log);
  detail::read(j, "mismatch", v.mismatch);
}

inline void to_json(nlohmann::json& j, const compile_report& c) {
  j = {{"seconds", detail::number(c.seconds)},
       {"cache_hit", c.cache_hit},
       {"registers", c.registers},
       {"spill_bytes", c.spill_bytes},
       {"static_smem_bytes", c.static_smem_bytes}};
}
inline void from_json(const nlohmann::json& j, compile_report& c) {
  detail::read(j, "seconds", c.seconds);
  detail::read(j, "cache_hit", c.cache_hit);
  detail::read(j, "registers", c.registers);
  detail::read(j, "spill_bytes", c.spill_bytes);
  detail::read(j, "static_smem_bytes", c.static_smem_bytes);
}

inline void to_json(nlohmann::json& j, const measurement& m) {
  j = {{"median_us", detail::number(m.median_us)},
       {"spread", detail::number(m.spread)},
       {"samples_us", detail::numbers(m.samples_us)},
       {"baseline_median_us", detail::number(m.baseline_median_us)},
       {"speedup", detail::number(m.speedup)},
       {"sm_clock_mhz", detail::number(m.sm_clock_mhz)},
       {"metrics", detail::numbers(m.metrics)}};
  if (!m.baseline_of.empty()) j["baseline_of"] = m.baseline_of;
}
inline void from_json(const nlohmann::json& j, measurement& m) {
  detail::read(j, "median_us", m.median_us);
  detail::read(j, "spread", m.spread);
  detail::read(j, "samples_us", m.samples_us);
  detail::read(j, "baseline_median_us", m.baseline_median_us);
  detail::read(j, "speedup", m.speedup);
  detail::read(j, "sm_clock_mhz", m.sm_clock_mhz);
  detail::read(j, "metrics", m.metrics);
  detail::read(j, "baseline_of", m.baseline_of);
}

inline void to_json(nlohmann::json& j, const evaluation& e) {
  j = {{"id", e.id}, {"result", e.result}, {"compile", e.compile}};
  if (e.timing) j["timing"] = *e.timing;
}
inline void from_json(const nlohmann::json& j, evaluation& e) {
  detail::read(j, "id", e.id);
  detail::read(j, "result", e.result);
  detail::read(j, "compile", e.compile);
  detail::read(j, "timing", e.timing);
}

// ---- candidates --------------------------------------------------------------------

inline void to_json(nlohmann::json& j, const provenance& p) {
  j = {{"search", p.search},   {"round", p.round},   {"lane", p.lane},
       {"origin", p.from},     {"trigger", p.trigger}, {"prefix_tokens", p.prefix_tokens},
       {"sample", p.sample},   {"parents", p.parents}};
}
inline void from_json(const nlohmann::json& j, provenance& p) {
  detail::read(j, "search", p.search);
  detail::read(j, "round", p.round);
  detail::read(j, "lane", p.lane);
  detail::read(j, "origin", p.from);
  detail::read(j, "trigger", p.trigger);
  detail::read(j, "prefix_tokens", p.prefix_tokens);
  detail::read(j, "sample", p.sample);
  detail::read(j, "parents", p.parents);
}

/// Also writes `"hash"`, the content hash as 16 hex digits, for people and
/// tools grepping a journal; reading ignores it (load_journal checks it).
inline void to_json(nlohmann::json& j, const candidate& c) {
  j = {{"id", c.id},         {"task", c.task},     {"prov", c.prov},
       {"source", c.source}, {"plan", c.plan},     {"created_ns", c.created.count()},
       {"hash", detail::hex(c.content_hash())}};
}
inline void from_json(const nlohmann::json& j, candidate& c) {
  detail::read(j, "id", c.id);
  detail::read(j, "task", c.task);
  detail::read(j, "prov", c.prov);
  detail::read(j, "source", c.source);
  detail::read(j, "plan", c.plan);
  detail::read(j, "created_ns", c.created);
}

// ---- backend values ----------------------------------------------------------------

inline void to_json(nlohmann::json& j, const usage& u) {
  j = {{"prompt_tokens", u.prompt_tokens},
       {"cached_prompt_tokens", u.cached_prompt_tokens},
       {"completion_tokens", u.completion_tokens},
       {"reasoning_tokens", u.reasoning_tokens}};
}
inline void from_json(const nlohmann::json& j, usage& u) {
  detail::read(j, "prompt_tokens", u.prompt_tokens);
  detail::read(j, "cached_prompt_tokens", u.cached_prompt_tokens);
  detail::read(j, "completion_tokens", u.completion_tokens);
  detail::read(j, "reasoning_tokens", u.reasoning_tokens);
}

inline void to_json(nlohmann::json& j, const request_context& r) {
  j = {{"task", r.task}, {"search", r.search}, {"round", r.round}, {"lane", r.lane}, {"seed", r.seed}};
}
inline void from_json(const nlohmann::json& j, request_context& r) {
  detail::read(j, "task", r.task);
  detail::read(j, "search", r.search);
  detail::read(j, "round", r.round);
  detail::read(j, "lane", r.lane);
  detail::read(j, "seed", r.seed);
}

inline void to_json(nlohmann::json& j, const sampling& s) {
  j = {{"temperature", detail::number(s.temperature)},
       {"top_p", detail::number(s.top_p)},
       {"max_tokens", s.max_tokens}};
}
inline void from_json(const nlohmann::json& j, sampling& s) {
  detail::read(j, "temperature", s.temperature);
  detail::read(j, "top_p", s.top_p);
  detail::read(j, "max_tokens", s.max_tokens);
}

inline void to_json(nlohmann::json& j, const kv_lease& k) {
  j = {{"cached_tokens", k.cached_tokens}, {"fetch_time_ns", k.fetch_time.count()}, {"handle", k.handle}};
}
inline void from_json(const nlohmann::json& j, kv_lease& k) {
  detail::read(j, "cached_tokens", k.cached_tokens);
  detail::read(j, "fetch_time_ns", k.fetch_time);
  detail::read(j, "handle", k.handle);
}

SPECGEN_END_NAMESPACE
