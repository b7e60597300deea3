#pragma once
/// The simulated device: an evaluator that answers compile, validate and
/// profile jobs from a cost table and holds its simulated compile slots and
/// GPUs for the modelled times, in the time of an executor. Under an
/// `event_loop<virtual_clock>` queueing and utilisation are therefore real in
/// virtual time, and the whole engine runs in CI without a GPU.
///
/// @code
///   specgen::event_loop<specgen::virtual_clock> loop;
///   specgen::sim::simulated_device dev(loop, *table, {.devices = 2, .seed = 7});
///   auto c = std::make_shared<const specgen::candidate>(cand);
///   dev.submit({.id = 1, .kind = specgen::stage::compile, .cand = c},
///              [](specgen::eval_outcome o) { /* o.result.kind, o.busy */ });
///   loop.run();
/// @endcode
#include <specgen/clock.hpp>
#include <specgen/detail/config.hpp>
#include <specgen/evaluator.hpp>
#include <specgen/expected.hpp>
#include <specgen/cost_table.hpp>
#include <specgen/detail/json_fields.hpp>
#include <specgen/sim/profile_model.hpp>
#include <specgen/types.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <deque>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace sim {

/// What to do with a kernel the cost table does not list.
enum class unknown_kernel_policy : std::uint8_t {
  /// Answer without a verdict (`eval_outcome::unjudged`, "... is not in the
  /// cost table") and count it: the device measured nothing for the kernel,
  /// so any verdict would be made up.
  unjudged,
  reject,  ///< throw std::out_of_range from submit: the corpus and table must agree
};
inline constexpr std::array<std::string_view, 2> unknown_kernel_policy_names{"unjudged", "reject"};

/**
 * The simulated device's knobs. Times are in seconds.
 *
 * @code
 *   specgen::sim::sim_params p{.devices = 8, .seed = 1, .profile = specgen::profile_params{.max_samples = 50}};
 * @endcode
 */
struct sim_params {
  int devices = 4;               ///< GPUs for validation and profiling
  int compile_slots = 2;         ///< compilation runs on host cores, not GPUs
  std::uint64_t seed = 0;        ///< runtime-noise seed
  bool compile_cache = true;     ///< a second compile of the same source is a cache hit
  double cached_compile_s = 0.002;  ///< a cache hit: hash, look-up, read the binary
  double load_s = 0.01;          ///< module load before each validate job
  double respawn_s = 0.8;        ///< kill and respawn the GPU worker after a fault or timeout
  double deadline_s = 2.0;       ///< a timeout holds the GPU this long instead of validate_s
  std::optional<profile_params> profile{};  ///< overrides the cost table's profile settings
  unknown_kernel_policy unknown_kernels = unknown_kernel_policy::unjudged;
  double unknown_compile_s = 0.5;  ///< compile slot time charged for an unknown kernel (a typical NVRTC compile)
  friend bool operator==(const sim_params&, const sim_params&) = default;
};

/// Counters of a simulated device since construction.
struct sim_stats {
  std::array<std::uint64_t, stage_names.size()> completed{};  ///< jobs run to the end, by stage
  std::uint64_t cancelled = 0;        ///< jobs cancelled while queued or running
  std::uint64_t unknown_kernels = 0;  ///< jobs whose kernel was not in the cost table
  std::uint64_t cache_hits = 0;       ///< compile jobs answered from the compile cache
  std::uint64_t respawns = 0;         ///< worker respawns (faults and timeouts)
  [[nodiscard]] std::uint64_t jobs_run(stage s) const noexcept { return completed[static_cast<std::size_t>(s)]; }
  friend bool operator==(const sim_stats&, const sim_stats&) = default;
};

namespace detail {

template <class Check>
void check_sim_params(const sim_params& p, Check&& check) {
  check(p.devices >= 1, "devices", "must be >= 1");
  check(p.compile_slots >= 1, "compile_slots", "must be >= 1");
  check(p.cached_compile_s >= 0, "cached_compile_s", "must be >= 0");
  check(p.load_s >= 0, "load_s", "must be >= 0");
  check(p.respawn_s >= 0, "respawn_s", "must be >= 0");
  check(p.deadline_s >= 0, "deadline_s", "must be >= 0");
  check(p.unknown_compile_s >= 0, "unknown_compile_s", "must be >= 0");
}

}  // namespace detail

/// Reads `sim_params` from JSON; missing fields keep their defaults, an
/// unknown field is refused, and `"profile": null` (or no profile) uses the
/// cost table's settings.
inline expected<sim_params, error> parse_sim_params(const nlohmann::json& j, std::string_view where = "sim_params") {
  sim_params p;
  std::string unknown = std::string(unknown_kernel_policy_names[static_cast<std::size_t>(p.unknown_kernels)]);
  specgen::detail::field_reader r(j, where, "");
  r.only({"devices", "compile_slots", "seed", "compile_cache", "cached_compile_s", "load_s", "respawn_s", "deadline_s",
          "unknown_kernels", "unknown_compile_s", "profile"})
      .optional("devices", p.devices)
      .optional("compile_slots", p.compile_slots)
      .optional("seed", p.seed)
      .optional("compile_cache", p.compile_cache)
      .optional("cached_compile_s", p.cached_compile_s)
      .optional("load_s", p.load_s)
      .optional("respawn_s", p.respawn_s)
      .optional("deadline_s", p.deadline_s)
      .optional("unknown_kernels", unknown)
      .optional("unknown_compile_s", p.unknown_compile_s);
  const auto* policy = std::find(unknown_kernel_policy_names.begin(), unknown_kernel_policy_names.end(), unknown);
  r.check(policy != unknown_kernel_policy_names.end(), "unknown_kernels",
          fmt::format("\"{}\" is not one of: {}", unknown, fmt::join(unknown_kernel_policy_names, ", ")));
  if (r.ok()) {
    p.unknown_kernels = static_cast<unknown_kernel_policy>(policy - unknown_kernel_policy_names.begin());
    detail::check_sim_params(p, [&](bool ok, std::string_view f, std::string_view why) { r.check(ok, f, why); });
  }
  if (!r.ok()) return unexpected(*r.failure());
  if (auto it = j.find("profile"); it != j.end() && !it->is_null()) {
    auto prof = specgen::detail::parse_profile(*it, where, "/profile");
    if (!prof) return unexpected(prof.error());
    p.profile = *prof;
  }
  return p;
}

template <class Json>
void to_json(Json& j, const sim_params& p) {
  j = Json::object();
  j["devices"] = p.devices;
  j["compile_slots"] = p.compile_slots;
  j["seed"] = p.seed;
  j["compile_cache"] = p.compile_cache;
  j["cached_compile_s"] = p.cached_compile_s;
  j["load_s"] = p.load_s;
  j["respawn_s"] = p.respawn_s;
  j["deadline_s"] = p.deadline_s;
  if (p.profile) to_json(j["profile"], *p.profile);  // absent: the table's settings (json.hpp's optional rule)
  j["unknown_kernels"] = unknown_kernel_policy_names[static_cast<std::size_t>(p.unknown_kernels)];
  j["unknown_compile_s"] = p.unknown_compile_s;
}

/// For `json.get<sim_params>()`; throws `detail::json_read_error` (the
/// convention of json.hpp) with `parse_sim_params`'s JSON pointer and problem.
inline void from_json(const nlohmann::json& j, sim_params& p) {
  auto r = parse_sim_params(j);
  if (!r) throw specgen::detail::json_read_error(r.error());
  p = *r;
}

/// Device time of a validation job: module load plus the table's validation
/// time; a timeout holds the GPU for the deadline instead, and a fault or a
/// timeout adds the worker's respawn.
inline duration validation_time(const cost_entry& e, const sim_params& p) {
  const bool timeout = e.verdict == verdict_kind::timeout;
  const bool respawn = timeout || e.verdict == verdict_kind::fault;
  return seconds(p.load_s) + seconds(timeout ? p.deadline_s : e.validate_s) + (respawn ? seconds(p.respawn_s) : duration{0});
}

/**
 * An evaluator backed by a cost table, in the time of an executor.
 *
 * - compile: `compile_s` on a compile slot (FIFO queue when all are busy);
 *   compile_error if the table says so, else ok. A repeat compile of a
 *   source is a cache hit costing `cached_compile_s`.
 * - validate on device d: `load_s + validate_s` and the table's verdict;
 *   a timeout holds the GPU `load_s + deadline_s`, and a fault or timeout
 *   adds `respawn_s` for the worker respawn.
 * - profile on device d: see `simulate_profile`; a kernel whose verdict is
 *   not ok fails profiling exactly as it fails validation.
 *
 * Callbacks always run from executor timers, never inside `submit` or
 * `cancel`. The device must outlive the loop's run (its timers call it);
 * destroying it cancels its pending timers.
 *
 * @code
 *   dev.submit({.id = 2, .kind = specgen::stage::profile, .device = 0,
 *               .cand = std::make_shared<const specgen::candidate>(cand)}, on_done);
 *   dev.cancel(2);   // on_done gets cancelled = true, busy = time the GPU was held
 * @endcode
 */
class simulated_device {
 public:
  /// Throws std::invalid_argument if `params` (or the table's profile
  /// settings) are out of range; the message names the field.
  simulated_device(executor& exec, cost_table table, sim_params params = {})
      : exec_(exec),
        table_(std::move(table)),
        params_(std::move(params)),
        profile_(params_.profile.value_or(table_.profile)),
        device_holder_(static_cast<std::size_t>(std::max(params_.devices, 0))),
        device_busy_(device_holder_.size(), duration{0}),
        slot_holder_(static_cast<std::size_t>(std::max(params_.compile_slots, 0))),
        slot_busy_(slot_holder_.size(), duration{0}) {
    auto fail = [](std::string_view prefix) {
      return [prefix](bool ok, std::string_view field, std::string_view why) {
        if (!ok) throw std::invalid_argument(fmt::format("{}.{}: {}", prefix, field, why));
      };
    };
    detail::check_sim_params(params_, fail("sim_params"));
    specgen::detail::check_profile(profile_, fail("profile_params"));
  }
  simulated_device(const simulated_device&) = delete;  // pending timers capture `this`
  simulated_device& operator=(const simulated_device&) = delete;
  ~simulated_device() {
    for (const auto& [id, job] : running_) exec_.cancel(job.timer);
  }

  [[nodiscard]] int devices() const noexcept { return params_.devices; }
  [[nodiscard]] int compile_slots() const noexcept { return params_.compile_slots; }

  /// Starts (or, for compile jobs beyond free slots, queues) a job. Throws
  /// std::logic_error for a caller bug: no candidate, a job id already in
  /// flight, a device out of range or already busy.
  void submit(eval_job job, eval_callback cb) {
    if (!job.cand) throw std::logic_error(fmt::format("simulated_device: job {} has no candidate", job.id));
    if (in_flight(job.id))
      throw std::logic_error(fmt::format("simulated_device: job id {} is already queued or running", job.id));
    const std::uint64_t key = source_key(job.cand->source);
    const cost_entry* entry = table_.find(key);
    if (!entry && params_.unknown_kernels == unknown_kernel_policy::reject)
      throw std::out_of_range(unknown_summary(key));

    active_job a{.job = std::move(job), .cb = std::move(cb), .entry = entry, .key = key};
    if (a.job.kind == stage::compile) {
      a.job.device = -1;
      compile_queue_.push_back(std::move(a));
      start_queued_compiles();
      return;
    }
    const int d = a.job.device;
    if (d < 0 || d >= params_.devices)
      throw std::logic_error(fmt::format("simulated_device: job {} names device {}, but there are {} (0..{})",
                                         a.job.id, d, params_.devices, params_.devices - 1));
    if (const auto& holder = device_holder_[static_cast<std::size_t>(d)])
      throw std::logic_error(fmt::format("simulated_device: job {} submitted to device {}, which is running job {} "
                                         "(one job per device; wait for its callback or cancel it)",
                                         a.job.id, d, *holder));
    plan p = a.job.kind == stage::validate ? plan_validate(a) : plan_profile(a);
    start(std::move(a), d, std::move(p));
  }

  /// Cancels a queued or running job: a queued compile is dropped, a running
  /// job stops at once and frees its device or slot. The callback reports
  /// `cancelled = true` and the time actually held. False if `id` is not in flight.
  bool cancel(job_id id) {
    if (auto q = std::find_if(compile_queue_.begin(), compile_queue_.end(),
                              [&](const active_job& a) { return a.job.id == id; });
        q != compile_queue_.end()) {
      active_job a = std::move(*q);
      compile_queue_.erase(q);
      report_cancelled(std::move(a), duration{0});
      return true;
    }
    auto node = running_.extract(id);
    if (node.empty()) return false;
    active_job& a = node.mapped();
    exec_.cancel(a.timer);
    const duration held = exec_.now() - a.started;
    release(a, held);
    const bool was_compile = a.job.kind == stage::compile;
    report_cancelled(std::move(a), held);
    if (was_compile) start_queued_compiles();
    return true;
  }

  /// GPU time device `device` has been held so far, the running job's share included.
  [[nodiscard]] duration busy_time(int device) const { return held_so_far(stage::validate, device); }
  /// Host time compile slot `slot` has been held so far, the running job's share included.
  [[nodiscard]] duration compile_busy_time(int slot) const { return held_so_far(stage::compile, slot); }
  [[nodiscard]] bool device_free(int device) const { return !device_holder_.at(static_cast<std::size_t>(device)); }
  [[nodiscard]] std::size_t queued_compiles() const noexcept { return compile_queue_.size(); }
  [[nodiscard]] const sim_stats& stats() const noexcept { return stats_; }
  [[nodiscard]] const cost_table& table() const noexcept { return table_; }
  [[nodiscard]] const sim_params& params() const noexcept { return params_; }
  /// The profile settings in force: `params().profile`, else the table's.
  [[nodiscard]] const profile_params& profile() const noexcept { return profile_; }

 private:
  struct active_job {
    eval_job job;
    eval_callback cb;
    const cost_entry* entry = nullptr;  // into table_, which never changes; null: not in the table
    std::uint64_t key = 0;
    int resource = -1;  // the compile slot or device held while running
    timestamp started{0};
    timer_id timer = 0;
    eval_outcome result{};
  };
  struct plan {
    duration time{0};
    eval_outcome result{};
  };

  [[nodiscard]] bool in_flight(job_id id) const {
    return running_.contains(id) || std::any_of(compile_queue_.begin(), compile_queue_.end(),
                                                [&](const active_job& a) { return a.job.id == id; });
  }

  static verdict make_verdict(verdict_kind kind, std::string summary, std::string log) {
    verdict v;
    v.kind = kind;
    v.summary = std::move(summary);
    v.log = std::move(log);
    return v;
  }

  static std::string unknown_summary(std::uint64_t key) {
    return fmt::format("simulated device: kernel {} is not in the cost table", format_key(key));
  }

  /// The answer for a kernel the table does not list; counted, as a corpus
  /// and table that disagree make every simulated number suspect.
  plan plan_unknown(const active_job& a, double seconds_held) {
    ++stats_.unknown_kernels;
    plan p{.time = seconds(seconds_held)};
    p.result.unjudged = true;
    p.result.result = make_verdict(verdict_kind::compile_error, unknown_summary(a.key),
                              fmt::format("task \"{}\"; the cost table ({}) lists {} kernels; measure this kernel "
                                          "or regenerate the table",
                                          a.job.cand->task, table_.device, table_.kernels.size()));
    return p;
  }

  plan plan_compile(const active_job& a) {
    if (!a.entry) return plan_unknown(a, params_.unknown_compile_s);
    const bool hit = params_.compile_cache && compiled_.contains(a.key);
    plan p{.time = seconds(hit ? params_.cached_compile_s : a.entry->compile_s)};
    if (hit) ++stats_.cache_hits;
    p.result.compile = {.seconds = hit ? 0.0 : a.entry->compile_s, .cache_hit = hit};
    if (a.entry->verdict == verdict_kind::compile_error)
      p.result.result = make_verdict(verdict_kind::compile_error, a.entry->summary, a.entry->log);
    return p;
  }

  plan plan_validate(const active_job& a) {
    if (!a.entry) return plan_unknown(a, params_.load_s);
    const cost_entry& e = *a.entry;
    plan p;
    p.time = validation_time(e, params_);
    if (e.verdict == verdict_kind::timeout || e.verdict == verdict_kind::fault) ++stats_.respawns;
    p.result.result = make_verdict(e.verdict, e.summary, e.log);
    return p;
  }

  plan plan_profile(const active_job& a) {
    if (!a.entry || a.entry->verdict != verdict_kind::ok) return plan_validate(a);
    const std::uint64_t attempt = profile_attempts_[a.key]++;
    profile_run run = simulate_profile(*a.entry, profile_, detail::stream_seed(params_.seed, a.key, attempt));
    plan p{.time = run.device_time};
    p.result.timing = std::move(run.timing);
    return p;
  }

  void start_queued_compiles() {
    while (!compile_queue_.empty()) {
      auto slot = std::find(slot_holder_.begin(), slot_holder_.end(), std::nullopt);
      if (slot == slot_holder_.end()) return;
      active_job a = std::move(compile_queue_.front());
      compile_queue_.pop_front();
      plan p = plan_compile(a);
      start(std::move(a), static_cast<int>(slot - slot_holder_.begin()), std::move(p));
    }
  }

  /// Holds `resource` (a compile slot for compile jobs, else a device) for the plan's time.
  void start(active_job a, int resource, plan p) {
    holders(a.job.kind)[static_cast<std::size_t>(resource)] = a.job.id;
    a.result = std::move(p.result);
    a.result.id = a.job.id;
    a.result.kind = a.job.kind;
    a.result.device = a.job.kind == stage::compile ? -1 : resource;
    a.started = exec_.now();
    a.resource = resource;
    const job_id id = a.job.id;
    a.timer = exec_.after(p.time, [this, id] { finish(id); });
    running_.emplace(id, std::move(a));
  }

  void finish(job_id id) {
    auto node = running_.extract(id);
    active_job& a = node.mapped();
    const duration held = exec_.now() - a.started;
    release(a, held);
    ++stats_.completed[static_cast<std::size_t>(a.job.kind)];
    const bool compiled = a.job.kind == stage::compile;
    if (compiled && a.entry && params_.compile_cache) compiled_.insert(a.key);
    // Free slots go to the queue before the callback runs, so a compile the
    // callback submits queues behind those already waiting (FIFO).
    if (compiled) start_queued_compiles();
    a.result.busy = held;
    a.cb(std::move(a.result));
  }

  void release(const active_job& a, duration held) {
    const auto r = static_cast<std::size_t>(a.resource);
    holders(a.job.kind)[r].reset();
    (a.job.kind == stage::compile ? slot_busy_ : device_busy_)[r] += held;
  }

  /// Reports a cancel from a timer: the caller of `cancel` may be iterating
  /// its own queues and must not be re-entered.
  void report_cancelled(active_job a, duration held) {
    ++stats_.cancelled;
    eval_outcome o;
    o.id = a.job.id;
    o.kind = a.job.kind;
    o.device = a.job.kind == stage::compile ? -1 : a.job.device;
    o.cancelled = true;
    o.busy = held;
    exec_.after(duration{0}, [cb = std::move(a.cb), o = std::move(o)]() mutable { cb(std::move(o)); });
  }

  std::vector<std::optional<job_id>>& holders(stage kind) {
    return kind == stage::compile ? slot_holder_ : device_holder_;
  }

  [[nodiscard]] duration held_so_far(stage kind, int resource) const {
    const auto r = static_cast<std::size_t>(resource);
    const bool compile = kind == stage::compile;
    duration held = (compile ? slot_busy_ : device_busy_).at(r);
    if (const auto& holder = (compile ? slot_holder_ : device_holder_)[r])
      held += exec_.now() - running_.at(*holder).started;
    return held;
  }

  executor& exec_;
  const cost_table table_;
  const sim_params params_;
  const profile_params profile_;
  std::vector<std::optional<job_id>> device_holder_;
  std::vector<duration> device_busy_;
  std::vector<std::optional<job_id>> slot_holder_;
  std::vector<duration> slot_busy_;
  std::deque<active_job> compile_queue_;
  std::unordered_map<job_id, active_job> running_;
  std::unordered_set<std::uint64_t> compiled_;                   // compile cache, by source key
  std::unordered_map<std::uint64_t, std::uint64_t> profile_attempts_;  // by source key
  sim_stats stats_;
};

static_assert(evaluator<simulated_device>);

}  // namespace sim
SPECGEN_END_NAMESPACE
