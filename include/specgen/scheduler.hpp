#pragma once
/// The device scheduler: one per engine, shared by every concurrent search.
///
/// It owns the compile, validation and profiling queues, splits the evaluation
/// devices between validation and profiling with a pool policy (policy/pool.hpp)
/// and drives any evaluator through two callbacks, so it never depends on the
/// evaluator's type. The engine chains stages itself: it enqueues a compile job
/// and, in that job's callback, the validation job, and so on.
///
/// @code
///   specgen::event_loop<specgen::virtual_clock> loop;
///   specgen::sim::simulated_device dev(loop, *table, {.devices = 4});  // any evaluator
///   specgen::device_scheduler sched(loop, dev.devices(), dev.compile_slots(),
///                                   specgen::policy::elastic{}, specgen::callbacks_for(dev));
///   auto c = std::make_shared<const specgen::candidate>(cand);  // jobs share the candidate and task
///   auto t = std::make_shared<const specgen::task>(task);
///   sched.enqueue(specgen::stage::compile, c, t, /*group=*/round, [&](specgen::eval_outcome o) {
///     if (!o.cancelled && o.result.kind == specgen::verdict_kind::ok)
///       sched.enqueue(specgen::stage::validate, c, t, round, on_validated);
///   });
///   loop.run();  // returns once every job has finished
/// @endcode
///
/// Rules, in the paper's terms (the SpecGen paper's policy::elastic scheduler):
/// - one job per device; validation jobs go to devices whose role is
///   validation, profiling jobs to profiling devices;
/// - validation is served in the policy's order (LIFO in the paper), profiling
///   FIFO; compile jobs use the validation order, since compiling is the first
///   half of validating and a FIFO compile queue would undo the priority;
/// - each epoch (`rebalance_interval`) the split is recomputed from the peak
///   queue lengths of the epoch that just ended; a device that changes role
///   finishes its running job first;
/// - no queue starves: when the split leaves a role with no device at all (one
///   device in all, or a static split of 0 or 1), idle devices of the other
///   role serve it once their own queue is empty;
/// - under a work-conserving policy (`conserves_work()`, elastic's default) an
///   idle device whose own queue is empty takes the other role's jobs at any
///   time, keeping its role; no device then idles while a GPU job waits.
///
/// Everything runs on the loop thread. Callbacks may call `enqueue` and
/// `cancel_group` re-entrantly. The epoch timer is armed only while jobs are
/// queued or running, so `event_loop<virtual_clock>::run()` returns when the
/// engine has nothing left to do.
#include <specgen/clock.hpp>
#include <specgen/detail/config.hpp>
#include <specgen/evaluator.hpp>
#include <specgen/policy/pool.hpp>
#include <specgen/task.hpp>
#include <specgen/types.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

SPECGEN_BEGIN_NAMESPACE

/// How the scheduler reaches an evaluator: start a job, cancel a job.
struct scheduler_callbacks {
  std::function<void(eval_job, eval_callback)> submit;
  std::function<bool(job_id)> cancel;
};

/// Callbacks that forward to `e`, which must outlive the scheduler.
template <evaluator E>
scheduler_callbacks callbacks_for(E& e) {
  return {[&e](eval_job j, eval_callback cb) { e.submit(std::move(j), std::move(cb)); },
          [&e](job_id id) { return static_cast<bool>(e.cancel(id)); }};
}

/// Accounting over a window [since, until]. Busy time is measured by the
/// scheduler (executor time from submit to callback), not taken from the
/// evaluator's report, so it also covers jobs that were cancelled mid-run.
///
/// Idle-while-queued time is device time lost to the split: each device
/// without a job counts while any validation or profiling job waits, whatever
/// the device's role, since any device can run any such job. It is integrated
/// exactly, from the scheduler's state at each change. A work-conserving pool
/// keeps it at 0 on a virtual clock (on a real one, at most the time the
/// scheduler's callbacks take between a job's end and the next start).
struct scheduler_stats {
  timestamp since{0};
  timestamp until{0};
  std::vector<duration> device_busy{};    ///< per device
  duration compile_busy{0};               ///< summed over compile slots
  duration validation_busy{0};            ///< device time spent on validation jobs
  duration profiling_busy{0};             ///< device time spent on profiling jobs
  duration validation_role_time{0};       ///< device time spent in the validation role, busy or idle
  duration profiling_role_time{0};        ///< device time spent in the profiling role, busy or idle
  duration idle_while_queued{0};             ///< device time idle while a validation or profiling job waited
  duration idle_while_validation_queued{0};  ///< the same, counting only while a validation job waited
  duration idle_while_profiling_queued{0};   ///< the same, counting only while a profiling job waited
  std::size_t max_compile_queue = 0;      ///< longest queues (jobs waiting, not running)
  std::size_t max_validation_queue = 0;
  std::size_t max_profiling_queue = 0;
  std::uint64_t completed = 0;            ///< jobs whose callback reported a result
  std::uint64_t cancelled = 0;            ///< jobs whose callback reported `cancelled`
  int rebalances = 0;                     ///< epochs ended

  /// Pool utilisation: device busy time / (devices × window length), in [0, 1].
  [[nodiscard]] double utilisation() const noexcept {
    const auto window = until - since;
    if (device_busy.empty() || window <= duration{0}) return 0;
    duration busy{0};
    for (auto b : device_busy) busy += b;
    return static_cast<double>(busy.count()) /
           (static_cast<double>(window.count()) * static_cast<double>(device_busy.size()));
  }
  friend bool operator==(const scheduler_stats&, const scheduler_stats&) = default;
};

inline void to_json(nlohmann::json& j, const scheduler_stats& s) {
  std::vector<double> busy;
  for (auto b : s.device_busy) busy.push_back(to_seconds(b));
  j = {{"since_s", to_seconds(s.since)},
       {"until_s", to_seconds(s.until)},
       {"utilisation", s.utilisation()},
       {"device_busy_s", busy},
       {"compile_busy_s", to_seconds(s.compile_busy)},
       {"validation_busy_s", to_seconds(s.validation_busy)},
       {"profiling_busy_s", to_seconds(s.profiling_busy)},
       {"validation_role_s", to_seconds(s.validation_role_time)},
       {"profiling_role_s", to_seconds(s.profiling_role_time)},
       {"idle_while_queued_s", to_seconds(s.idle_while_queued)},
       {"idle_while_validation_queued_s", to_seconds(s.idle_while_validation_queued)},
       {"idle_while_profiling_queued_s", to_seconds(s.idle_while_profiling_queued)},
       {"max_compile_queue", s.max_compile_queue},
       {"max_validation_queue", s.max_validation_queue},
       {"max_profiling_queue", s.max_profiling_queue},
       {"completed", s.completed},
       {"cancelled", s.cancelled},
       {"rebalances", s.rebalances}};
}

/// Queues candidates per stage and runs them on compile slots and devices.
class device_scheduler {
 public:
  /// `devices` evaluation devices (0 is allowed: every validation or profiling
  /// job then comes back cancelled with a summary that says why), `compile_slots`
  /// concurrent compile jobs. Both callbacks are required.
  device_scheduler(executor& exec, int devices, int compile_slots, policy::any_pool policy, scheduler_callbacks cb)
      : exec_(exec),
        compile_slots_(compile_slots),
        policy_(std::move(policy)),
        work_conserving_(policy_.conserves_work()),
        cb_(std::move(cb)) {
    if (devices < 0 || compile_slots < 0)
      throw std::invalid_argument("device_scheduler: devices and compile_slots must be >= 0");
    if (!cb_.submit || !cb_.cancel)
      throw std::invalid_argument("device_scheduler: both callbacks (submit and cancel) are required");
    const timestamp t0 = exec_.now();
    since_ = epoch_start_ = idle_since_ = t0;
    devices_.resize(static_cast<std::size_t>(devices), device_state{.role_since = t0});
    // The first epoch starts now, with nothing observed yet.
    assign_roles(std::clamp(policy_.validation_devices(policy::queue_peaks{}, devices), 0, devices), t0);
  }

  device_scheduler(const device_scheduler&) = delete;  // timers and evaluator callbacks capture `this`
  device_scheduler& operator=(const device_scheduler&) = delete;

  /// Queued jobs are dropped without a callback; outcomes of running jobs that
  /// arrive later are ignored (cancel_group first to stop them in the evaluator).
  ~device_scheduler() {
    lifetime_.reset();
    if (epoch_timer_) exec_.cancel(*epoch_timer_);
    for (const auto& [id, timer] : refusals_) exec_.cancel(timer);
  }

  /// Queue a candidate for a stage. `group` tags the request (the engine uses
  /// (search, round)) so that stale work can be cancelled. `done` is called
  /// exactly once, on the loop thread, never from inside this call.
  job_id enqueue(stage s, std::shared_ptr<const candidate> c, std::shared_ptr<const task> t, std::uint64_t group,
                 eval_callback done) {
    if (!c) throw std::invalid_argument("device_scheduler::enqueue: a job needs a candidate");
    const job_id id = ++next_id_;
    if (capacity(s) == 0) {
      refuse(id, s, std::move(done));
      return id;
    }
    catch_up_epochs();
    account_idle();
    queues_[at(s)].push_back(queued_job{id, s, std::move(c), std::move(t), group, std::move(done)});
    dispatch();
    arm_epoch();
    return id;
  }

  /// Cancel every queued job of `group` (their callbacks get `cancelled`, before
  /// this returns); with `running_too`, also ask the evaluator to cancel the
  /// group's running jobs (their callbacks come from the evaluator). Returns the
  /// number of queued jobs dropped plus running jobs the evaluator agreed to cancel.
  std::size_t cancel_group(std::uint64_t group, bool running_too) {
    account_idle();
    std::vector<queued_job> dropped;
    for (auto& q : queues_) {
      const auto first_dropped =
          std::stable_partition(q.begin(), q.end(), [&](const queued_job& j) { return j.group != group; });
      std::move(first_dropped, q.end(), std::back_inserter(dropped));
      q.erase(first_dropped, q.end());
    }
    std::vector<job_id> running_ids;
    if (running_too)
      for (const auto& [id, r] : running_)
        if (r.group == group) running_ids.push_back(id);

    std::size_t count = dropped.size();
    for (job_id id : running_ids)
      if (running_.contains(id) && cb_.cancel(id)) ++count;  // an earlier cancel may have finished it already
    const std::string why = "cancelled before it started: group " + std::to_string(group) + " was cancelled";
    for (auto& j : dropped) {
      ++cancelled_;
      if (j.done) j.done(cancelled_outcome(j.id, j.kind, why));
    }
    return count;
  }

  /// Devices (or, for `stage::compile`, compile slots) that would start a job of
  /// this stage right now. For the idle-resources trigger.
  [[nodiscard]] int idle(stage role) const {
    if (role == stage::compile) return compile_slots_ - compiling_;
    int n = 0;
    for (std::size_t d = 0; d < devices_.size(); ++d)
      if (!devices_[d].job && serves(d, role)) ++n;
    return n;
  }
  [[nodiscard]] std::size_t queued(stage s) const { return queues_[at(s)].size(); }
  [[nodiscard]] std::size_t running(stage s) const {
    return static_cast<std::size_t>(
        std::count_if(running_.begin(), running_.end(), [&](const auto& r) { return r.second.kind == s; }));
  }

  /// Called whenever a device finishes a job and no queued job is left for it.
  void on_idle(std::function<void()> hook) { on_idle_ = std::move(hook); }

  [[nodiscard]] int devices() const noexcept { return static_cast<int>(devices_.size()); }
  [[nodiscard]] int compile_slots() const noexcept { return compile_slots_; }
  /// The current role of a device (stage::validate or stage::profile).
  [[nodiscard]] stage role(int device) const { return devices_.at(static_cast<std::size_t>(device)).role; }
  /// Devices whose current role is `r` (a device switching role counts in its old one until its job ends).
  [[nodiscard]] int devices_in(stage r) const {
    return static_cast<int>(
        std::count_if(devices_.begin(), devices_.end(), [&](const device_state& d) { return d.role == r; }));
  }
  [[nodiscard]] const policy::any_pool& policy() const noexcept { return policy_; }

  /// Accounting since construction or the last `reset_stats()`, up to now.
  [[nodiscard]] scheduler_stats stats() const {
    const timestamp now = exec_.now();
    scheduler_stats s;
    s.since = since_;
    s.until = now;
    std::array<duration, 3> busy = busy_;
    std::array<duration, 3> roles = role_time_;
    for (const auto& [id, r] : running_) busy[at(r.kind)] += clipped(r.started, now);
    for (const auto& d : devices_) {
      roles[at(d.role)] += clipped(d.role_since, now);
      s.device_busy.push_back(d.busy + (d.job ? clipped(running_.at(*d.job).started, now) : duration{0}));
    }
    s.compile_busy = busy[at(stage::compile)];
    s.validation_busy = busy[at(stage::validate)];
    s.profiling_busy = busy[at(stage::profile)];
    s.validation_role_time = roles[at(stage::validate)];
    s.profiling_role_time = roles[at(stage::profile)];
    const auto lost = pending_idle(now);
    s.idle_while_queued = idle_while_queued_[0] + lost[0];
    s.idle_while_validation_queued = idle_while_queued_[1] + lost[1];
    s.idle_while_profiling_queued = idle_while_queued_[2] + lost[2];
    s.max_compile_queue = max_queued_[at(stage::compile)];
    s.max_validation_queue = max_queued_[at(stage::validate)];
    s.max_profiling_queue = max_queued_[at(stage::profile)];
    s.completed = completed_;
    s.cancelled = cancelled_;
    s.rebalances = rebalances_;
    return s;
  }

  /// Start a new accounting window at now (e.g. when the engine starts its first search).
  void reset_stats() {
    since_ = exec_.now();
    busy_ = {};
    role_time_ = {};
    for (auto& d : devices_) d.busy = duration{0};
    for (std::size_t i = 0; i < queues_.size(); ++i) max_queued_[i] = queues_[i].size();
    idle_while_queued_ = {};
    idle_since_ = since_;
    completed_ = cancelled_ = 0;
    rebalances_ = 0;
  }

 private:
  struct queued_job {
    job_id id;
    stage kind;
    std::shared_ptr<const candidate> cand;
    std::shared_ptr<const task> for_task;
    std::uint64_t group;
    eval_callback done;
  };
  struct running_job {
    stage kind;
    int device;  ///< -1 for a compile slot
    std::uint64_t group;
    eval_callback done;
    timestamp started;
  };
  struct device_state {
    stage role = stage::validate;
    stage target = stage::validate;  ///< role after the running job ends
    std::optional<job_id> job{};
    timestamp role_since{0};
    duration busy{0};
  };

  static constexpr std::size_t at(stage s) noexcept { return static_cast<std::size_t>(s); }
  static constexpr stage other(stage role) noexcept {
    return role == stage::validate ? stage::profile : stage::validate;
  }

  [[nodiscard]] int capacity(stage s) const noexcept {
    return s == stage::compile ? compile_slots_ : devices();
  }

  /// Time in [from, to] that falls inside the accounting window.
  [[nodiscard]] duration clipped(timestamp from, timestamp to) const noexcept {
    const timestamp start = std::max(from, since_);
    return to > start ? to - start : duration{0};
  }

  [[nodiscard]] int target_count(stage role) const noexcept {
    return static_cast<int>(
        std::count_if(devices_.begin(), devices_.end(), [&](const device_state& d) { return d.target == role; }));
  }

  /// The single rule for which work a device may take: its own role's, a
  /// role that no device holds (so that queue cannot starve), or, under a
  /// work-conserving policy, any. Dispatch still offers a device its own role's
  /// queue first.
  [[nodiscard]] bool serves(std::size_t d, stage s) const noexcept {
    return devices_[d].role == s || work_conserving_ || target_count(s) == 0;
  }

  /// Idle with nothing queued that it may take.
  [[nodiscard]] bool runs_dry(std::size_t d) const noexcept {
    if (devices_[d].job) return false;
    for (stage s : {stage::validate, stage::profile})
      if (serves(d, s) && !queues_[at(s)].empty()) return false;
    return true;
  }

  [[nodiscard]] bool has_work() const noexcept {
    return !running_.empty() ||
           std::any_of(queues_.begin(), queues_.end(), [](const auto& q) { return !q.empty(); });
  }

  // ---- idle-while-queued accounting -------------------------------------------

  /// Device time in [idle_since_, now] (clipped to the window) during which a
  /// device was idle while a GPU job waited: in total, while a validation job
  /// waited, while a profiling job waited. Exact as long as the state has not
  /// changed since idle_since_, which account_idle() before every change ensures.
  [[nodiscard]] std::array<duration, 3> pending_idle(timestamp now) const noexcept {
    const bool validation_waits = !queues_[at(stage::validate)].empty();
    const bool profiling_waits = !queues_[at(stage::profile)].empty();
    if (!validation_waits && !profiling_waits) return {};
    const auto idle_devices = std::count_if(devices_.begin(), devices_.end(), [](const device_state& d) { return !d.job; });
    const duration lost = clipped(idle_since_, now) * static_cast<std::int64_t>(idle_devices);
    return {lost, validation_waits ? lost : duration{0}, profiling_waits ? lost : duration{0}};
  }

  /// Close the interval since the last change; called before every change to
  /// the queues or to which devices hold a job.
  void account_idle() {
    const timestamp now = exec_.now();
    const auto lost = pending_idle(now);
    for (std::size_t i = 0; i < lost.size(); ++i) idle_while_queued_[i] += lost[i];
    idle_since_ = std::max(idle_since_, now);
  }

  static eval_outcome cancelled_outcome(job_id id, stage s, std::string why) {
    eval_outcome o;
    o.id = id;
    o.kind = s;
    o.cancelled = true;
    o.result.summary = std::move(why);
    return o;
  }

  // ---- epochs -------------------------------------------------------------------

  void arm_epoch() {
    const duration interval = policy_.rebalance_interval();
    if (epoch_timer_ || interval <= duration{0} || !has_work()) return;
    epoch_timer_ = exec_.at(epoch_start_ + interval, [this, interval] {
      epoch_timer_.reset();
      epoch_start_ += interval;
      rebalance(exec_.now());
      arm_epoch();
    });
  }

  /// The timer sleeps while there is no work; on waking, replay the epochs it
  /// slept through. Their queues were empty, so they all split the same way,
  /// effective from the first missed boundary (every device was idle then).
  void catch_up_epochs() {
    const duration interval = policy_.rebalance_interval();
    if (epoch_timer_ || interval <= duration{0}) return;
    const timestamp now = exec_.now();
    if (now < epoch_start_ + interval) return;
    const timestamp first_missed = epoch_start_ + interval;
    epoch_start_ += ((now - epoch_start_) / interval) * interval;
    rebalance(first_missed);
  }

  void rebalance(timestamp when) {
    const policy::queue_peaks last = peaks_;
    peaks_ = {queued(stage::validate), queued(stage::profile)};
    assign_roles(std::clamp(policy_.validation_devices(last, devices()), 0, devices()), when);
    ++rebalances_;
    dispatch();
  }

  /// Move devices between roles until `validation` devices validate. Idle
  /// devices switch at once; a busy one switches when its job ends. Prefer
  /// idle devices, then busy ones already heading back to the wanted role.
  void assign_roles(int validation, timestamp when) {
    const int have = target_count(stage::validate);
    if (have == validation) return;
    const stage to = have < validation ? stage::validate : stage::profile;
    int moves = have < validation ? validation - have : have - validation;
    // Validation gathers at low device indices, profiling at high ones, so a
    // static split reads naturally (devices 0..v-1 validate).
    std::vector<std::size_t> order(devices_.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = to == stage::validate ? i : order.size() - 1 - i;
    auto rank = [&](std::size_t d) { return !devices_[d].job ? 0 : devices_[d].role == to ? 1 : 2; };
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return rank(a) < rank(b); });
    for (std::size_t d : order) {
      if (moves == 0) break;
      if (devices_[d].target == to) continue;
      devices_[d].target = to;
      if (!devices_[d].job) switch_role(d, when);
      --moves;
    }
  }

  void switch_role(std::size_t d, timestamp when) {
    auto& dev = devices_[d];
    if (dev.role == dev.target) return;
    account_idle();
    role_time_[at(dev.role)] += clipped(dev.role_since, when);
    dev.role = dev.target;
    dev.role_since = when;
  }

  // ---- dispatch -------------------------------------------------------------------

  /// Re-entrant: an evaluator may call back from inside submit, and a callback
  /// may enqueue; a nested call only asks the outer one to go round again.
  void dispatch() {
    if (dispatching_) {
      redispatch_ = true;
      return;
    }
    dispatching_ = true;
    struct reset_flag {
      bool& flag;
      ~reset_flag() { flag = false; }
    } guard{dispatching_};
    do {
      redispatch_ = false;
      dispatch_pass();
    } while (redispatch_);
    for (std::size_t i = 0; i < queues_.size(); ++i) max_queued_[i] = std::max(max_queued_[i], queues_[i].size());
    peaks_.validation = std::max(peaks_.validation, queued(stage::validate));
    peaks_.profiling = std::max(peaks_.profiling, queued(stage::profile));
  }

  /// Every idle device takes a job of its own role first; only then do idle
  /// devices take the other role's jobs (where `serves` allows), so a device
  /// never takes a job that a device of its role was free to run.
  void dispatch_pass() {
    while (compiling_ < compile_slots_ && !queues_[at(stage::compile)].empty()) start(pop(stage::compile), -1);
    for (bool own_role : {true, false})
      for (std::size_t d = 0; d < devices_.size(); ++d) {
        if (devices_[d].job) continue;
        const stage s = own_role ? devices_[d].role : other(devices_[d].role);
        if (queues_[at(s)].empty() || !serves(d, s)) continue;
        start(pop(s), static_cast<int>(d));
      }
  }

  queued_job pop(stage s) {
    auto& q = queues_[at(s)];
    const policy::queue_order order = s == stage::profile ? policy::queue_order::fifo : policy_.validation_order();
    queued_job j = std::move(order == policy::queue_order::lifo ? q.back() : q.front());
    if (order == policy::queue_order::lifo) q.pop_back();
    else q.pop_front();
    return j;
  }

  void start(queued_job j, int device) {
    account_idle();
    running_.emplace(j.id, running_job{j.kind, device, j.group, std::move(j.done), exec_.now()});
    if (device >= 0) devices_[static_cast<std::size_t>(device)].job = j.id;
    else ++compiling_;
    cb_.submit(eval_job{.id = j.id, .kind = j.kind, .device = device, .cand = std::move(j.cand),
                        .for_task = std::move(j.for_task)},
               [this, life = std::weak_ptr<int>(lifetime_), id = j.id](eval_outcome o) {
                 if (!life.expired()) finish(id, std::move(o));
               });
  }

  void finish(job_id id, eval_outcome o) {
    const auto it = running_.find(id);
    if (it == running_.end()) return;  // a second callback for the same job
    account_idle();
    running_job r = std::move(it->second);
    running_.erase(it);
    const timestamp now = exec_.now();
    const duration held = clipped(r.started, now);
    busy_[at(r.kind)] += held;
    ++(o.cancelled ? cancelled_ : completed_);
    if (r.device >= 0) {
      const auto d = static_cast<std::size_t>(r.device);
      devices_[d].busy += held;
      devices_[d].job.reset();
      switch_role(d, now);
    } else {
      --compiling_;
    }
    o.id = id;
    o.kind = r.kind;
    o.device = r.device;
    // The callback runs before the freed capacity is refilled, so work it
    // enqueues competes on equal terms (and wins under LIFO).
    if (r.done) r.done(std::move(o));
    dispatch();
    if (r.device >= 0 && on_idle_ && runs_dry(static_cast<std::size_t>(r.device))) on_idle_();
  }

  void refuse(job_id id, stage s, eval_callback done) {
    account_idle();  // changes no queue or device today; kept so that every state change closes the interval
    std::string why = s == stage::compile
                          ? "not evaluated: the scheduler has no compile slot (compile_slots = 0); give the "
                            "evaluator at least one compile slot"
                          : "not evaluated: the scheduler has no evaluation device (devices = 0); give the "
                            "evaluator at least one device to validate and profile candidates";
    refusals_[id] = exec_.at(exec_.now(), [this, id, s, done = std::move(done), why = std::move(why)] {
      refusals_.erase(id);
      ++cancelled_;
      if (done) done(cancelled_outcome(id, s, why));
    });
  }

  executor& exec_;
  int compile_slots_;
  policy::any_pool policy_;
  bool work_conserving_;  ///< the policy's conserves_work(), asked once
  scheduler_callbacks cb_;
  std::vector<device_state> devices_;
  std::array<std::deque<queued_job>, 3> queues_;  ///< indexed by stage
  std::map<job_id, running_job> running_;         ///< ordered, so cancellation order is deterministic
  int compiling_ = 0;
  job_id next_id_ = 0;
  std::function<void()> on_idle_;
  std::shared_ptr<int> lifetime_ = std::make_shared<int>(0);  ///< evaluator callbacks outliving us see it expired
  std::map<job_id, timer_id> refusals_;                        ///< no-capacity outcomes awaiting delivery
  bool dispatching_ = false;
  bool redispatch_ = false;

  timestamp epoch_start_{0};
  std::optional<timer_id> epoch_timer_;
  policy::queue_peaks peaks_;  ///< of the epoch in progress

  timestamp since_{0};
  std::array<duration, 3> busy_{};       ///< closed busy intervals, by job stage
  std::array<duration, 3> role_time_{};  ///< closed role intervals, by role
  std::array<std::size_t, 3> max_queued_{};
  timestamp idle_since_{0};                       ///< last change of the idle-while-queued integrand
  std::array<duration, 3> idle_while_queued_{};  ///< closed intervals: any GPU job, validation, profiling waiting
  std::uint64_t completed_ = 0;
  std::uint64_t cancelled_ = 0;
  int rebalances_ = 0;
};

SPECGEN_END_NAMESPACE
