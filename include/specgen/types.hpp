#pragma once
/// The value types every layer speaks: candidates and their provenance,
/// verdicts, measurements and the feedback a model reads next round.
#include <specgen/clock.hpp>
#include <specgen/detail/config.hpp>
#include <specgen/detail/hash.hpp>

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

SPECGEN_BEGIN_NAMESPACE

using candidate_id = std::uint64_t;
using token_id = std::int32_t;

/// 64-bit FNV-1a: the stable content hash used for candidate identity and
/// cost tables. Stable across platforms and builds (unlike std::hash).
constexpr std::uint64_t fnv1a(std::string_view s, std::uint64_t h = detail::fnv1a_offset) noexcept {
  for (unsigned char c : s) h = detail::fnv1a_byte(h, c);
  return h;
}

/// Key of a kernel source in cost tables: FNV-1a of the source with every run
/// of whitespace collapsed to one space and the ends trimmed, so reformatting
/// by extraction does not change identity.
inline std::uint64_t source_key(std::string_view source) noexcept {
  std::uint64_t h = detail::fnv1a_offset;
  bool pending_space = false, any = false;
  for (unsigned char c : source) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') {
      pending_space = any;
      continue;
    }
    if (pending_space) {
      h = detail::fnv1a_byte(h, ' ');
      pending_space = false;
    }
    h = detail::fnv1a_byte(h, c);
    any = true;
  }
  return h;
}

/// The outcome of evaluating a candidate. Exactly one per evaluated candidate.
enum class verdict_kind : std::uint8_t {
  compile_error,  ///< NVRTC rejected the source (log attached)
  invalid_plan,   ///< the launch plan does not parse, names unknown things, or exceeds device limits
  fault,          ///< the kernel crashed (illegal address, trap, ...); the worker was respawned
  timeout,        ///< the kernel missed its deadline; the worker was killed
  wrong_result,   ///< outputs differ from the reference beyond tolerance, or were never written
  unstable,       ///< repeated runs disagree (races)
  suspicious,     ///< measured behaviour is impossible or hides work (extra streams, above roofline)
  ok,             ///< correct; profiled if it reaches profiling
  input_mutation,       ///< a task input changed during a run (the outputs may be right)
  out_of_bounds_write,  ///< a write landed in the guard zone around a buffer (the outputs may be right)
  nonfinite_output,     ///< NaN or inf where the reference is finite
};

inline constexpr std::array<std::string_view, 11> verdict_names{
    "compile_error", "invalid_plan", "fault", "timeout", "wrong_result", "unstable", "suspicious", "ok",
    "input_mutation", "out_of_bounds_write", "nonfinite_output"};

/// Whether a verdict says the kernel ran and computed something wrong (as
/// opposed to not compiling, crashing, hanging or being judged ok): the kinds
/// a model fixes by changing what the kernel computes or where it writes.
constexpr bool is_wrong_output(verdict_kind v) noexcept {
  return v == verdict_kind::wrong_result || v == verdict_kind::unstable || v == verdict_kind::input_mutation ||
         v == verdict_kind::out_of_bounds_write || v == verdict_kind::nonfinite_output;
}

constexpr std::string_view to_string(verdict_kind v) noexcept {
  return verdict_names[static_cast<std::size_t>(v)];
}
constexpr std::optional<verdict_kind> parse_verdict(std::string_view s) noexcept {
  for (std::size_t i = 0; i < verdict_names.size(); ++i)
    if (verdict_names[i] == s) return static_cast<verdict_kind>(i);
  return std::nullopt;
}

/// Where an output disagreed with the reference, in terms a model can act on.
struct mismatch_stats {
  std::string output{};                  ///< buffer name
  std::string shape{};                   ///< the validation shape, e.g. "N=1000,M=77"
  double max_abs = 0;                  ///< largest |got - want|
  double max_rel = 0;                  ///< largest |got - want| / |want|
  std::uint64_t count = 0;             ///< elements outside tolerance
  std::uint64_t total = 0;             ///< elements compared
  std::vector<std::uint64_t> first_indices{};  ///< first few offending flat indices
  std::uint64_t nans = 0;              ///< offending elements that are NaN (the reference's are not)
  /// The offending element with the largest error (the first of equals): its
  /// flat index, its value and the reference's (count > 0 only).
  std::uint64_t worst_index = 0;
  double worst_got = 0;
  double worst_want = 0;
  friend bool operator==(const mismatch_stats&, const mismatch_stats&) = default;
};

/// A verdict with the details a model needs to fix the kernel.
struct verdict {
  verdict_kind kind = verdict_kind::ok;
  std::string summary{};                  ///< one line: what went wrong
  std::string log{};                      ///< compiler log excerpt, fault text, ...
  std::optional<mismatch_stats> mismatch{};
  friend bool operator==(const verdict&, const verdict&) = default;
};

/// What the compiler reports about a kernel (all optional: a simulated
/// device may not know them).
struct compile_report {
  double seconds = 0;     ///< compile wall time (0 on a cache hit)
  bool cache_hit = false;
  int registers = 0;      ///< per thread, max over the plan's kernels
  int spill_bytes = 0;
  int static_smem_bytes = 0;
  friend bool operator==(const compile_report&, const compile_report&) = default;
};

/// A profiled timing of a candidate against the task's baseline, both
/// measured on the same GPU, interleaved.
struct measurement {
  double median_us = 0;            ///< candidate, median over samples
  double spread = 0;               ///< relative spread (IQR / median)
  std::vector<double> samples_us{};  ///< raw samples (may be trimmed in journals)
  double baseline_median_us = 0;
  double speedup = 0;              ///< baseline_median_us / median_us
  double sm_clock_mhz = 0;         ///< observed SM clock during the measurement (0 if unknown)
  std::map<std::string, double> metrics{};  ///< profiler metrics, e.g. "dram_throughput_pct"
  /// What `baseline_median_us` timed: "baseline" (the task's baseline),
  /// "reference" (the task has no device baseline, so its reference), or ""
  /// (not said, or nothing was timed beside the candidate).
  std::string baseline_of{};
  friend bool operator==(const measurement&, const measurement&) = default;
};

/// How a candidate came to be: which search, round and stream produced it.
enum class origin : std::uint8_t { main, fork };

struct provenance {
  int search = 0;          ///< index of the search (one per task in a suite run)
  int round = 0;           ///< 0-based round (= iteration) within the search
  int lane = 0;            ///< which parallel stream of the round (seeds, population members)
  origin from = origin::main;
  std::string trigger{};     ///< name of the trigger that forked it ("" for main)
  std::uint64_t prefix_tokens = 0;  ///< reasoning tokens in the fork's prefix (total for main)
  int sample = 0;          ///< sample index among the K of a fork
  std::vector<candidate_id> parents{};  ///< earlier candidates the prompt built on
  friend bool operator==(const provenance&, const provenance&) = default;
};

/// A kernel the model wrote: device source plus the launch plan.
struct candidate {
  candidate_id id = 0;
  std::string task{};         ///< task name
  provenance prov{};
  std::string source{};       ///< CUDA device code (extern "C" __global__ kernels)
  std::string plan{};         ///< launch plan text (see plan.hpp)
  timestamp created{0};
  /// Content hash of (source, plan): identical kernels share evaluations.
  [[nodiscard]] std::uint64_t content_hash() const noexcept {
    return fnv1a(plan, fnv1a(source) ^ 0x9e3779b97f4a7c15ull);
  }
  friend bool operator==(const candidate&, const candidate&) = default;
};

/// Where a candidate is in the pipeline.
enum class stage : std::uint8_t { compile, validate, profile };
inline constexpr std::array<std::string_view, 3> stage_names{"compile", "validate", "profile"};
constexpr std::string_view to_string(stage s) noexcept { return stage_names[static_cast<std::size_t>(s)]; }

/// The full evaluation record of one candidate.
struct evaluation {
  candidate_id id = 0;
  verdict result{};
  compile_report compile{};
  std::optional<measurement> timing{};  ///< present when profiled
  friend bool operator==(const evaluation&, const evaluation&) = default;
};

/// A model answer from which no kernel could be extracted: a final answer or a
/// fork sample. Fed back, so the model learns what it wrote wrong.
struct extract_miss {
  provenance prov{};
  std::string reason{};   ///< the extract_reason's name ("no_plan", "truncated", ...)
  std::string message{};  ///< what was wrong and what to write instead
  std::string excerpt{};  ///< the answer's last lines (at most about 600 bytes)
  friend bool operator==(const extract_miss&, const extract_miss&) = default;
};

/// The summary a strategy puts into the next round's prompt.
struct feedback {
  std::string text{};                       ///< rendered for the model
  std::vector<candidate_id> about{};        ///< candidates it summarises
};

SPECGEN_END_NAMESPACE
