#pragma once
/// Pool-allocation policies: how the evaluation devices are split between
/// validation and profiling, and in which order validation is served.
///
/// The device scheduler (scheduler.hpp) asks its policy once per epoch how many
/// of its devices validate; the rest profile. The paper's elastic scheduler
/// (SpecGen, arXiv 2606.17518) splits in proportion to the previous epoch's peak
/// queue lengths and serves validation latest-arrival-first. Split and order are
/// independent knobs, so the ablation ladder is three configurations:
///
/// @code
///   specgen::policy::any_pool spec     = specgen::policy::static_split{};                                 // +spec
///   specgen::policy::any_pool elastic  = specgen::policy::elastic{.validation = specgen::policy::queue_order::fifo};  // +elastic
///   specgen::policy::any_pool priority = specgen::policy::elastic{};                                      // +priority
///   auto from_config = specgen::policy::make_pool(nlohmann::json::parse(R"({"elastic":{"interval_s":2}})"));
/// @endcode
///
/// The profiling queue is always FIFO (the paper's choice; a profile has no
/// reason to overtake an older one).
///
/// A third knob, `conserves_work()`, says whether a device whose own role's
/// queue is empty may take a job of the other role (any GPU can run any
/// validation or profiling job). `elastic` does by default; `static_split`, the
/// paper's fixed-split baseline, does not unless asked. A policy type without
/// the member keeps devices to their roles.
#include <specgen/clock.hpp>
#include <specgen/detail/config.hpp>
#include <specgen/expected.hpp>
#include <specgen/policy/family.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeinfo>
#include <utility>

SPECGEN_BEGIN_NAMESPACE

namespace detail {
/// `n * num / den` rounded to nearest (halves up), exact in integers.
constexpr int round_share(int n, std::size_t num, std::size_t den) noexcept {
  const auto nn = static_cast<std::uint64_t>(n);
  return static_cast<int>((2 * nn * num + den) / (2 * den));
}
}  // namespace detail

namespace policy {


/// Service order of a queue. `lifo` serves the latest arrival first.
enum class queue_order : std::uint8_t { fifo, lifo };

inline constexpr std::array<std::string_view, 2> queue_order_names{"fifo", "lifo"};

constexpr std::string_view to_string(queue_order o) noexcept {
  return queue_order_names[static_cast<std::size_t>(o)];
}
/// The names the policies' JSON uses (see policy/fields.hpp, named_enum).
constexpr const auto& names_of(queue_order) noexcept { return queue_order_names; }
constexpr std::optional<queue_order> parse_queue_order(std::string_view s) noexcept {
  for (std::size_t i = 0; i < queue_order_names.size(); ++i)
    if (queue_order_names[i] == s) return static_cast<queue_order>(i);
  return std::nullopt;
}

/// The longest validation and profiling queues seen during the last epoch
/// (jobs waiting for a device, not jobs running).
struct queue_peaks {
  std::size_t validation = 0;
  std::size_t profiling = 0;
  friend bool operator==(const queue_peaks&, const queue_peaks&) = default;
};

/// A pool policy. `validation_devices` must be a pure function of its
/// arguments; the scheduler clamps its answer to [0, devices].
template <class P>
concept pool_policy = requires(const P& p, const queue_peaks& q, int devices) {
  { p.validation_devices(q, devices) } -> std::same_as<int>;
  { p.validation_order() } -> std::same_as<queue_order>;
  { p.rebalance_interval() } -> std::same_as<duration>;  ///< epoch length; 0 = never rebalance
  { p.name() } -> std::convertible_to<std::string>;
};

/// Whether `p` lets an idle device take the other role's jobs once its own
/// role's queue is empty: `p.conserves_work()` where the policy has that
/// member, otherwise false (devices keep to their roles).
template <class P>
[[nodiscard]] bool conserves_work_of(const P& p) {
  if constexpr (requires { { p.conserves_work() } -> std::convertible_to<bool>; })
    return static_cast<bool>(p.conserves_work());
  else
    return false;
}

/// A fixed split, decided once: the baselines' statically partitioned pools.
/// Devices keep to their roles unless `work_conserving` is set (the baselines
/// leave it off: a fixed split is what they measure).
///
/// @code
///   specgen::policy::static_split s{.validation_fraction = 0.25};
///   s.validation_devices({}, 8);  // 2
/// @endcode
struct static_split {
  double validation_fraction = 0.5;               ///< share of devices that validate, in [0, 1]
  queue_order validation = queue_order::fifo;     ///< baselines serve in arrival order
  bool work_conserving = false;                   ///< idle devices take the other role's jobs

  [[nodiscard]] int validation_devices(const queue_peaks&, int devices) const noexcept {
    if (devices <= 0) return 0;
    const double f = std::clamp(validation_fraction, 0.0, 1.0);
    const auto v = static_cast<int>(f * devices + 0.5);
    return std::clamp(v, 0, devices);
  }
  [[nodiscard]] queue_order validation_order() const noexcept { return validation; }
  [[nodiscard]] duration rebalance_interval() const noexcept { return duration{0}; }
  [[nodiscard]] bool conserves_work() const noexcept { return work_conserving; }
  [[nodiscard]] std::string name() const { return "static_split"; }
  template <class Self, class F>
  static void fields(Self& s, F&& f) {
    f("validation_fraction", s.validation_fraction, detail::in(0.0, 1.0));
    f("validation", s.validation);
    f("work_conserving", s.work_conserving);
  }
  friend bool operator==(const static_split&, const static_split&) = default;
};

/// The paper's elastic split: each epoch, devices are divided in proportion to
/// the previous epoch's peak queue lengths (rounded to nearest), evenly when
/// both queues stayed empty (an odd device goes to validation).
///
/// Floors: at least `min_validation` devices validate (the paper always keeps
/// validation capacity); then, if devices remain, at least `min_profiling`
/// profile. The paper gives no profiling floor; the default of 1 is this
/// project's choice, because profiling results are the feedback the search
/// exists for, and without a floor a profiling request arriving after a
/// validation-only epoch would wait a whole epoch for a device. With a single
/// device, validation wins and the scheduler lets that device serve profiling
/// too (see device_scheduler).
///
/// Work conserving by default: a device whose own role's queue is empty takes
/// a queued job of the other role rather than wait for the next epoch, and
/// keeps its role. The split still decides which queue each device serves
/// first. `work_conserving = false` gives the paper's strict roles.
///
/// @code
///   specgen::policy::elastic e;                                  // min 1 + 1, LIFO, 5 s epochs, work conserving
///   e.validation_devices({.validation = 6, .profiling = 2}, 8);  // 6
///   e.validation_devices({}, 8);                                 // 4 (both empty: even)
/// @endcode
struct elastic {
  int min_validation = 1;
  int min_profiling = 1;
  queue_order validation = queue_order::lifo;  ///< newer candidates come from longer prefixes and pass more often
  /// Epoch length; 0 (or less) = never rebalance. The paper rebalances "each
  /// round" and gives no length; this project reads that as a fixed scheduler
  /// epoch, 5 s by default: forks arrive seconds apart while a search round lasts minutes.
  duration interval = seconds(5);
  bool work_conserving = true;  ///< idle devices take the other role's jobs

  [[nodiscard]] int validation_devices(const queue_peaks& q, int devices) const noexcept {
    if (devices <= 0) return 0;
    const std::size_t total = q.validation + q.profiling;
    const int proportional =
        total == 0 ? (devices + 1) / 2 : detail::round_share(devices, q.validation, total);
    const int lo = std::clamp(min_validation, 0, devices);
    const int hi = std::max(lo, devices - std::clamp(min_profiling, 0, devices));
    return std::clamp(proportional, lo, hi);
  }
  [[nodiscard]] queue_order validation_order() const noexcept { return validation; }
  [[nodiscard]] duration rebalance_interval() const noexcept { return interval; }
  [[nodiscard]] bool conserves_work() const noexcept { return work_conserving; }
  [[nodiscard]] std::string name() const { return "elastic"; }
  /// In JSON the epoch is `interval_s`, in seconds: at least 0.1 s, because
  /// each epoch is an event of the run (an epoch of a nanosecond would make a
  /// run of minutes take 10^11 events), or 0 for never.
  template <class Self, class F>
  static void fields(Self& s, F&& f) {
    f("min_validation", s.min_validation, detail::in(0, limits::max_devices));
    f("min_profiling", s.min_profiling, detail::in(0, limits::max_devices));
    f("validation", s.validation);
    f("interval_s", s.interval, detail::in_or_zero(0.1, 86'400.0, "never"));
    f("work_conserving", s.work_conserving);
  }
  friend bool operator==(const elastic&, const elastic&) = default;
};

static_assert(pool_policy<static_split>);
static_assert(pool_policy<elastic>);

/// How `any_pool` forwards the family's calls.
struct pool_interface {
  struct calls {
    virtual ~calls() = default;
    [[nodiscard]] virtual int validation_devices(const queue_peaks& q, int devices) const = 0;
    [[nodiscard]] virtual queue_order validation_order() const = 0;
    [[nodiscard]] virtual duration rebalance_interval() const = 0;
    [[nodiscard]] virtual bool conserves_work() const { return false; }
  };
  template <class Base, class T>
  struct impl : detail::policy_holder<Base, T> {
    using detail::policy_holder<Base, T>::policy_holder;
    int validation_devices(const queue_peaks& q, int devices) const override { return this->value.validation_devices(q, devices); }
    queue_order validation_order() const override { return this->value.validation_order(); }
    duration rebalance_interval() const override { return this->value.rebalance_interval(); }
    bool conserves_work() const override { return conserves_work_of(this->value); }
  };
};

/// Any pool policy, chosen at run time (from a CLI flag or a JSON config).
/// Copies share the immutable policy. Defaults to the paper's `elastic{}`.
///
/// @code
///   specgen::policy::any_pool p = specgen::policy::static_split{.validation_fraction = 0.75};
///   p.name();                                  // "static_split"
///   p.target<specgen::policy::static_split>(); // the params, or nullptr for another type
/// @endcode
class any_pool : public basic_any<pool_interface, ownership::shared> {
 public:
  any_pool() : any_pool(elastic{}) {}
  template <pool_policy P>
    requires(!std::derived_from<std::remove_cvref_t<P>, any_pool>)
  any_pool(P p) : basic_any(std::move(p)) {}  // NOLINT(google-explicit-constructor): a policy is-an any_pool

  [[nodiscard]] int validation_devices(const queue_peaks& q, int devices) const { return self().validation_devices(q, devices); }
  [[nodiscard]] queue_order validation_order() const { return self().validation_order(); }
  [[nodiscard]] duration rebalance_interval() const { return self().rebalance_interval(); }
  /// Whether idle devices take the other role's jobs (false for a policy without the member).
  [[nodiscard]] bool conserves_work() const { return self().conserves_work(); }
};

static_assert(pool_policy<any_pool>);

/// The pool family: its name in configs and its kinds.
struct pool_family {
  using any = any_pool;
  static constexpr std::string_view name = "pool";
  static constexpr std::array<builder<any_pool>, 2> kinds{{from_params<any_pool, elastic>("elastic"),
                                                           from_params<any_pool, static_split>("static_split")}};
};

/// Build a pool policy from a config: `{"elastic": {...}}`, `{"static_split": {...}}`,
/// or just the name for the defaults (`"elastic"`). Unknown names and keys are errors.
///
/// @code
///   auto p = specgen::policy::make_pool(nlohmann::json::parse(R"({"static_split":{"validation_fraction":0.25}})"));
///   if (!p) std::cerr << p.error().what() << '\n';
/// @endcode
inline expected<any_pool, error> make_pool(const nlohmann::json& config) { return make<pool_family>(config); }

}  // namespace policy

SPECGEN_END_NAMESPACE
