#pragma once
/// Where simulated time is measured: the profiler model of the simulated
/// device. It draws candidate and baseline samples interleaved, exactly as the
/// real profiler takes them on one GPU, and stops by the same noise rule, so a
/// simulated profile job holds its GPU as long as a real one would.
///
/// @code
///   auto run = specgen::sim::simulate_profile(entry, specgen::profile_params{}, stream_seed);
///   // run.timing.median_us ~ entry.runtime_us; run.device_time: warm-up + samples + overhead
/// @endcode
#include <specgen/clock.hpp>
#include <specgen/detail/config.hpp>
#include <specgen/detail/hash.hpp>
#include <specgen/cost_table.hpp>
#include <specgen/types.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace sim {

namespace detail {

/// SplitMix64: small, fast, and specified bit for bit, unlike the standard
/// library's distributions, so a seed reproduces a run on every platform.
using specgen::detail::mix64;

/// The seed of one profile job's sample stream: a function of the run seed,
/// the kernel and how many times it was profiled before, and of nothing else
/// (not of job order on other kernels), so runs that differ elsewhere agree here.
constexpr std::uint64_t stream_seed(std::uint64_t seed, std::uint64_t key, std::uint64_t attempt) noexcept {
  return mix64(mix64(mix64(seed) ^ key) ^ (attempt + 0x9e3779b97f4a7c15ull));
}

/// Standard normal deviates by Box-Muller over SplitMix64.
class normal_stream {
 public:
  explicit normal_stream(std::uint64_t seed) noexcept : state_(seed) {}
  double next() noexcept {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = 1.0 - uniform();  // (0, 1]: log(u1) stays finite
    const double u2 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = r * std::sin(2.0 * std::numbers::pi * u2);
    has_spare_ = true;
    return r * std::cos(2.0 * std::numbers::pi * u2);
  }

 private:
  double uniform() noexcept {
    state_ += 0x9e3779b97f4a7c15ull;
    return static_cast<double>(mix64(state_) >> 11) * 0x1.0p-53;
  }
  std::uint64_t state_;
  double spare_ = 0;
  bool has_spare_ = false;
};

/// Running mean and variance (Welford), so the stopping rule costs O(1) per sample.
class running_stats {
 public:
  void add(double x) noexcept {
    ++n_;
    const double d = x - mean_;
    mean_ += d / static_cast<double>(n_);
    m2_ += d * (x - mean_);
  }
  [[nodiscard]] int count() const noexcept { return n_; }
  /// Relative standard error of the median estimate. For normal noise the
  /// median's standard error is sqrt(pi/2)·sd/sqrt(n); the mean stands in for
  /// the median in the denominator (they agree far inside any useful target).
  [[nodiscard]] double median_rse() const noexcept {
    if (n_ < 2 || mean_ <= 0) return std::numeric_limits<double>::infinity();
    const double sd = std::sqrt(m2_ / static_cast<double>(n_ - 1));
    return std::sqrt(std::numbers::pi / 2.0) * sd / (std::sqrt(static_cast<double>(n_)) * mean_);
  }

 private:
  int n_ = 0;
  double mean_ = 0;
  double m2_ = 0;
};

/// Quantile of sorted data with linear interpolation between order statistics.
inline double quantile(const std::vector<double>& sorted, double q) noexcept {
  if (sorted.empty()) return 0;
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<std::size_t>(pos);
  const std::size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (pos - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

}  // namespace detail

/// One simulated profile job: the measurement and how long it held the GPU.
struct profile_run {
  measurement timing;
  int samples = 0;          ///< timed samples per side (candidate and baseline each)
  duration device_time{0};  ///< (warm-up + samples) x (runtime + baseline + flush) + overhead
};

/**
 * Profiles an ok kernel from its cost entry. Samples are normal with relative
 * standard deviation `entry.noise` around `runtime_us` (candidate) and
 * `baseline_us` (baseline), interleaved one for one; the rule stops after at
 * least `min_samples` once both sides' median estimates are within
 * `noise_target`, or at `max_samples`.
 *
 * @code
 *   auto run = specgen::sim::simulate_profile(entry, {.min_samples = 5}, 42);
 * @endcode
 */
inline profile_run simulate_profile(const cost_entry& entry, const profile_params& p, std::uint64_t seed) {
  detail::normal_stream noise(seed);
  // A sample never goes below 1% of the median: a kernel cannot run in negative
  // time, whatever noise a table claims.
  auto draw = [&](double median) { return std::max(median * (1.0 + entry.noise * noise.next()), 0.01 * median); };

  std::vector<double> cand, base;
  detail::running_stats cand_stats, base_stats;
  while (static_cast<int>(cand.size()) < p.max_samples) {
    cand.push_back(draw(entry.runtime_us));
    base.push_back(draw(entry.baseline_us));
    cand_stats.add(cand.back());
    base_stats.add(base.back());
    if (static_cast<int>(cand.size()) >= p.min_samples && cand_stats.median_rse() <= p.noise_target &&
        base_stats.median_rse() <= p.noise_target)
      break;
  }

  profile_run run;
  run.samples = static_cast<int>(cand.size());
  const duration per_iteration = seconds((entry.runtime_us + entry.baseline_us + p.flush_us) * 1e-6);
  run.device_time = per_iteration * (p.warmup + run.samples) + seconds(p.overhead_s + entry.profile_s);

  measurement& m = run.timing;
  m.samples_us = cand;  // in draw order, as a real profiler records them
  std::sort(cand.begin(), cand.end());
  std::sort(base.begin(), base.end());
  m.median_us = detail::quantile(cand, 0.5);
  m.spread = (detail::quantile(cand, 0.75) - detail::quantile(cand, 0.25)) / m.median_us;
  m.baseline_median_us = detail::quantile(base, 0.5);
  m.speedup = m.baseline_median_us / m.median_us;
  return run;
}

}  // namespace sim
SPECGEN_END_NAMESPACE
