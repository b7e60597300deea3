// Run under mpirun (-np 3): rank 0 drives an mpi_pool over stand-in workers
// with a batch of compile, validate and profile jobs, cancels some, and checks
// that every job is answered exactly once with the verdict the stand-in gives.
// With --kill-rank R --kill-after K, rank R dies (SIGKILL) on its K-th job;
// rank 0 must then take it for dead and lose no job.
#include "mpi/testing/standin_evaluator.hpp"

#include <specgen/mpi/pool.hpp>
#include <specgen/task_io.hpp>

#include <fmt/format.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <string>
#include <vector>

using namespace specgen;

int main(int argc, char** argv) {
  int n_jobs = 300;
  int kill_rank = -1;
  int kill_after = 0;
  bool none_left = false;  // the only worker is killed: the rest must be answered unjudged
  for (int i = 1; i < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--none-left") {
      none_left = true;
      --i;
      continue;
    }
    const int v = i + 1 < argc ? std::atoi(argv[i + 1]) : 0;
    if (a == "--jobs") n_jobs = v;
    else if (a == "--kill-rank") kill_rank = v;
    else if (a == "--kill-after") kill_after = v;
  }
  mpi::environment env(argc, argv);
  auto tasks = load_suite(SPECGEN_SOURCE_DIR "/tasks/examples");
  if (!tasks) {
    std::fprintf(stderr, "rank %d: %s\n", env.rank(), tasks.error().message.c_str());
    return 1;
  }
  event_loop<steady_clock> loop;

  if (env.rank() != 0) {
    mpi::testing::standin_evaluator standin(loop, 2, 2, std::chrono::milliseconds(2));
    auto ev = mpi::local_evaluator::of(standin);
    if (env.rank() == kill_rank) {
      ev.submit = [inner = ev.submit, n = 0, kill_after](eval_job j, eval_callback cb) mutable {
        if (++n == kill_after) std::raise(SIGKILL);
        inner(std::move(j), std::move(cb));
      };
    }
    auto served = mpi::serve(loop, std::move(ev), *tasks, {.heartbeat = std::chrono::milliseconds(50)});
    if (!served) std::fprintf(stderr, "%s\n", served.error().message.c_str());
    return served ? 0 : 1;
  }

  int failures = 0;
  auto fail = [&](const std::string& what) {
    if (++failures <= 20) std::fprintf(stderr, "FAIL: %s\n", what.c_str());
  };
  std::vector<int> lost_seen;
  {
    auto created = mpi::mpi_pool::create(loop, {.dead_after = std::chrono::milliseconds(1000),
                                                .on_rank_lost = [&](const mpi::rank_loss& l) {
                                                  lost_seen.push_back(l.rank);
                                                }});
    if (!created) {
      std::fprintf(stderr, "%s\n", created.error().message.c_str());
      return 1;
    }
    mpi::mpi_pool& pool = **created;
    std::printf("pool: %d devices, %d compile slots\n", pool.devices(), pool.compile_slots());
    if (pool.devices() != 2 * (env.size() - 1)) fail(fmt::format("pool has {} devices", pool.devices()));

    // Every candidate gets a compile, a validate and a profile job.
    std::deque<eval_job> compiles;
    std::deque<eval_job> device_jobs;
    job_id next = 1;
    for (int i = 0; i < n_jobs / 3; ++i) {
      auto t = std::make_shared<const task>((*tasks)[static_cast<std::size_t>(i) % tasks->size()]);
      auto c = std::make_shared<candidate>();
      c->task = t->name;
      c->source = fmt::format("extern \"C\" __global__ void k{}() {{}}{}{}", i, i % 7 == 3 ? "\n#error no" : "",
                              i % 5 == 1 ? " // wrong" : "");
      c->plan = fmt::format("launch k{} grid=({},1,1) block=(256,1,1)", i, i + 1);
      if (i % 4 == 0) c->source += "\n// " + std::string(20000, 'x');  // past the eager limit: a rendezvous send
      compiles.push_back({.id = next++, .kind = stage::compile, .device = -1, .cand = c, .for_task = t});
      for (stage s : {stage::validate, stage::profile})
        device_jobs.push_back({.id = next++, .kind = s, .device = -1, .cand = c, .for_task = t});
    }
    const std::size_t total = compiles.size() + device_jobs.size();
    std::map<job_id, int> answers;
    std::map<job_id, bool> to_cancel;
    std::vector<bool> device_busy(static_cast<std::size_t>(pool.devices()), false);
    int compiling = 0;
    std::size_t cancelled = 0;
    std::size_t unjudged = 0;

    std::function<void()> pump;
    auto on_answer = [&](eval_job job, eval_outcome o) {
      ++answers[job.id];
      if (o.id != job.id) fail(fmt::format("job {} answered as {}", job.id, o.id));
      if (o.kind != job.kind) fail(fmt::format("job {}: stage {}", job.id, to_string(o.kind)));
      if (o.device != job.device) fail(fmt::format("job {}: device {} for {}", job.id, o.device, job.device));
      if (none_left && o.unjudged && o.result.summary.find("no worker rank is left") != std::string::npos) {
        ++unjudged;
      } else if (to_cancel.contains(job.id)) {
        if (!o.cancelled) fail(fmt::format("job {}: cancelled, answered not cancelled", job.id));
        ++cancelled;
      } else {
        const eval_outcome want = mpi::testing::judge(job);
        if (o.cancelled || o.unjudged) fail(fmt::format("job {}: cancelled or unjudged: {}", job.id, o.result.summary));
        if (!(o.result == want.result))
          fail(fmt::format("job {}: verdict {} '{}'", job.id, to_string(o.result.kind), o.result.summary));
        if (!(o.compile == want.compile)) fail(fmt::format("job {}: compile report differs", job.id));
        if (o.timing != want.timing) fail(fmt::format("job {}: timing differs", job.id));
        if (o.busy != std::chrono::milliseconds(2)) fail(fmt::format("job {}: busy {} ns", job.id, o.busy.count()));
      }
      pump();
    };
    pump = [&] {
      while (compiling < pool.compile_slots() && !compiles.empty()) {
        eval_job j = compiles.front();
        compiles.pop_front();
        ++compiling;
        const job_id id = j.id;
        pool.submit(j, [&, j](eval_outcome o) {
          --compiling;
          on_answer(j, std::move(o));
        });
        if (id % 41 == 0) {  // cancel some right away (queued or in flight)
          to_cancel[id] = true;
          if (!pool.cancel(id) && !none_left) fail(fmt::format("cancel({}) found no job", id));
        }
      }
      for (std::size_t d = 0; d < device_busy.size() && !device_jobs.empty(); ++d) {
        if (device_busy[d]) continue;
        eval_job j = device_jobs.front();
        device_jobs.pop_front();
        j.device = static_cast<int>(d);
        device_busy[d] = true;
        const job_id id = j.id;
        pool.submit(j, [&, j, d](eval_outcome o) {
          device_busy[d] = false;
          on_answer(j, std::move(o));
        });
        if (id % 37 == 0) {  // a validate or profile job cancelled while in flight
          to_cancel[id] = true;
          if (!pool.cancel(id) && !none_left) fail(fmt::format("cancel({}) found no job", id));
        }
      }
    };
    pump();
    loop.run();

    if (answers.size() != total) fail(fmt::format("{} of {} jobs answered", answers.size(), total));
    for (const auto& [id, n] : answers)
      if (n != 1) fail(fmt::format("job {} answered {} times", id, n));
    if (pool.cancel(1)) fail("cancel of an answered job returned true");
    const auto stats = pool.stats();
    std::printf("answered %zu jobs (%zu cancelled); per worker rank:", answers.size(), cancelled);
    for (auto n : stats.jobs) std::printf(" %llu", static_cast<unsigned long long>(n));
    std::printf("; requeued %llu; lost ranks %zu\n", static_cast<unsigned long long>(stats.requeued),
                stats.lost_ranks.size());
    if (cancelled + unjudged < to_cancel.size()) fail("not every cancelled job reported cancelled");
    std::printf("unjudged %zu\n", unjudged);
    if (none_left) {
      if (stats.lost_ranks != std::vector<int>{kill_rank}) fail("the killed rank was not taken for dead");
      if (unjudged == 0) fail("no job was answered unjudged after the last rank was lost");
    } else if (kill_rank > 0) {
      if (stats.lost_ranks != std::vector<int>{kill_rank}) fail("the killed rank was not taken for dead");
      if (stats.requeued == 0) fail("no job of the killed rank was sent again");
      if (lost_seen != std::vector<int>{kill_rank}) fail("on_rank_lost was not called once for the killed rank");
      const auto [r, local] = pool.owner(0);
      if (r == kill_rank) fail("device 0 is still served by the killed rank");
    } else if (!stats.lost_ranks.empty()) {
      fail("a rank was taken for dead");
    }
  }
  // mpirun --enable-recovery exits 0 whatever rank 0 returns: the test reads this line.
  std::printf("rank 0: %s\n", failures ? "FAILED" : "all jobs answered once, intact");
  return failures ? 1 : 0;
}
