#include <specgen/scheduler.hpp>

#include <catch2/catch.hpp>

#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <tuple>
#include <vector>

using namespace specgen;
using namespace specgen::policy;

namespace {

/// A tiny evaluator: every job holds its compile slot or device for a fixed
/// virtual time (by stage, or per candidate), then reports ok.
struct fake_evaluator {
  struct record {
    job_id id;
    stage kind;
    int device;
    candidate_id cand;
    timestamp at;
  };
  struct live_job {
    timer_id timer;
    eval_callback done;
    eval_job job;
    timestamp started;
  };

  executor& ex;
  int n_devices = 2;
  int n_slots = 1;
  std::map<stage, duration> by_stage{
      {stage::compile, seconds(1)}, {stage::validate, seconds(2)}, {stage::profile, seconds(3)}};
  std::map<candidate_id, duration> by_candidate{};  ///< overrides by_stage
  bool synchronous = false;                      ///< answer inside submit, as an evaluator may
  std::optional<duration> reported_busy{};       ///< report this instead of the time held

  std::vector<record> started{};
  std::map<job_id, live_job> live{};
  std::set<int> busy_devices{};
  int compiling = 0;
  bool overbooked = false;  ///< a device got a second job, or the slots were exceeded

  [[nodiscard]] int devices() const { return n_devices; }
  [[nodiscard]] int compile_slots() const { return n_slots; }

  void submit(eval_job j, eval_callback cb) {
    started.push_back({j.id, j.kind, j.device, j.cand->id, ex.now()});
    if (j.device >= 0 ? !busy_devices.insert(j.device).second : ++compiling > n_slots) overbooked = true;
    const auto found = by_candidate.find(j.cand->id);
    const duration took = found != by_candidate.end() ? found->second : by_stage.at(j.kind);
    if (synchronous) {
      release(j);
      cb(outcome(j, false, took));
      return;
    }
    const job_id id = j.id;
    const timer_id t = ex.after(took, [this, id] {
      auto node = live.extract(id);
      release(node.mapped().job);
      node.mapped().done(outcome(node.mapped().job, false, ex.now() - node.mapped().started));
    });
    live.emplace(id, live_job{t, std::move(cb), std::move(j), ex.now()});
  }

  bool cancel(job_id id) {
    auto node = live.extract(id);
    if (node.empty()) return false;
    ex.cancel(node.mapped().timer);
    ex.at(ex.now(), [this, l = std::move(node.mapped())] {
      release(l.job);
      l.done(outcome(l.job, true, ex.now() - l.started));
    });
    return true;
  }

  [[nodiscard]] std::vector<candidate_id> order_of(stage s) const {
    std::vector<candidate_id> out;
    for (const auto& r : started)
      if (r.kind == s) out.push_back(r.cand);
    return out;
  }

 private:
  void release(const eval_job& j) {
    if (j.device >= 0) busy_devices.erase(j.device);
    else --compiling;
  }
  [[nodiscard]] eval_outcome outcome(const eval_job& j, bool cancelled, duration held) const {
    eval_outcome o;
    o.id = j.id;
    o.kind = j.kind;
    o.device = j.device;
    o.cancelled = cancelled;
    o.busy = reported_busy.value_or(held);
    return o;
  }
};
static_assert(evaluator<fake_evaluator>);

std::shared_ptr<const candidate> cand(candidate_id id) {
  auto c = std::make_shared<candidate>();
  c->id = id;
  return c;
}
const std::shared_ptr<const task> the_task = std::make_shared<task>();

struct outcomes {
  std::vector<eval_outcome> got;
  eval_callback record() {
    return [this](eval_outcome o) { got.push_back(std::move(o)); };
  }
};

}  // namespace

TEST_CASE("validation serves the latest arrival first under LIFO, the oldest first under FIFO") {
  for (auto order : {queue_order::lifo, queue_order::fifo}) {
    event_loop<virtual_clock> loop;
    fake_evaluator ev{.ex = loop, .n_devices = 1};
    device_scheduler sched(loop, 1, 1, elastic{.validation = order}, callbacks_for(ev));
    for (candidate_id c = 1; c <= 4; ++c) sched.enqueue(stage::validate, cand(c), the_task, 0, nullptr);
    loop.run();
    // job 1 found the device idle; the other three waited
    const auto expected = order == queue_order::lifo ? std::vector<candidate_id>{1, 4, 3, 2}
                                                     : std::vector<candidate_id>{1, 2, 3, 4};
    CHECK(ev.order_of(stage::validate) == expected);
  }
}

TEST_CASE("profiling is FIFO even when validation is LIFO, and compiling follows the validation order") {
  event_loop<virtual_clock> loop;
  fake_evaluator ev{.ex = loop};
  device_scheduler sched(loop, 2, 1, elastic{.validation = queue_order::lifo}, callbacks_for(ev));
  for (candidate_id c = 1; c <= 4; ++c) {
    sched.enqueue(stage::profile, cand(c), the_task, 0, nullptr);
    sched.enqueue(stage::compile, cand(10 + c), the_task, 0, nullptr);
  }
  loop.run();
  CHECK(ev.order_of(stage::profile) == std::vector<candidate_id>{1, 2, 3, 4});
  CHECK(ev.order_of(stage::compile) == std::vector<candidate_id>{11, 14, 13, 12});
}

TEST_CASE("each device runs one job at a time, and only jobs of its role") {
  event_loop<virtual_clock> loop;
  fake_evaluator ev{.ex = loop, .n_devices = 4, .n_slots = 2};
  device_scheduler sched(loop, 4, 2, static_split{}, callbacks_for(ev));
  outcomes out;
  for (candidate_id c = 1; c <= 6; ++c) {
    sched.enqueue(stage::validate, cand(c), the_task, 0, out.record());
    sched.enqueue(stage::profile, cand(100 + c), the_task, 0, out.record());
    sched.enqueue(stage::compile, cand(200 + c), the_task, 0, out.record());
  }
  CHECK(sched.running(stage::validate) == 2);
  CHECK(sched.running(stage::profile) == 2);
  CHECK(sched.running(stage::compile) == 2);
  loop.run();
  CHECK_FALSE(ev.overbooked);
  CHECK(out.got.size() == 18);
  for (const auto& r : ev.started) {
    if (r.kind == stage::validate) CHECK(r.device < 2);  // static split: devices 0, 1 validate
    if (r.kind == stage::profile) CHECK(r.device >= 2);
    if (r.kind == stage::compile) CHECK(r.device == -1);
  }
  std::vector<timestamp> validation_starts;
  for (const auto& r : ev.started)
    if (r.kind == stage::validate) validation_starts.push_back(r.at);
  CHECK(validation_starts ==
        std::vector<timestamp>{seconds(0), seconds(0), seconds(2), seconds(2), seconds(4), seconds(4)});
}

TEST_CASE("the outcome reaches the callback with the scheduler's job id, device and the evaluator's busy") {
  event_loop<virtual_clock> loop;
  fake_evaluator ev{.ex = loop, .reported_busy = seconds(0.042)};
  device_scheduler sched(loop, 2, 1, static_split{}, callbacks_for(ev));
  outcomes out;
  const job_id id = sched.enqueue(stage::profile, cand(1), the_task, 0, out.record());
  loop.run();
  REQUIRE(out.got.size() == 1);
  CHECK(out.got[0].id == id);
  CHECK(out.got[0].kind == stage::profile);
  CHECK(out.got[0].device == 1);
  CHECK(out.got[0].busy == seconds(0.042));             // as reported
  CHECK(sched.stats().profiling_busy == seconds(3));  // as measured
}

TEST_CASE("the split follows the previous epoch's peak queue lengths") {
  event_loop<virtual_clock> loop;
  fake_evaluator ev{.ex = loop, .n_devices = 4};
  ev.by_stage[stage::validate] = seconds(3);
  // strict roles, so that the queues build up as the split dictates
  device_scheduler sched(loop, 4, 1, elastic{.interval = seconds(10), .work_conserving = false}, callbacks_for(ev));
  CHECK(sched.devices_in(stage::validate) == 2);  // first epoch: nothing seen yet, even split
  // 8 validation jobs on 2 devices (peak queue 6), 4 profiling jobs on 2 (peak 2): 4 * 6/8 = 3
  for (candidate_id c = 1; c <= 8; ++c) sched.enqueue(stage::validate, cand(c), the_task, 0, nullptr);
  for (candidate_id c = 11; c <= 14; ++c) sched.enqueue(stage::profile, cand(c), the_task, 0, nullptr);
  int validating_after_epoch = -1;
  loop.at(seconds(10.5), [&] { validating_after_epoch = sched.devices_in(stage::validate); });
  loop.run();
  CHECK(validating_after_epoch == 3);
  CHECK(sched.stats().max_validation_queue == 6);
  CHECK(sched.stats().max_profiling_queue == 2);
}

TEST_CASE("an epoch with both queues empty is followed by an even split") {
  event_loop<virtual_clock> loop;
  fake_evaluator ev{.ex = loop, .n_devices = 4};
  ev.by_stage[stage::validate] = seconds(1);
  ev.by_candidate[99] = seconds(25);  // keeps work running through the epochs
  device_scheduler sched(loop, 4, 1, elastic{.interval = seconds(10)}, callbacks_for(ev));
  for (candidate_id c = 1; c <= 10; ++c) sched.enqueue(stage::validate, cand(c), the_task, 0, nullptr);
  sched.enqueue(stage::profile, cand(99), the_task, 0, nullptr);
  std::vector<int> validating;
  for (double t : {15.0, 24.0}) loop.at(seconds(t), [&] { validating.push_back(sched.devices_in(stage::validate)); });
  loop.run();
  // epoch 1 saw only validation waiting (min_profiling keeps one profiler); epoch 2 saw nothing
  CHECK(validating == std::vector<int>{3, 2});
}

TEST_CASE("some validation capacity is kept when only profiling was queued") {
  for (int min_validation : {1, 2}) {
    event_loop<virtual_clock> loop;
    fake_evaluator ev{.ex = loop, .n_devices = 4};
    device_scheduler sched(loop, 4, 1, elastic{.min_validation = min_validation, .interval = seconds(10)},
                           callbacks_for(ev));
    for (candidate_id c = 1; c <= 12; ++c) sched.enqueue(stage::profile, cand(c), the_task, 0, nullptr);
    int validating = -1;
    loop.at(seconds(10.5), [&] { validating = sched.devices_in(stage::validate); });
    loop.run();
    CHECK(validating == min_validation);
  }
}

TEST_CASE("a device that changes role finishes its running job first") {
  event_loop<virtual_clock> loop;
  fake_evaluator ev{.ex = loop, .n_devices = 4};
  ev.by_stage[stage::validate] = seconds(4);
  ev.by_stage[stage::profile] = seconds(15);
  device_scheduler sched(loop, 4, 1, elastic{.interval = seconds(10)}, callbacks_for(ev));
  outcomes profiled;
  sched.enqueue(stage::profile, cand(101), the_task, 0, profiled.record());  // device 2 until t = 15
  sched.enqueue(stage::profile, cand(102), the_task, 0, profiled.record());  // device 3 until t = 15
  for (candidate_id c = 1; c <= 10; ++c) sched.enqueue(stage::validate, cand(c), the_task, 0, nullptr);
  // at t = 10 the split becomes 3 validating, but both profilers are busy
  stage role_during = stage::compile;
  int validating_during = -1;
  loop.at(seconds(12), [&] {
    role_during = sched.role(2);
    validating_during = sched.devices_in(stage::validate);
  });
  loop.run();
  CHECK(role_during == stage::profile);
  CHECK(validating_during == 2);
  REQUIRE(profiled.got.size() == 2);
  for (const auto& o : profiled.got) CHECK_FALSE(o.cancelled);
  std::vector<std::pair<stage, timestamp>> on_device_2;
  for (const auto& r : ev.started)
    if (r.device == 2) on_device_2.emplace_back(r.kind, r.at);
  CHECK(on_device_2 == std::vector<std::pair<stage, timestamp>>{{stage::profile, seconds(0)},
                                                                {stage::validate, seconds(15)}});
}

TEST_CASE("cancel_group drops the group's queued jobs and leaves running ones alone") {
  event_loop<virtual_clock> loop;
  fake_evaluator ev{.ex = loop, .n_devices = 1};
  device_scheduler sched(loop, 1, 1, elastic{.validation = queue_order::fifo}, callbacks_for(ev));
  outcomes g1, g2;
  sched.enqueue(stage::validate, cand(1), the_task, 1, g1.record());  // running
  sched.enqueue(stage::validate, cand(2), the_task, 1, g1.record());
  sched.enqueue(stage::validate, cand(3), the_task, 2, g2.record());
  sched.enqueue(stage::profile, cand(4), the_task, 1, g1.record());
  CHECK(sched.cancel_group(1, false) == 2);
  REQUIRE(g1.got.size() == 2);  // delivered before cancel_group returns
  for (const auto& o : g1.got) {
    CHECK(o.cancelled);
    CHECK_THAT(o.result.summary, Catch::Contains("group 1"));
  }
  CHECK(sched.queued(stage::validate) == 1);
  CHECK(sched.queued(stage::profile) == 0);
  loop.run();
  CHECK(ev.order_of(stage::validate) == std::vector<candidate_id>{1, 3});
  REQUIRE(g1.got.size() == 3);
  CHECK_FALSE(g1.got[2].cancelled);
  CHECK(g2.got.size() == 1);
}

TEST_CASE("cancel_group with running_too cancels running jobs through the evaluator and frees their devices") {
  event_loop<virtual_clock> loop;
  fake_evaluator ev{.ex = loop, .n_devices = 1};
  device_scheduler sched(loop, 1, 1, elastic{}, callbacks_for(ev));
  outcomes g1, g2;
  sched.enqueue(stage::validate, cand(1), the_task, 1, g1.record());  // runs 0..2 unless cancelled
  sched.enqueue(stage::validate, cand(2), the_task, 1, g1.record());
  sched.enqueue(stage::validate, cand(3), the_task, 2, g2.record());
  std::size_t cancelled = 0;
  loop.at(seconds(0.5), [&] { cancelled = sched.cancel_group(1, true); });
  loop.run();
  CHECK(cancelled == 2);
  REQUIRE(g1.got.size() == 2);
  CHECK(g1.got[0].cancelled);
  CHECK(g1.got[1].cancelled);
  REQUIRE(ev.started.size() == 2);
  CHECK(ev.started[1].cand == 3);
  CHECK(ev.started[1].at == seconds(0.5));
  CHECK(sched.stats().device_busy == std::vector<duration>{seconds(2.5)});
  CHECK(sched.stats().cancelled == 2);
}

TEST_CASE("utilisation is exact for a known schedule") {
  event_loop<virtual_clock> loop;
  fake_evaluator ev{.ex = loop};
  device_scheduler sched(loop, 2, 1, static_split{}, callbacks_for(ev));
  sched.enqueue(stage::validate, cand(1), the_task, 0, nullptr);  // device 0: 0..2
  sched.enqueue(stage::validate, cand(2), the_task, 0, nullptr);  // device 0: 2..4
  sched.enqueue(stage::profile, cand(3), the_task, 0, nullptr);   // device 1: 0..3
  sched.enqueue(stage::compile, cand(4), the_task, 0, nullptr);   // slot: 0..1
  loop.run();
  const auto s = sched.stats();
  CHECK(s.until == seconds(4));
  CHECK(s.device_busy == std::vector<duration>{seconds(4), seconds(3)});
  CHECK(s.utilisation() == Approx(7.0 / 8.0));
  CHECK(s.validation_busy == seconds(4));
  CHECK(s.profiling_busy == seconds(3));
  CHECK(s.compile_busy == seconds(1));
  CHECK(s.validation_role_time == seconds(4));
  CHECK(s.profiling_role_time == seconds(4));
  CHECK(s.completed == 4);
  CHECK(nlohmann::json(s).at("utilisation").get<double>() == Approx(0.875));

  sched.reset_stats();  // a new window starts at t = 4
  sched.enqueue(stage::profile, cand(5), the_task, 0, nullptr);
  loop.run();
  CHECK(sched.stats().utilisation() == Approx(0.5));  // one of two devices busy for the whole window
}

TEST_CASE("utilisation never exceeds 1 under random load, and running jobs count up to now") {
  event_loop<virtual_clock> loop;
  fake_evaluator ev{.ex = loop, .n_devices = 3, .n_slots = 2};
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> length(0.1, 4.0), arrival(0.0, 60.0);
  for (candidate_id c = 1; c <= 120; ++c) ev.by_candidate[c] = seconds(length(rng));
  device_scheduler sched(loop, 3, 2, elastic{.interval = seconds(3)}, callbacks_for(ev));
  for (candidate_id c = 1; c <= 120; ++c) {
    const auto s = static_cast<stage>(c % 3);
    loop.at(seconds(arrival(rng)), [&sched, c, s] { sched.enqueue(s, cand(c), the_task, c % 5, nullptr); });
  }
  double highest = 0;
  for (int i = 1; i <= 200; ++i)
    loop.at(seconds(0.37 * i), [&] {
      const auto st = sched.stats();
      highest = std::max(highest, st.utilisation());
      CHECK(st.validation_role_time + st.profiling_role_time == 3 * (st.until - st.since));
    });
  loop.run();
  CHECK_FALSE(ev.overbooked);
  CHECK(highest > 0.5);
  CHECK(highest <= 1.0);
  CHECK(sched.stats().completed == 120);
}

TEST_CASE("a callback may enqueue the next stage and cancel groups re-entrantly") {
  for (bool synchronous : {false, true}) {
    event_loop<virtual_clock> loop;
    fake_evaluator ev{.ex = loop, .n_devices = 2, .synchronous = synchronous};
    device_scheduler sched(loop, 2, 1, elastic{}, callbacks_for(ev));
    std::vector<std::pair<candidate_id, stage>> finished;
    std::function<void(candidate_id, stage)> run_stage = [&](candidate_id c, stage s) {
      sched.enqueue(s, cand(c), the_task, c, [&, c, s](eval_outcome o) {
        finished.emplace_back(c, s);
        if (o.cancelled) return;
        if (s == stage::compile) run_stage(c, stage::validate);
        if (s == stage::validate) run_stage(c, stage::profile);
        if (s == stage::validate && c == 1) sched.cancel_group(3, true);  // stale work of another group
      });
    };
    for (candidate_id c = 1; c <= 3; ++c) run_stage(c, stage::compile);
    loop.run();
    CHECK_FALSE(ev.overbooked);
    CHECK(std::count(finished.begin(), finished.end(), std::pair<candidate_id, stage>{1, stage::profile}) == 1);
    CHECK(std::count(finished.begin(), finished.end(), std::pair<candidate_id, stage>{2, stage::profile}) == 1);
    CHECK(std::count_if(finished.begin(), finished.end(), [](const auto& f) { return f.first == 3; }) >= 1);
    CHECK(sched.queued(stage::validate) + sched.queued(stage::profile) + sched.queued(stage::compile) == 0);
  }
}

TEST_CASE("run() returns once the scheduler has no work, and epochs resume when work returns") {
  event_loop<virtual_clock> loop;
  fake_evaluator ev{.ex = loop};
  device_scheduler sched(loop, 2, 1, elastic{.interval = seconds(5)}, callbacks_for(ev));
  loop.run();
  CHECK(loop.now() == seconds(0));  // no work: no epoch timer

  sched.enqueue(stage::validate, cand(1), the_task, 0, nullptr);
  sched.enqueue(stage::validate, cand(2), the_task, 0, nullptr);
  loop.run();
  CHECK(loop.pending_timers() == 0);
  CHECK(loop.now() == seconds(5));  // the work ended at 4; one last epoch found nothing and stopped
  CHECK(sched.stats().rebalances == 1);

  loop.at(seconds(23), [&] { sched.enqueue(stage::profile, cand(3), the_task, 0, nullptr); });
  loop.run();
  CHECK(loop.pending_timers() == 0);
  // the epochs ending at 10, 15 and 20 saw no work: replayed as one rebalance at 23; then 25 and 30 ran
  CHECK(loop.now() == seconds(30));
  CHECK(sched.stats().rebalances == 4);
}

TEST_CASE("with a single device, it validates and also serves profiling") {
  event_loop<virtual_clock> loop;
  fake_evaluator ev{.ex = loop, .n_devices = 1};
  device_scheduler sched(loop, 1, 1, elastic{}, callbacks_for(ev));
  CHECK(sched.role(0) == stage::validate);
  CHECK(sched.idle(stage::validate) == 1);
  CHECK(sched.idle(stage::profile) == 1);
  sched.enqueue(stage::profile, cand(1), the_task, 0, nullptr);
  sched.enqueue(stage::validate, cand(2), the_task, 0, nullptr);
  sched.enqueue(stage::profile, cand(3), the_task, 0, nullptr);
  loop.run();
  // its own role's queue first once it is free
  CHECK(ev.order_of(stage::validate) == std::vector<candidate_id>{2});
  REQUIRE(ev.started.size() == 3);
  CHECK(ev.started[0].cand == 1);
  CHECK(ev.started[1].cand == 2);
  CHECK(ev.started[2].cand == 3);
}

TEST_CASE("idle counts free devices by role, and the hook fires when a device runs dry") {
  event_loop<virtual_clock> loop;
  fake_evaluator ev{.ex = loop, .n_devices = 4, .n_slots = 2};
  device_scheduler sched(loop, 4, 2, elastic{.work_conserving = false}, callbacks_for(ev));
  std::vector<timestamp> idle_at;
  sched.on_idle([&] { idle_at.push_back(loop.now()); });
  CHECK(sched.idle(stage::validate) == 2);
  CHECK(sched.idle(stage::profile) == 2);
  sched.enqueue(stage::validate, cand(1), the_task, 0, nullptr);
  sched.enqueue(stage::validate, cand(2), the_task, 0, nullptr);
  sched.enqueue(stage::validate, cand(3), the_task, 0, nullptr);
  sched.enqueue(stage::compile, cand(4), the_task, 0, nullptr);
  CHECK(sched.idle(stage::validate) == 0);
  CHECK(sched.idle(stage::profile) == 2);
  CHECK(sched.idle(stage::compile) == 1);
  CHECK(sched.queued(stage::validate) == 1);
  loop.run();
  CHECK(idle_at == std::vector<timestamp>{seconds(2), seconds(4)});  // at 2 one device took job 3; the other ran dry
}

TEST_CASE("without devices, validation and profiling jobs come back cancelled with the reason") {
  event_loop<virtual_clock> loop;
  fake_evaluator ev{.ex = loop, .n_devices = 0};
  device_scheduler sched(loop, 0, 1, elastic{}, callbacks_for(ev));
  outcomes out;
  sched.enqueue(stage::validate, cand(1), the_task, 0, out.record());
  sched.enqueue(stage::compile, cand(2), the_task, 0, out.record());
  CHECK(out.got.empty());  // never called from inside enqueue
  loop.run();
  REQUIRE(out.got.size() == 2);
  CHECK(out.got[0].cancelled);
  CHECK_THAT(out.got[0].result.summary, Catch::Contains("no evaluation device"));
  CHECK_FALSE(out.got[1].cancelled);  // compiling needs no device
  CHECK(sched.stats().utilisation() == 0);
}

TEST_CASE("outcomes arriving after the scheduler is destroyed are ignored") {
  event_loop<virtual_clock> loop;
  fake_evaluator ev{.ex = loop};
  int calls = 0;
  {
    device_scheduler sched(loop, 2, 1, elastic{}, callbacks_for(ev));
    sched.enqueue(stage::validate, cand(1), the_task, 0, [&](eval_outcome) { ++calls; });
  }
  loop.run();
  CHECK(calls == 0);
  CHECK(ev.live.empty());
}

TEST_CASE("constructing with negative sizes or missing callbacks is a programming error") {
  event_loop<virtual_clock> loop;
  fake_evaluator ev{.ex = loop};
  CHECK_THROWS_AS(device_scheduler(loop, -1, 1, elastic{}, callbacks_for(ev)), std::invalid_argument);
  CHECK_THROWS_AS(device_scheduler(loop, 1, 1, elastic{}, scheduler_callbacks{}), std::invalid_argument);
}

TEST_CASE("the same scheduler runs on a real-time loop and lets it finish") {
  event_loop<steady_clock> loop;
  fake_evaluator ev{.ex = loop};
  for (auto& [s, d] : ev.by_stage) d = std::chrono::milliseconds(1);
  device_scheduler sched(loop, 2, 1, elastic{.interval = std::chrono::milliseconds(100)}, callbacks_for(ev));
  outcomes out;
  for (candidate_id c = 1; c <= 6; ++c) sched.enqueue(static_cast<stage>(c % 3), cand(c), the_task, 0, out.record());
  loop.run();
  CHECK(out.got.size() == 6);
  CHECK(loop.pending_timers() == 0);
  const auto st = sched.stats();
  CHECK(st.utilisation() > 0);
  CHECK(st.utilisation() <= 1);
}

TEST_CASE("under a work-conserving pool idle counts every free device, for either stage") {
  event_loop<virtual_clock> loop;
  fake_evaluator ev{.ex = loop, .n_devices = 4, .n_slots = 2};
  device_scheduler sched(loop, 4, 2, elastic{}, callbacks_for(ev));
  std::vector<timestamp> idle_at;
  sched.on_idle([&] { idle_at.push_back(loop.now()); });
  CHECK(sched.idle(stage::validate) == 4);
  CHECK(sched.idle(stage::profile) == 4);
  for (candidate_id c = 1; c <= 3; ++c) sched.enqueue(stage::validate, cand(c), the_task, 0, nullptr);
  CHECK(sched.idle(stage::validate) == 1);  // the third job went to a profiling device
  CHECK(sched.idle(stage::profile) == 1);
  CHECK(sched.queued(stage::validate) == 0);
  CHECK(sched.devices_in(stage::validate) == 2);  // borrowing changes no role
  loop.run();
  CHECK(idle_at == std::vector<timestamp>{seconds(2), seconds(2), seconds(2)});
}

TEST_CASE("a work-conserving device takes its own role's jobs first, then the other queue's, in that queue's order") {
  event_loop<virtual_clock> loop;
  fake_evaluator ev{.ex = loop};
  // device 0 validates, device 1 profiles
  device_scheduler sched(loop, 2, 1, static_split{.validation = queue_order::lifo, .work_conserving = true},
                         callbacks_for(ev));
  for (candidate_id c = 1; c <= 4; ++c) sched.enqueue(stage::validate, cand(c), the_task, 0, nullptr);
  sched.enqueue(stage::profile, cand(10), the_task, 0, nullptr);
  loop.run();
  // t = 0: device 0 takes job 1, device 1 borrows job 2. t = 2: device 0 takes the latest
  // validation job (LIFO), device 1 its own role's profile job, not validation job 3.
  // t = 4: device 0 takes job 3.
  std::vector<std::tuple<candidate_id, int, timestamp>> got;
  for (const auto& r : ev.started) got.emplace_back(r.cand, r.device, r.at);
  CHECK(got == std::vector<std::tuple<candidate_id, int, timestamp>>{
                   {1, 0, seconds(0)}, {2, 1, seconds(0)}, {4, 0, seconds(2)}, {10, 1, seconds(2)}, {3, 0, seconds(4)}});
  CHECK(sched.role(0) == stage::validate);
  CHECK(sched.role(1) == stage::profile);
  CHECK(sched.stats().idle_while_queued == duration{0});
  CHECK(sched.stats().validation_role_time == seconds(6));  // roles are kept while borrowing
}

TEST_CASE("idle-while-queued time is exact for a known schedule under a static split") {
  event_loop<virtual_clock> loop;
  fake_evaluator ev{.ex = loop};  // validate 2 s, profile 3 s
  device_scheduler sched(loop, 2, 1, static_split{}, callbacks_for(ev));  // device 0 validates, device 1 profiles
  for (candidate_id c = 1; c <= 3; ++c) sched.enqueue(stage::validate, cand(c), the_task, 0, nullptr);
  // device 0: 1 [0, 2], 2 [2, 4], 3 [4, 6]; the validation queue waits during [0, 4)
  loop.at(seconds(1), [&] { sched.enqueue(stage::profile, cand(11), the_task, 0, nullptr); });  // device 1: [1, 4]
  loop.at(seconds(5), [&] {
    sched.enqueue(stage::profile, cand(12), the_task, 0, nullptr);  // device 1: [5, 8]
    sched.enqueue(stage::profile, cand(13), the_task, 0, nullptr);  // waits [5, 8), then device 1: [8, 11]
  });
  // Lost: device 1 idle in [0, 1) beside queued validation (1 s); device 0 idle in
  // [6, 8) beside a queued profile (2 s).
  std::optional<scheduler_stats> at_7;
  loop.at(seconds(7), [&] {
    at_7 = sched.stats();  // up to now: 1 s closed, [6, 7) still open
    sched.reset_stats();
  });
  loop.run();
  REQUIRE(at_7);
  CHECK(at_7->idle_while_queued == seconds(2));
  CHECK(at_7->idle_while_validation_queued == seconds(1));
  CHECK(at_7->idle_while_profiling_queued == seconds(1));
  const auto s = sched.stats();  // the window [7, 11]: device 0 idle in [7, 8) beside a queued profile
  CHECK(s.since == seconds(7));
  CHECK(s.until == seconds(11));
  CHECK(s.idle_while_queued == seconds(1));
  CHECK(s.idle_while_validation_queued == duration{0});
  CHECK(s.idle_while_profiling_queued == seconds(1));
  CHECK(nlohmann::json(s).at("idle_while_queued_s").get<double>() == Approx(1.0));
  CHECK(nlohmann::json(*at_7).at("idle_while_validation_queued_s").get<double>() == Approx(1.0));

  // The whole run again in one window: 1 s + 2 s.
  event_loop<virtual_clock> loop2;
  fake_evaluator ev2{.ex = loop2};
  device_scheduler whole(loop2, 2, 1, static_split{}, callbacks_for(ev2));
  for (candidate_id c = 1; c <= 3; ++c) whole.enqueue(stage::validate, cand(c), the_task, 0, nullptr);
  loop2.at(seconds(1), [&] { whole.enqueue(stage::profile, cand(11), the_task, 0, nullptr); });
  loop2.at(seconds(5), [&] {
    whole.enqueue(stage::profile, cand(12), the_task, 0, nullptr);
    whole.enqueue(stage::profile, cand(13), the_task, 0, nullptr);
  });
  loop2.run();
  CHECK(whole.stats().idle_while_queued == seconds(3));
  CHECK(whole.stats().idle_while_validation_queued == seconds(1));
  CHECK(whole.stats().idle_while_profiling_queued == seconds(2));
  CHECK(whole.stats().until == seconds(11));
}

TEST_CASE("cancelling queued jobs ends the idle-while-queued time they caused") {
  event_loop<virtual_clock> loop;
  fake_evaluator ev{.ex = loop};
  device_scheduler sched(loop, 2, 1, static_split{}, callbacks_for(ev));
  sched.enqueue(stage::validate, cand(1), the_task, 1, nullptr);  // device 0: [0, 2]
  sched.enqueue(stage::validate, cand(2), the_task, 2, nullptr);  // waits; device 1 may not take it
  loop.at(seconds(0.5), [&] { sched.cancel_group(2, false); });
  loop.run();
  CHECK(sched.stats().idle_while_queued == seconds(0.5));
}

TEST_CASE("a work-conserving pool never idles a device while a GPU job waits; a static split does") {
  // Random arrivals of chained compile -> validate -> profile work, random job
  // lengths, random cancellations: the same load under each policy.
  auto run = [](any_pool policy) {
    event_loop<virtual_clock> loop;
    fake_evaluator ev{.ex = loop, .n_devices = 4, .n_slots = 2};
    std::mt19937_64 rng(11);
    std::uniform_real_distribution<double> length(0.05, 5.0), arrival(0.0, 120.0);
    for (candidate_id c = 1; c <= 900; ++c) ev.by_candidate[c] = seconds(length(rng));
    device_scheduler sched(loop, 4, 2, std::move(policy), callbacks_for(ev));
    std::function<void(candidate_id, stage)> chain = [&](candidate_id c, stage s) {
      // a candidate's stages are ids c, c + 300, c + 600, so each stage has its own length
      const candidate_id id = c + 300 * static_cast<candidate_id>(s);
      sched.enqueue(s, cand(id), the_task, c % 7, [&, c, s](eval_outcome o) {
        if (o.cancelled || s == stage::profile) return;
        if (s == stage::compile) chain(c, stage::validate);
        else if (c % 2 == 0) chain(c, stage::profile);  // half the validated candidates are profiled
      });
    };
    for (candidate_id c = 1; c <= 300; ++c) {
      const bool direct = c % 3 == 0;  // some go straight to validation, as resumed work does
      loop.at(seconds(arrival(rng)), [&chain, c, direct] { chain(c, direct ? stage::validate : stage::compile); });
    }
    for (int g = 1; g <= 3; ++g)
      loop.at(seconds(30.0 * g), [&sched, g] { sched.cancel_group(static_cast<std::uint64_t>(g), g == 2); });
    // An independent estimate: sample the state every 5 ms and add up.
    double sampled_s = 0;
    constexpr double step = 0.005;
    for (int i = 0; i < 100'000; ++i)
      loop.at(seconds(step * (i + 0.5)), [&] {
        const bool waits = sched.queued(stage::validate) + sched.queued(stage::profile) > 0;
        if (waits) sampled_s += step * static_cast<double>(4 - ev.busy_devices.size());
      });
    duration worst_sample{0};
    for (int i = 1; i <= 300; ++i)
      loop.at(seconds(0.41 * i), [&] {
        const auto st = sched.stats();
        CHECK(st.idle_while_queued <= 4 * (st.until - st.since));
        CHECK(st.idle_while_validation_queued <= st.idle_while_queued);
        CHECK(st.idle_while_profiling_queued <= st.idle_while_queued);
        worst_sample = std::max(worst_sample, st.idle_while_queued);
      });
    loop.run();
    CHECK_FALSE(ev.overbooked);
    auto st = sched.stats();
    CHECK(worst_sample <= st.idle_while_queued);  // it only grows
    CHECK(ev.started.back().at < seconds(490));  // the samples covered the whole run (jobs last < 5 s)
    CHECK(to_seconds(st.idle_while_queued) == Approx(sampled_s).margin(0.5).epsilon(0.01));
    return st;
  };
  const auto conserving = run(elastic{.interval = seconds(3)});
  CHECK(conserving.idle_while_queued == duration{0});
  CHECK(conserving.idle_while_validation_queued == duration{0});
  CHECK(conserving.idle_while_profiling_queued == duration{0});
  CHECK(conserving.max_validation_queue > 0);  // the load did queue work
  CHECK(conserving.max_profiling_queue > 0);

  const auto strict = run(elastic{.interval = seconds(3), .work_conserving = false});
  CHECK(strict.idle_while_queued > duration{0});
  const auto split = run(static_split{});
  CHECK(split.idle_while_queued > duration{0});
  CHECK(split.idle_while_queued >= std::max(split.idle_while_validation_queued, split.idle_while_profiling_queued));
  CHECK(split.idle_while_queued <= split.idle_while_validation_queued + split.idle_while_profiling_queued);
  CHECK(run(static_split{.work_conserving = true}).idle_while_queued == duration{0});
}
