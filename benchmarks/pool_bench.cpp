// specgen-bench pool: the evaluation pool's policies under an open load, in
// virtual time.
//
// Candidates arrive at random (a Poisson process, seeded) and are validated;
// a share of them is then profiled, so profiling jobs follow validations. Each
// candidate's job lengths are drawn once (exponential, by stage), so every
// policy serves the same candidates with the same lengths. A stand-in
// evaluator holds a device for each job's length on the loop's virtual clock;
// a device_scheduler runs the pool. Per policy (static_split, elastic with
// strict roles, elastic work-conserving) and per load (a saturating one and a
// moderate one, as multiples of the pool's capacity) it prints the pool's
// utilisation, the device time idle while a job waited, and the jobs completed
// within the measured window. Nothing here asserts a time.
#include "gpu_support.hpp"  // write_json
#include "support/cli.hpp"

#include <specgen/clock.hpp>
#include <specgen/policy/pool.hpp>
#include <specgen/scheduler.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace specgen::bench {

namespace {

/// The load, decided before any policy runs.
struct candidate_load {
  timestamp arrives;
  duration validate;
  std::optional<duration> profile;  ///< none: the candidate is not profiled
};

struct load_params {
  int devices = 4;
  double seconds = 3600;     ///< arrivals and the measured window: [0, seconds)
  double validate_s = 2;     ///< mean validation length
  double profile_s = 4;      ///< mean profiling length
  double profiled = 0.4;     ///< share of validated candidates that are profiled
  std::uint64_t seed = 1;

  /// Candidates per second the pool can serve: devices / device-seconds per candidate.
  [[nodiscard]] double capacity() const { return devices / (validate_s + profiled * profile_s); }
};

std::vector<candidate_load> make_load(const load_params& p, double load) {
  std::mt19937_64 rng(p.seed);
  std::exponential_distribution<double> gap(load * p.capacity()), validate(1 / p.validate_s), profile(1 / p.profile_s);
  std::bernoulli_distribution profiled(p.profiled);
  std::vector<candidate_load> out;
  for (double t = gap(rng); t < p.seconds; t += gap(rng)) {
    candidate_load c{.arrives = seconds(t), .validate = seconds(validate(rng)), .profile = std::nullopt};
    const double length = profile(rng);  // drawn for every candidate, so the draws do not depend on the share
    if (profiled(rng)) c.profile = seconds(length);
    out.push_back(c);
  }
  return out;
}

/// A stand-in evaluator: a job holds its device for the candidate's length.
class standin_evaluator {
 public:
  standin_evaluator(executor& ex, const std::vector<candidate_load>& load) : ex_(ex), load_(load) {}

  void submit(eval_job j, eval_callback cb) {
    const auto& c = load_.at(static_cast<std::size_t>(j.cand->id - 1));
    const duration took = j.kind == stage::profile ? c.profile.value_or(duration{0}) : c.validate;
    const job_id id = j.id;
    const timer_id t = ex_.after(took, [this, id] {
      auto node = live_.extract(id);
      node.mapped().second(outcome(id, false));
    });
    live_.emplace(id, std::pair{t, std::move(cb)});
  }
  bool cancel(job_id id) {
    auto node = live_.extract(id);
    if (node.empty()) return false;
    ex_.cancel(node.mapped().first);
    ex_.at(ex_.now(), [id, cb = std::move(node.mapped().second)] { cb(outcome(id, true)); });
    return true;
  }

 private:
  static eval_outcome outcome(job_id id, bool cancelled) {
    eval_outcome o;
    o.id = id;
    o.cancelled = cancelled;
    o.result.kind = verdict_kind::ok;
    return o;
  }
  executor& ex_;
  const std::vector<candidate_load>& load_;
  std::map<job_id, std::pair<timer_id, eval_callback>> live_;
};

struct policy_run {
  std::string label;
  scheduler_stats stats;
  std::uint64_t validated = 0, profiled = 0;  ///< completed within the window
  duration validation_wait{0}, profiling_wait{0};  ///< summed from enqueue to start, over jobs started
  std::uint64_t validations_started = 0, profiles_started = 0;

  [[nodiscard]] double mean_wait_s(stage s) const {
    const auto n = s == stage::profile ? profiles_started : validations_started;
    return n > 0 ? to_seconds(s == stage::profile ? profiling_wait : validation_wait) / static_cast<double>(n) : 0.0;
  }
};

policy_run run_policy(const std::string& label, policy::any_pool pool, const load_params& p,
                      const std::vector<candidate_load>& load) {
  event_loop<virtual_clock> loop;
  standin_evaluator ev(loop, load);
  policy_run r{.label = label, .stats = {}};
  std::vector<timestamp> profile_queued(load.size());
  auto submit = [&](eval_job j, eval_callback cb) {
    const auto i = static_cast<std::size_t>(j.cand->id - 1);
    if (j.kind == stage::profile) {
      r.profiling_wait += loop.now() - profile_queued[i];
      ++r.profiles_started;
    } else {
      r.validation_wait += loop.now() - load[i].arrives;
      ++r.validations_started;
    }
    ev.submit(std::move(j), std::move(cb));
  };
  device_scheduler sched(loop, p.devices, 1, std::move(pool),
                         {.submit = submit, .cancel = [&](job_id id) { return ev.cancel(id); }});
  const auto task = std::make_shared<const specgen::task>();
  for (std::size_t i = 0; i < load.size(); ++i) {
    auto c = std::make_shared<candidate>();
    c->id = static_cast<candidate_id>(i + 1);
    loop.at(load[i].arrives, [&, c = std::shared_ptr<const candidate>(std::move(c)), i] {
      sched.enqueue(stage::validate, c, task, 0, [&, c, i](eval_outcome o) {
        if (o.cancelled) return;
        ++r.validated;
        if (!load[i].profile) return;
        profile_queued[i] = loop.now();
        sched.enqueue(stage::profile, c, task, 0, [&](eval_outcome po) {
          if (!po.cancelled) ++r.profiled;
        });
      });
    });
  }
  // The window ends with the arrivals; the work still queued or running then is dropped.
  loop.at(seconds(p.seconds), [&] {
    r.stats = sched.stats();
    sched.cancel_group(0, true);
  });
  loop.run();
  return r;
}

double share_of_device_time(const scheduler_stats& s, duration d) {
  const auto window = s.until - s.since;
  const auto devices = static_cast<double>(s.device_busy.size());
  return window > duration{0} && devices > 0
             ? static_cast<double>(d.count()) / (static_cast<double>(window.count()) * devices)
             : 0.0;
}

nlohmann::json to_json(const policy_run& r) {
  return {{"policy", r.label},
          {"utilisation", r.stats.utilisation()},
          {"idle_while_queued_s", to_seconds(r.stats.idle_while_queued)},
          {"idle_while_queued_share", share_of_device_time(r.stats, r.stats.idle_while_queued)},
          {"idle_while_validation_queued_s", to_seconds(r.stats.idle_while_validation_queued)},
          {"idle_while_profiling_queued_s", to_seconds(r.stats.idle_while_profiling_queued)},
          {"validated", r.validated},
          {"profiled", r.profiled},
          {"completed", r.validated + r.profiled},
          {"mean_validation_wait_s", r.mean_wait_s(stage::validate)},
          {"mean_profiling_wait_s", r.mean_wait_s(stage::profile)},
          {"scheduler", r.stats}};
}

void declare(programs::options& o) {
  o.value("devices", "N", "evaluation GPUs, 1 to 1024 (default 4)")
      .value("seconds", "S", "virtual seconds of arrivals, the measured window, 1 to 10^6 (default 3600)")
      .value("validate-s", "S", "mean validation length, 0.001 to 3600 (default 2)")
      .value("profile-s", "S", "mean profiling length, 0.001 to 3600 (default 4)")
      .value("profiled", "F", "share of validated candidates that are profiled, 0 to 1 (default 0.4)")
      .value("load", "X",
             "arrival rate of the saturating run, as a multiple of the pool's\n"
             "capacity, 0.01 to 100 (default 1.5)")
      .value("moderate-load", "X", "the same for the moderate run (default 0.7)")
      .value("seed", "N", "seed of the arrivals and lengths (default 1)")
      .value("json", "FILE", "write the JSON results");
}

int run(const programs::options& a) {
  load_params p;
  p.devices = a.number<int>("devices", 4, limits::devices);
  p.seconds = a.number<double>("seconds", 3600, detail::in(1.0, 1e6));
  p.validate_s = a.number<double>("validate-s", 2, detail::in(0.001, 3600.0));
  p.profile_s = a.number<double>("profile-s", 4, detail::in(0.001, 3600.0));
  p.profiled = a.number<double>("profiled", 0.4, detail::in(0.0, 1.0));
  p.seed = a.number<std::uint64_t>("seed", 1);
  const double loads[] = {a.number<double>("load", 1.5, detail::in(0.01, 100.0)),
                          a.number<double>("moderate-load", 0.7, detail::in(0.01, 100.0))};

  fmt::print("specgen-bench pool: {} devices, {:.0f} s of virtual time; validation {:.2f} s, profiling {:.2f} s "
             "(means, exponential), {:.0f}% of validated candidates profiled; capacity {:.3f} candidates/s\n",
             p.devices, p.seconds, p.validate_s, p.profile_s, 100 * p.profiled, p.capacity());
  nlohmann::json out = {{"benchmark", "pool"},
                        {"clock", "virtual"},
                        {"devices", p.devices},
                        {"seconds", p.seconds},
                        {"validate_s", p.validate_s},
                        {"profile_s", p.profile_s},
                        {"profiled", p.profiled},
                        {"seed", p.seed},
                        {"capacity_per_s", p.capacity()},
                        {"loads", nlohmann::json::array()}};
  for (double load : loads) {
    const auto candidates = make_load(p, load);
    fmt::print("\nload {:.2f} x capacity: {} candidates arrive\n", load, candidates.size());
    fmt::print("  {:<26} {:>11} {:>22} {:>10} {:>9} {:>17}\n", "policy", "utilisation", "idle while queued",
               "validated", "profiled", "mean wait (v / p)");
    nlohmann::json runs = nlohmann::json::array();
    const std::pair<std::string, policy::any_pool> policies[] = {
        {"static_split", policy::static_split{}},
        {"elastic (strict roles)", policy::elastic{.work_conserving = false}},
        {"elastic (work conserving)", policy::elastic{}}};
    for (const auto& [label, pool] : policies) {
      const auto r = run_policy(label, pool, p, candidates);
      fmt::print("  {:<26} {:>10.1f}% {:>11.0f} s ({:>5.1f}%) {:>10} {:>9} {:>8.1f} / {:>4.1f} s\n", label,
                 100 * r.stats.utilisation(), to_seconds(r.stats.idle_while_queued),
                 100 * share_of_device_time(r.stats, r.stats.idle_while_queued), r.validated, r.profiled,
                 r.mean_wait_s(stage::validate), r.mean_wait_s(stage::profile));
      auto j = to_json(r);
      j["pool"] = pool.config();
      runs.push_back(std::move(j));
    }
    out["loads"].push_back({{"load", load}, {"candidates", candidates.size()}, {"runs", std::move(runs)}});
  }
  fmt::print("\nidle while queued: device time a GPU sat idle while a validation or profiling job waited "
             "(share of all device time);\nmean wait: from enqueue to start, over the jobs started in the window "
             "(under overload the jobs never started are not in it)\n");
  write_json(a, out);
  return 0;
}

}  // namespace

void add_pool_bench(programs::subcommands& benchmarks) {
  declare(benchmarks.add("pool",
                         "the evaluation pool's policies under an open load in virtual time: utilisation and "
                         "device time idle while jobs wait",
                         [](const std::string&, const programs::options& a) { return run(a); }));
}

}  // namespace specgen::bench
