#pragma once
// The statistics of the profile op's stopping rule and report: median, the
// median absolute deviation, the noise of the median and the interquartile
// spread. Pure host code, tested on any machine.
#include <specgen/detail/config.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {

/// The `q` quantile (0..1) of sorted `v`, linearly interpolated between the
/// closest ranks (the "type 7" definition of R and NumPy). 0 when empty.
inline double sorted_quantile(const std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  const double at = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(at));
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (at - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

/// The median (the mean of the two middle values for an even count). 0 when empty.
inline double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return sorted_quantile(v, 0.5);
}

/// The median absolute deviation from the median, unscaled.
inline double mad_of(const std::vector<double>& v) {
  const double m = median_of(v);
  std::vector<double> dev;
  dev.reserve(v.size());
  for (double x : v) dev.push_back(std::fabs(x - m));
  return median_of(std::move(dev));
}

/**
 * The estimated relative standard error of the median:
 * 1.2533 x 1.4826 x MAD / sqrt(n) / median. 1.4826 x MAD estimates the
 * standard deviation of normal samples; the median's standard error is
 * sqrt(pi/2) = 1.2533 times the mean's. Infinite with fewer than two samples
 * or a median of 0 with spread (the rule cannot stop on those), 0 when every
 * sample is the same.
 *
 * @code
 *   relative_noise({10, 10, 10}) == 0;  relative_noise({1, 2, 3}) == 1.2533 * 1.4826 / std::sqrt(3.0) / 2
 * @endcode
 */
inline double relative_noise(const std::vector<double>& v) {
  if (v.size() < 2) return std::numeric_limits<double>::infinity();
  const double m = median_of(v), mad = mad_of(v);
  if (mad == 0) return 0;
  if (m <= 0) return std::numeric_limits<double>::infinity();
  return 1.2533 * 1.4826 * mad / std::sqrt(static_cast<double>(v.size())) / m;
}

/// The interquartile range over the median (0 when the median is 0).
inline double relative_spread(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const double m = sorted_quantile(v, 0.5);
  if (m <= 0) return 0;
  return (sorted_quantile(v, 0.75) - sorted_quantile(v, 0.25)) / m;
}

/// Whether sampling may stop: at least `min_samples` and noise at most `target`.
inline bool noise_reached(const std::vector<double>& v, int min_samples, double target) {
  return static_cast<int>(v.size()) >= std::max(min_samples, 2) && relative_noise(v) <= target;
}

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
