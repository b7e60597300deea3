#pragma once
/// Cost tables: what each kernel costs on a device, measured on real GPUs (or
/// generated procedurally), keyed by `source_key(candidate.source)`.
///
/// The simulated device answers compile, validate and profile jobs from a
/// table; the procedural corpus generator and the GPU runtime's measurement
/// tool write tables in the same JSON format, `specgen-cost-table/1`
/// (docs/simulated-device.md describes every field).
///
/// @code
///   auto table = specgen::load_cost_table("tables/h200.json");
///   if (!table) { std::cerr << table.error().message << '\n'; return 1; }
///   if (const auto* e = table->find_source(cand.source)) use(e->runtime_us);
/// @endcode
#include <specgen/detail/config.hpp>
#include <specgen/detail/files.hpp>
#include <specgen/detail/json_fields.hpp>
#include <specgen/detail/limits.hpp>
#include <specgen/expected.hpp>
#include <specgen/types.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

SPECGEN_BEGIN_NAMESPACE

/// The `format` value of the cost-table JSON this header reads and writes.
inline constexpr std::string_view cost_table_format = "specgen-cost-table/1";

/// How a kernel is profiled: the real profiler's settings, which the
/// simulated device follows sample for sample.
///
/// @code
///   specgen::profile_params quick{.warmup = 2, .min_samples = 5, .max_samples = 20};
/// @endcode
struct profile_params {
  int warmup = 10;            ///< untimed runs first (the paper: 10 warm-up + 40 timed)
  int min_samples = 40;       ///< timed samples before the stopping rule may stop
  int max_samples = 200;      ///< stop here even if the noise target was not met
  double noise_target = 0.005;  ///< stop once the relative standard error of the median is at most this
  /// L2 flush before each sample: rewriting a 50 MB L2-sized buffer at ~4.8 TB/s
  /// (H200) plus the launch, so no sample reads data the previous one cached.
  double flush_us = 10.0;
  double overhead_s = 0.05;   ///< per profile job: buffer setup, input init, event creation
  friend bool operator==(const profile_params&, const profile_params&) = default;
};

/// What one kernel costs and how it ends, as measured (or generated).
struct cost_entry {
  std::string task{};
  std::string label{};                        ///< free text, e.g. "tiled-v2"
  verdict_kind verdict = verdict_kind::ok;
  std::string summary{};                      ///< what the model is told on failure
  std::string log{};                          ///< e.g. a compile log excerpt
  double compile_s = 0;                       ///< compile wall time
  double validate_s = 0;                      ///< validation on the GPU, all shapes
  /// Extra device time of a profiling job beyond the timed samples: the
  /// profiler's metric-collection passes (an Nsight Compute or CUPTI range
  /// profiler replay). 0 when profiling only times the kernel.
  double profile_s = 0;
  double runtime_us = 0;                      ///< candidate median (ok kernels)
  double noise = 0;                           ///< relative standard deviation of one runtime sample
  double baseline_us = 0;                     ///< the task's baseline median on the same device
  friend bool operator==(const cost_entry&, const cost_entry&) = default;
};

/// A cost table: kernels by `source_key` of their source.
///
/// @code
///   specgen::cost_table t{.device = "procedural (not measured)"};
///   t.kernels[specgen::source_key(src)] = {.task = "softmax", .compile_s = 0.4, .validate_s = 0.1,
///                                          .runtime_us = 800, .noise = 0.004, .baseline_us = 1000};
/// @endcode
struct cost_table {
  std::string device{};                        ///< measured GPU, driver and date, or "procedural (not measured)"
  std::map<std::uint64_t, cost_entry> kernels{};  ///< by source_key(source)
  profile_params profile{};

  [[nodiscard]] const cost_entry* find(std::uint64_t key) const noexcept {
    auto it = kernels.find(key);
    return it == kernels.end() ? nullptr : &it->second;
  }
  /// Looks a kernel up by its source text (whitespace-insensitive, see `source_key`).
  [[nodiscard]] const cost_entry* find_source(std::string_view source) const noexcept {
    return find(source_key(source));
  }
  friend bool operator==(const cost_table&, const cost_table&) = default;
};

/// The 16 lower-case hex digits that name a key in cost-table JSON.
inline std::string format_key(std::uint64_t key) { return fmt::format("{:016x}", key); }

/// Parses exactly 16 hex digits (either case); nullopt otherwise.
inline std::optional<std::uint64_t> parse_key(std::string_view text) noexcept {
  if (text.size() != 16) return std::nullopt;
  std::uint64_t key = 0;
  for (char c : text) {
    unsigned digit = 0;
    if (c >= '0' && c <= '9') digit = static_cast<unsigned>(c - '0');
    else if (c >= 'a' && c <= 'f') digit = static_cast<unsigned>(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') digit = static_cast<unsigned>(c - 'A' + 10);
    else return std::nullopt;
    key = key << 4 | digit;
  }
  return key;
}

namespace detail {

/// The physical ranges of a table's fields. A kernel runs for at least a
/// nanosecond (an H200 launch alone takes microseconds) and at most 10^8 us;
/// jobs take at most an hour; a relative noise above 1 is not a measurement.
/// Speedups are ratios of these runtimes, so they stay within 10^11.
namespace cost_ranges {
inline constexpr range<double> job_seconds = in(0.0, 3600.0);
inline constexpr range<double> runtime_us = in_or_zero(1e-3, 1e8, "not measured");
inline constexpr range<double> noise = in(0.0, 1.0);
inline constexpr range<int> warmup = in(0, 10'000);
/// Timed samples: the simulated profiler draws each one, so the most is a
/// bound on its work and memory per job.
inline constexpr range<int> samples = in(2, 10'000);
inline constexpr range<double> noise_target = in(0.0, 1.0);
inline constexpr range<double> flush_us = in(0.0, 1e6);
}  // namespace cost_ranges

/// The limits on profile settings, shared by JSON parsing and the simulated
/// device's constructor. `check(ok, field, problem)` reports a violation.
template <class Check>
void check_profile(const profile_params& p, Check&& check) {
  auto within = [&](auto v, const auto& r, std::string_view field) { check(r.contains(v), field, range_problem(v, r)); };
  within(p.warmup, cost_ranges::warmup, "warmup");
  within(p.min_samples, cost_ranges::samples, "min_samples");
  within(p.max_samples, cost_ranges::samples, "max_samples");
  check(p.max_samples >= p.min_samples, "max_samples", "must be >= min_samples");
  within(p.noise_target, cost_ranges::noise_target, "noise_target");
  within(p.flush_us, cost_ranges::flush_us, "flush_us");
  within(p.overhead_s, cost_ranges::job_seconds, "overhead_s");
}

inline expected<profile_params, error> parse_profile(const nlohmann::json& j, std::string_view file,
                                                     std::string pointer) {
  profile_params p;
  field_reader r(j, file, std::move(pointer));
  r.optional("warmup", p.warmup, cost_ranges::warmup)
      .optional("min_samples", p.min_samples, cost_ranges::samples)
      .optional("max_samples", p.max_samples, cost_ranges::samples)
      .optional("noise_target", p.noise_target, cost_ranges::noise_target)
      .optional("flush_us", p.flush_us, cost_ranges::flush_us)
      .optional("overhead_s", p.overhead_s, cost_ranges::job_seconds);
  if (r.ok()) check_profile(p, [&](bool ok, std::string_view f, std::string_view why) { r.check(ok, f, why); });
  if (!r.ok()) return unexpected(*r.failure());
  return p;
}

inline expected<std::pair<std::uint64_t, cost_entry>, error> parse_entry(const nlohmann::json& j,
                                                                         std::string_view file,
                                                                         std::string pointer) {
  cost_entry e;
  std::string key_text, verdict_text;
  field_reader r(j, file, std::move(pointer));
  r.required("key", key_text)
      .required("task", e.task)
      .optional("label", e.label)
      .required("verdict", verdict_text)
      .optional("summary", e.summary)
      .optional("log", e.log)
      .optional("compile_s", e.compile_s, cost_ranges::job_seconds)
      .optional("validate_s", e.validate_s, cost_ranges::job_seconds)
      .optional("profile_s", e.profile_s, cost_ranges::job_seconds)
      .optional("runtime_us", e.runtime_us, cost_ranges::runtime_us)
      .optional("noise", e.noise, cost_ranges::noise)
      .optional("baseline_us", e.baseline_us, cost_ranges::runtime_us);
  const auto key = parse_key(key_text);
  const auto kind = parse_verdict(verdict_text);
  r.check(key.has_value(), "key",
          fmt::format("\"{}\" is not 16 hex digits (format_key(source_key(source)))", key_text));
  r.check(kind.has_value(), "verdict",
          fmt::format("unknown verdict \"{}\" (one of: {})", verdict_text, fmt::join(verdict_names, ", ")));
  // Profiling divides by both medians, so an ok kernel without them cannot be simulated.
  const bool ok_kernel = kind == verdict_kind::ok;
  r.check(!ok_kernel || e.runtime_us > 0, "runtime_us", "must be > 0 for a kernel whose verdict is ok");
  r.check(!ok_kernel || e.baseline_us > 0, "baseline_us", "must be > 0 for a kernel whose verdict is ok");
  if (!r.ok()) return unexpected(*r.failure());
  e.verdict = *kind;
  return std::pair{*key, std::move(e)};
}

}  // namespace detail

/**
 * Reads a cost table from parsed JSON. `file` names the source in errors,
 * whose `what()` reads `<file>: <JSON pointer>: <problem>`.
 *
 * Unknown fields are ignored, so a newer writer can add fields; a key listed
 * twice is an error.
 *
 * @code
 *   auto t = specgen::parse_cost_table(nlohmann::json::parse(text), "inline");
 *   // t.error().what() == "inline: /kernels/0/verdict: unknown verdict \"okay\" (one of: ...)"
 * @endcode
 */
inline expected<cost_table, error> parse_cost_table(const nlohmann::json& j, std::string_view file = "<json>") {
  cost_table t;
  std::string format;
  detail::field_reader r(j, file, "");
  r.required("format", format).optional("device", t.device);
  r.check(format == cost_table_format, "format",
          fmt::format("\"{}\" is not \"{}\" (a table this version cannot read)", format, cost_table_format));
  r.check(j.is_object() && j.contains("kernels") && j["kernels"].is_array(), "kernels",
          "missing or not an array (a table lists its kernels under \"kernels\")");
  if (!r.ok()) return unexpected(*r.failure());

  if (auto it = j.find("profile"); it != j.end()) {
    auto p = detail::parse_profile(*it, file, "/profile");
    if (!p) return unexpected(p.error());
    t.profile = *p;
  }
  const auto& kernels = j["kernels"];
  for (std::size_t i = 0; i < kernels.size(); ++i) {
    const std::string pointer = fmt::format("/kernels/{}", i);
    auto entry = detail::parse_entry(kernels[i], file, pointer);
    if (!entry) return unexpected(entry.error());
    auto [key, e] = std::move(*entry);
    if (!t.kernels.emplace(key, std::move(e)).second)
      return unexpected(detail::json_error(file, pointer + "/key",
                                           fmt::format("kernel {} is listed twice", format_key(key))));
  }
  return t;
}

/// Reads a cost-table JSON file (a regular file of at most 64 MiB). Errors
/// name the path and say what to fix; this never throws.
inline expected<cost_table, error> load_cost_table(const std::filesystem::path& path) noexcept {
  try {
    return detail::read_json_file(path, detail::file_kinds::cost_table, /*comments=*/false)
        .and_then([&](const nlohmann::json& j) { return parse_cost_table(j, path.string()); });
  } catch (const std::exception& e) {  // bad_alloc, or a bug: still an error value for the caller
    return unexpected(error{fmt::format("{}: cannot load the cost table: {}", path.string(), e.what())});
  }
}

/// The JSON form of profile settings (every field written).
template <class Json>
void to_json(Json& j, const profile_params& p) {
  j = Json::object();
  j["warmup"] = p.warmup;
  j["min_samples"] = p.min_samples;
  j["max_samples"] = p.max_samples;
  j["noise_target"] = p.noise_target;
  j["flush_us"] = p.flush_us;
  j["overhead_s"] = p.overhead_s;
}

/// For `json.get<profile_params>()`; throws `detail::json_read_error` (the
/// convention of json.hpp) with the pointer and problem `parse_cost_table`
/// would give. Missing fields keep their defaults.
inline void from_json(const nlohmann::json& j, profile_params& p) {
  auto r = detail::parse_profile(j, "profile_params", "");
  if (!r) throw detail::json_read_error(r.error());
  p = *r;
}

/// The JSON form of a table, fields in the documented order when `Json` is
/// `nlohmann::ordered_json` (what `save_cost_table` writes).
template <class Json>
void to_json(Json& j, const cost_table& t) {
  j = Json::object();
  j["format"] = cost_table_format;
  j["device"] = t.device;
  Json kernels = Json::array();
  for (const auto& [key, e] : t.kernels) {
    Json k = Json::object();
    k["key"] = format_key(key);
    k["task"] = e.task;
    k["label"] = e.label;
    k["verdict"] = to_string(e.verdict);
    k["summary"] = e.summary;
    k["log"] = e.log;
    k["compile_s"] = e.compile_s;
    k["validate_s"] = e.validate_s;
    k["profile_s"] = e.profile_s;
    k["runtime_us"] = e.runtime_us;
    k["noise"] = e.noise;
    k["baseline_us"] = e.baseline_us;
    kernels.push_back(std::move(k));
  }
  j["kernels"] = std::move(kernels);
  to_json(j["profile"], t.profile);
}

/// Writes a table to `path` through a temporary file and a rename, so a
/// reader never sees half a table.
inline expected<void, error> save_cost_table(const cost_table& t, const std::filesystem::path& path) {
  nlohmann::ordered_json j;
  to_json(j, t);
  std::filesystem::path tmp = path;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << j.dump(2) << '\n';
    if (!out.flush())
      return unexpected(error{fmt::format("{}: cannot write the cost table (is the folder writable?)", tmp.string())});
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return unexpected(error{fmt::format("{}: cannot rename {} into place: {}", path.string(), tmp.string(), ec.message())});
  return {};
}

/**
 * Merges tables, e.g. a measured table and a procedural one. The result takes
 * the first table's profile settings; devices that differ are joined with
 * " + ". A kernel present in two tables with different entries is an error
 * (which measurement should win is the user's call, not the merge's).
 *
 * @code
 *   std::vector<specgen::cost_table> parts{*measured, *procedural};
 *   auto all = specgen::merge_cost_tables(parts);
 * @endcode
 */
inline expected<cost_table, error> merge_cost_tables(std::span<const cost_table> tables) {
  cost_table out;
  std::vector<std::string_view> devices;
  for (std::size_t i = 0; i < tables.size(); ++i) {
    const cost_table& t = tables[i];
    if (i == 0) out.profile = t.profile;
    if (std::find(devices.begin(), devices.end(), t.device) == devices.end()) devices.push_back(t.device);
    for (const auto& [key, e] : t.kernels) {
      auto [it, inserted] = out.kernels.emplace(key, e);
      if (!inserted && it->second != e)
        return unexpected(error{fmt::format(
            "cost tables disagree on kernel {} (task {}): \"{}\" ({}) in an earlier table, \"{}\" ({}) in table {}; "
            "drop one of the two entries",
            format_key(key), e.task, it->second.label, to_string(it->second.verdict), e.label, to_string(e.verdict),
            i)});
    }
  }
  out.device = fmt::format("{}", fmt::join(devices, " + "));
  return out;
}

SPECGEN_END_NAMESPACE
