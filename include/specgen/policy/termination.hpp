#pragma once
/// Termination policies: does a newly profiled speculative kernel stop the
/// main reasoning stream?
///
/// The engine asks after each profiled (valid) speculative kernel, passing the
/// speedups of the search's earlier valid kernels (the history, in arrival
/// order, without the new one). Stopping early trades the rest of the main
/// reasoning for a faster next round; the paper's default stops when the new
/// kernel beats the history's mean.
///
/// @code
///   specgen::policy::any_termination stop = specgen::policy::default_termination();   // beats_mean
///   std::vector<double> history{1.2, 0.8, 1.6};
///   bool s = stop.should_stop({.speedups = history}, 1.5);            // true: 1.5 > mean 1.2
///   auto cfg = specgen::policy::make_termination(nlohmann::json::parse(R"({"reaches_target": {"target": 3}})"));
/// @endcode
#include <specgen/detail/config.hpp>
#include <specgen/expected.hpp>
#include <specgen/policy/family.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

SPECGEN_BEGIN_NAMESPACE

namespace detail {
/// The speedup a kernel must beat with an empty history (0: any valid kernel).
inline constexpr range<double> empty_threshold_range = in(0.0, limits::max_speedup);
/// The margin a kernel must win by, as a fraction (10 = 11 times as fast).
inline constexpr range<double> min_gain_range = in(0.0, 10.0);
/// `speedup` is faster than `reference` by more than the fraction `min_gain`.
constexpr bool beats(double speedup, double reference, double min_gain) noexcept {
  return speedup > reference * (1.0 + min_gain);
}
}  // namespace detail

namespace policy {

/**
 * What a stop stops. `lane`: the lane whose fork produced the kernel, as in
 * the paper's one-stream loop. `round`: every main lane of the round,
 * running or still waiting for a stream slot, so a multi-lane round (the
 * parallel and evolve strategies) ends as soon as one of its lanes' forks
 * wins instead of waiting for its slowest lane. With one lane the two agree.
 */
enum class termination_scope : std::uint8_t { lane, round };

inline constexpr std::array<std::string_view, 2> termination_scope_names{"lane", "round"};
/// The names the configs' JSON uses (policy/fields.hpp, named_enum).
constexpr const auto& names_of(termination_scope) noexcept { return termination_scope_names; }
constexpr std::string_view to_string(termination_scope s) noexcept {
  return termination_scope_names[static_cast<std::size_t>(s)];
}

/// Speedups of the search's earlier valid (profiled) kernels, in arrival
/// order; excludes the kernel being judged.
struct history_view {
  std::span<const double> speedups;
};

template <class T>
concept termination_policy = requires(const T& t, const history_view& h, double speedup) {
  { t.should_stop(h, speedup) } -> std::same_as<bool>;
  { t.name() } -> std::convertible_to<std::string>;
};


namespace termination {

/**
 * Stops when the new kernel is faster than the mean of the history (the
 * paper's default). With an empty history there is no mean; the kernel must
 * then beat `empty_threshold`, by default 1.0 = the task's baseline. That
 * choice is this project's: the paper does not say what happens before the
 * first valid kernel.
 *
 * "Faster" means by more than `min_gain` (a fraction, 1% by default): two
 * measurements of equally fast kernels differ by the profiler's noise, and a
 * rule without a margin stops on that noise about half the time. 1% is the
 * repeatability the profiler is held to (20 profiles of one kernel within 1%;
 * an H200 measured 0.61%, docs/evaluation.md). 0 gives the bare comparison.
 */
struct beats_mean {
  double empty_threshold = 1.0;
  double min_gain = 0.01;

  [[nodiscard]] bool should_stop(const history_view& h, double speedup) const {
    if (h.speedups.empty()) return detail::beats(speedup, empty_threshold, min_gain);
    const double mean = std::accumulate(h.speedups.begin(), h.speedups.end(), 0.0) / static_cast<double>(h.speedups.size());
    return detail::beats(speedup, mean, min_gain);
  }
  [[nodiscard]] std::string name() const { return "beats_mean"; }
  template <class Self, class F>
  static void fields(Self& s, F&& f) {
    f("empty_threshold", s.empty_threshold, detail::empty_threshold_range);
    f("min_gain", s.min_gain, detail::min_gain_range);
  }
  friend bool operator==(const beats_mean&, const beats_mean&) = default;
};

/// Stops at the first valid speculative kernel, whatever its speed.
struct first_valid {
  [[nodiscard]] bool should_stop(const history_view&, double) const { return true; }
  [[nodiscard]] std::string name() const { return "first_valid"; }
  template <class Self, class F>
  static void fields(Self&, F&&) {}
  friend bool operator==(const first_valid&, const first_valid&) = default;
};

/// Stops when the new kernel beats every earlier one by more than `min_gain`
/// (as for beats_mean); with an empty history it must beat `empty_threshold`
/// (1.0, the baseline, as for beats_mean).
struct best_so_far {
  double empty_threshold = 1.0;
  double min_gain = 0.01;

  [[nodiscard]] bool should_stop(const history_view& h, double speedup) const {
    if (h.speedups.empty()) return detail::beats(speedup, empty_threshold, min_gain);
    return detail::beats(speedup, *std::max_element(h.speedups.begin(), h.speedups.end()), min_gain);
  }
  [[nodiscard]] std::string name() const { return "best_so_far"; }
  template <class Self, class F>
  static void fields(Self& s, F&& f) {
    f("empty_threshold", s.empty_threshold, detail::empty_threshold_range);
    f("min_gain", s.min_gain, detail::min_gain_range);
  }
  friend bool operator==(const best_so_far&, const best_so_far&) = default;
};

/// Never stops the main reasoning (speculation without early termination).
struct never {
  [[nodiscard]] bool should_stop(const history_view&, double) const { return false; }
  [[nodiscard]] std::string name() const { return "never"; }
  template <class Self, class F>
  static void fields(Self&, F&&) {}
  friend bool operator==(const never&, const never&) = default;
};

/// Stops when the new kernel reaches `target` speedup (inclusive), whatever the history.
struct reaches_target {
  double target = 2.0;

  [[nodiscard]] bool should_stop(const history_view&, double speedup) const { return speedup >= target; }
  [[nodiscard]] std::string name() const { return "reaches_target"; }
  template <class Self, class F>
  static void fields(Self& s, F&& f) {
    f("target", s.target, limits::speedup);
  }
  friend bool operator==(const reaches_target&, const reaches_target&) = default;
};

}  // namespace termination

/// How `any_termination` forwards the family's one call.
struct termination_interface {
  struct calls {
    virtual ~calls() = default;
    virtual bool should_stop(const history_view&, double) const = 0;
  };
  template <class Base, class T>
  struct impl : detail::policy_holder<Base, T> {
    using detail::policy_holder<Base, T>::policy_holder;
    bool should_stop(const history_view& h, double s) const override { return this->value.should_stop(h, s); }
  };
};

/**
 * Any termination policy, chosen at run time. Policies are immutable, so
 * copies share one instance.
 *
 * @code
 *   specgen::policy::any_termination t = specgen::policy::termination::reaches_target{.target = 3.0};
 * @endcode
 */
class any_termination : public basic_any<termination_interface, ownership::shared> {
 public:
  any_termination() : any_termination(termination::beats_mean{}) {}
  /// Throws std::invalid_argument when a built-in policy's parameters are out
  /// of range (a programming error: JSON configs are checked where read).
  template <termination_policy T>
    requires(!std::derived_from<std::remove_cvref_t<T>, any_termination>)
  any_termination(T t) : basic_any(std::move(t)) {}  // NOLINT implicit by design
  [[nodiscard]] bool should_stop(const history_view& h, double speedup) const { return self().should_stop(h, speedup); }
};

namespace termination {

/// Stops when any member would stop (e.g. beats the mean, or reaches a target).
class any_of {
 public:
  explicit any_of(std::vector<any_termination> members) : members_(std::move(members)) {}
  template <class... Ts>
    requires(sizeof...(Ts) >= 2 && (termination_policy<std::remove_cvref_t<Ts>> && ...))
  explicit any_of(Ts&&... ts) {
    (members_.emplace_back(std::forward<Ts>(ts)), ...);
  }

  [[nodiscard]] bool should_stop(const history_view& h, double speedup) const {
    return std::any_of(members_.begin(), members_.end(), [&](const auto& m) { return m.should_stop(h, speedup); });
  }
  [[nodiscard]] std::string name() const { return "any_of"; }
  [[nodiscard]] const std::vector<any_termination>& members() const noexcept { return members_; }
  [[nodiscard]] nlohmann::json config() const {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& m : members_) list.push_back(m.config());
    return {{name(), std::move(list)}};
  }

 private:
  std::vector<any_termination> members_;
};


}  // namespace termination
static_assert(termination_policy<termination::beats_mean>);
static_assert(termination_policy<termination::first_valid>);
static_assert(termination_policy<termination::best_so_far>);
static_assert(termination_policy<termination::never>);
static_assert(termination_policy<termination::reaches_target>);
static_assert(termination_policy<termination::any_of>);
static_assert(termination_policy<any_termination>);

/// The paper's default: stop when a speculative kernel beats the history's mean.
inline any_termination default_termination() { return termination::beats_mean{}; }

/// The termination family: its name in configs and its kinds.
struct termination_family {
  using any = any_termination;
  static constexpr std::string_view name = "termination";
  static constexpr std::array<builder<any_termination>, 6> kinds{{
      from_params<any_termination, termination::beats_mean>("beats_mean"),
      from_params<any_termination, termination::first_valid>("first_valid"),
      from_params<any_termination, termination::best_so_far>("best_so_far"),
      from_params<any_termination, termination::never>("never"),
      from_params<any_termination, termination::reaches_target>("reaches_target"),
      any_of_builder<termination_family, termination::any_of>()}};
};

/**
 * Builds a termination policy from JSON: a name (`"beats_mean"`) or
 * `{"<kind>": {params}}`, with `any_of` taking an array of configs.
 *
 * @code
 *   auto t = specgen::policy::make_termination(nlohmann::json::parse(
 *       R"({"any_of": ["beats_mean", {"reaches_target": {"target": 4}}]})"));
 * @endcode
 */
inline expected<any_termination, error> make_termination(const nlohmann::json& j) { return make<termination_family>(j); }

}  // namespace policy

SPECGEN_END_NAMESPACE
