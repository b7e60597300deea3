#pragma once
/// Decode contention: how a serving stack slows each stream as more decode
/// together, fitted to published measurements. The replay model plays it, and
/// cost-weighing fork policies (policy/trigger.hpp) price a fork with it.
///
/// Batched decoding reads the model's weights once per step, shared by every
/// sequence in the batch, and each sequence adds its own attention over its
/// KV cache. The time per output token (TPOT) of one stream is therefore
/// close to linear in the number of sequences B decoding together:
///
///     TPOT(B) = t1 * (1 + a * (B - 1)),    per-stream speed(B) = speed(1) / (1 + a * (B - 1))
///
/// `a` is `slowdown_per_sequence` (the replay model's and the cost-weighing
/// gate's). `fit_contention` fits t1 and a to one serving stack's
/// measurements by least squares on the relative error (weights 1 / TPOT^2),
/// because the measurements are ratios of speeds and each stack's absolute
/// speed differs. `published_contention`
/// holds the measurements this project calibrates against, each with its
/// source; `contention_levels` are the band the fits span: the flattest
/// stack's a ("low"), the steepest stack's ("high"), and their midpoint
/// ("middle"). docs/replay-model.md ("Calibration") shows the fits and their
/// residuals.
///
/// @code
///   for (const auto& s : specgen::published_contention) {
///     const auto f = specgen::fit_contention(s.points);
///     use(s.name, f.slowdown_per_sequence, specgen::fit_error(s.points, f).rms);
///   }
///   const double middle = specgen::contention_level_of("middle").value();   // about 0.028
/// @endcode
#include <specgen/detail/config.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <optional>
#include <span>
#include <string_view>

SPECGEN_BEGIN_NAMESPACE

/// One measurement: the mean time per output token of a stream while
/// `streams` sequences decode together.
struct decode_point {
  int streams = 1;
  double tpot_ms = 0;
};

/// One serving stack's measurements, with where they were published.
struct contention_source {
  std::string_view name;      ///< short identifier
  std::string_view setup;     ///< model, hardware, engine, request shape
  std::string_view citation;  ///< where the numbers were published
  std::span<const decode_point> points;
};

/// TPOT(B) = tpot1_ms * (1 + slowdown_per_sequence * (B - 1)).
struct contention_fit {
  double slowdown_per_sequence = 0;
  double tpot1_ms = 0;
  /// Per-stream speed with `streams` sequences, relative to one alone.
  [[nodiscard]] constexpr double relative_speed(int streams) const noexcept {
    return 1.0 / (1.0 + slowdown_per_sequence * static_cast<double>(std::max(streams, 1) - 1));
  }
};

/// Weighted least squares of TPOT on B with weights 1 / TPOT^2 (the relative
/// error), then a = slope / TPOT(1). Needs two distinct stream counts.
constexpr contention_fit fit_contention(std::span<const decode_point> points) noexcept {
  double s = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& p : points) {
    const double w = 1.0 / (p.tpot_ms * p.tpot_ms);
    const double x = p.streams;
    s += w;
    sx += w * x;
    sy += w * p.tpot_ms;
    sxx += w * x * x;
    sxy += w * x * p.tpot_ms;
  }
  const double det = s * sxx - sx * sx;
  if (points.size() < 2 || det <= 0) return {};
  const double slope = (s * sxy - sx * sy) / det;
  const double intercept = (sy - slope * sx) / s;
  const double t1 = intercept + slope;
  return {.slowdown_per_sequence = t1 > 0 ? slope / t1 : 0, .tpot1_ms = t1};
}

/// How far a fit is from its points, as relative errors of the TPOT.
struct fit_residuals {
  double rms = 0;
  double max = 0;
};
inline fit_residuals fit_error(std::span<const decode_point> points, const contention_fit& f) {
  fit_residuals r;
  for (const auto& p : points) {
    const double model = f.tpot1_ms * (1.0 + f.slowdown_per_sequence * (p.streams - 1));
    const double e = std::abs(model / p.tpot_ms - 1.0);
    r.rms += e * e;
    r.max = std::max(r.max, e);
  }
  if (!points.empty()) r.rms = std::sqrt(r.rms / static_cast<double>(points.size()));
  return r;
}

namespace detail {
/// TPOT in ms from a per-user generation speed in tokens/s.
constexpr decode_point from_speed(int streams, double tokens_per_s) noexcept { return {streams, 1000.0 / tokens_per_s}; }

inline constexpr std::array<decode_point, 6> trtllm_gb200{{from_speed(1, 247.1619), from_speed(2, 218.8070),
                                                          from_speed(4, 189.9888), from_speed(8, 167.2644),
                                                          from_speed(16, 130.9665), from_speed(32, 111.7814)}};
inline constexpr std::array<decode_point, 4> sglang_h200{{{8, 12.8}, {16, 17.2}, {32, 25.6}, {64, 34.6}}};
inline constexpr std::array<decode_point, 5> atom_tp8{{{4, 11.20}, {8, 11.98}, {16, 13.48}, {32, 17.80}, {64, 21.27}}};
}  // namespace detail

/// The published measurements the replay model is calibrated against. Each
/// source measured one request shape (1K tokens in, 1K out) at several
/// concurrencies on one deployment.
inline constexpr std::array<contention_source, 3> published_contention{{
    {"trtllm-gb200", "Qwen3-235B-A22B FP4, GB200, TensorRT-LLM, 1k in / 1k out",
     "https://github.com/NVIDIA/TensorRT-LLM/pull/11612, Pareto table (Gen TPS/User)", detail::trtllm_gb200},
    {"sglang-h200", "DeepSeek-R1-0528 FP8, 8x H200 TP8, SGLang 0.5.7, 1k in / 1k out",
     "https://github.com/SemiAnalysisAI/InferenceX/issues/870 (mean TPOT)", detail::sglang_h200},
    {"atom-tp8", "DeepSeek-R1 FP8, TP8 on AMD GPUs, ATOM, 1k in / 1k out",
     "https://github.com/ROCm/ATOM/pull/409 (TPOT)", detail::atom_tp8},
}};

/// A named decode slowdown per extra sequence (`slowdown_per_sequence`).
struct contention_level {
  std::string_view name;
  double slowdown_per_sequence = 0;
};

namespace detail {
constexpr std::array<contention_level, 3> band_of(std::span<const contention_source> sources) noexcept {
  double lo = 0, hi = 0;
  bool first = true;
  for (const auto& s : sources) {
    const double a = fit_contention(s.points).slowdown_per_sequence;
    lo = first ? a : std::min(lo, a);
    hi = first ? a : std::max(hi, a);
    first = false;
  }
  return {{{"low", lo}, {"middle", (lo + hi) / 2}, {"high", hi}}};
}
}  // namespace detail

/// The band the published stacks span: "low" is the flattest stack's fitted a
/// (about 0.017), "high" the steepest's (about 0.040), "middle" their midpoint
/// (about 0.028; 32 streams then decode at 0.53 of one stream's speed).
inline constexpr std::array<contention_level, 3> contention_levels = detail::band_of(published_contention);
inline constexpr double contention_low = contention_levels[0].slowdown_per_sequence;
inline constexpr double contention_middle = contention_levels[1].slowdown_per_sequence;
inline constexpr double contention_high = contention_levels[2].slowdown_per_sequence;

/// The slowdown of a preset's name; nullopt for an unknown name.
constexpr std::optional<double> contention_level_of(std::string_view name) noexcept {
  for (const auto& l : contention_levels)
    if (l.name == name) return l.slowdown_per_sequence;
  return std::nullopt;
}

/// "low", "middle", "high" or a finite number >= 0: a slowdown per extra
/// sequence; nullopt for anything else.
inline std::optional<double> parse_contention(std::string_view text) {
  if (auto preset = contention_level_of(text)) return preset;
  double v = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size() || !std::isfinite(v) || v < 0) return std::nullopt;
  return v;
}

SPECGEN_END_NAMESPACE
