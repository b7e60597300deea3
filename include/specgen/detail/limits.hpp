#pragma once
/// The ranges numeric inputs are checked against, and the one type that
/// states a range.
///
/// Every number a user can give (a config key, a task-file field, a trace's
/// token count, a command-line flag) is read against a `range`: a value a
/// real run can use, rather than whatever fits the C++ type. A K of 2^31 fork
/// samples, a budget of 1e10 seconds or a runtime of 1e-300 us fits an `int`
/// or a `double` but ends in `std::bad_alloc`, an overflowed clock or a
/// speedup of 1e302. The limits below are shared by every reader, so the same
/// quantity has the same range wherever it is read; docs/policies.md,
/// docs/trace-format.md and docs/simulated-device.md list them.
///
/// @code
///   constexpr auto k = specgen::detail::in(1, specgen::limits::max_fork_samples);
///   if (auto why = specgen::detail::range_problem(samples, k); !why.empty()) fail(why);
///   // why == "must be an integer in [1, 64], got 100000"
/// @endcode
#include <specgen/detail/config.hpp>

#include <fmt/format.h>

#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>

SPECGEN_BEGIN_NAMESPACE

namespace detail {

/// The values a number may take: [lo, hi], both included, and also 0 when
/// `zero` says what 0 means ("none", "never"). A floating-point value must be
/// finite as well.
template <class T>
struct range {
  static_assert(std::is_arithmetic_v<T> && !std::same_as<T, bool>);
  T lo;
  T hi;
  std::string_view zero{};  ///< non-empty: 0 is accepted too, and means this

  [[nodiscard]] constexpr bool contains(T v) const noexcept {
    if constexpr (std::floating_point<T>)
      if (!std::isfinite(v)) return false;
    return (!zero.empty() && v == T{0}) || (v >= lo && v <= hi);
  }
  /// "an integer in [1, 64]", "a number in [0.1, 86400], or 0 for never".
  [[nodiscard]] std::string describe() const {
    std::string s = fmt::format("{} in [{}, {}]", std::integral<T> ? "an integer" : "a number", lo, hi);
    if (!zero.empty()) s += fmt::format(", or 0 for {}", zero);
    return s;
  }
};

template <class T>
constexpr range<T> in(T lo, T hi) noexcept {
  return {lo, hi, {}};
}
/// [lo, hi], or 0, which means `zero` ("none").
template <class T>
constexpr range<T> in_or_zero(T lo, T hi, std::string_view zero) noexcept {
  return {lo, hi, zero};
}
/// Every value of the type (finite, for floating point).
template <class T>
constexpr range<T> any_value() noexcept {
  if constexpr (std::floating_point<T>) return {std::numeric_limits<T>::lowest(), std::numeric_limits<T>::max(), {}};
  else return {std::numeric_limits<T>::min(), std::numeric_limits<T>::max(), {}};
}

/// "" when `v` is in `r`, else "must be <r.describe()>, got <v>".
template <class T>
std::string range_problem(T v, const range<T>& r) {
  if (r.contains(v)) return {};
  return fmt::format("must be {}, got {}", r.describe(), v);
}

}  // namespace detail

/// The limits themselves. Each is a size or a time a real run stays far
/// inside; they exist so that a typo or a hostile file is refused with a
/// message instead of exhausting memory or time.
namespace limits {

/// Search rounds (a budget's max_rounds, a trace's round + 1, --rounds): the
/// paper runs 100 per task.
inline constexpr int max_rounds = 10'000;
/// Parallel reasoning streams of one round (lanes, seeds): a trace's lane is below it.
inline constexpr int max_lanes = 256;
/// K, the samples of one fork: the paper's are 2-3.
inline constexpr int max_fork_samples = 64;
/// Tokens of one reasoning trace, answer or request (reasoning models write
/// 4K-32K; the longest contexts served hold about 1M).
inline constexpr std::uint64_t max_tokens = 1'000'000;
/// Evaluation devices of one simulated or real pool.
inline constexpr int max_devices = 1024;
/// Seconds of a budget or a modelled duration: 10^7 s is 116 days.
inline constexpr double max_seconds = 1e7;
/// A speedup target or threshold: far beyond any kernel's.
inline constexpr double max_speedup = 1000;
/// The deepest nesting of `any_of` in a trigger or termination config.
inline constexpr int max_policy_depth = 16;
/// The deepest nesting of arrays and objects in any JSON file read.
inline constexpr int max_json_depth = 64;

/// A speedup given as a target or threshold.
inline constexpr detail::range<double> speedup = detail::in(1e-3, max_speedup);
/// A search's target speedup (a budget's target_speedup, --target).
inline constexpr detail::range<double> target_speedup = detail::in_or_zero(speedup.lo, speedup.hi, "none");
/// A number of rounds (a budget's max_rounds, --rounds).
inline constexpr detail::range<int> rounds = detail::in(1, max_rounds);
/// A number of evaluation devices (--devices).
inline constexpr detail::range<int> devices = detail::in(1, max_devices);
/// A duration in seconds that may be 0.
inline constexpr detail::range<double> seconds = detail::in(0.0, max_seconds);

}  // namespace limits

SPECGEN_END_NAMESPACE
