// specgen-mpi-bench: what the MPI pool costs per job.
//   mpirun -np 2 specgen-mpi-bench --mode rtt --jobs 2000
//       round trip of a no-op validate job through rank 1 (median, p90)
//   mpirun -np N specgen-mpi-bench --mode throughput --jobs 4000 --latency-us 1000 --devices 2
//       evaluations per second with N-1 stand-in worker ranks of --devices devices each
//   specgen-mpi-bench --local ... (no mpirun): the same stand-in in this process, without MPI
//   --busy-poll-us B --idle-poll-us U: how the MPI threads wait (worker_config, pool_config)
#include "mpi/testing/standin_evaluator.hpp"

#include <specgen/mpi/pool.hpp>
#include <specgen/task_io.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

using namespace specgen;

namespace {
using clk = std::chrono::steady_clock;

struct options {
  std::string mode = "rtt";
  int jobs = 2000;
  int latency_us = 0;
  int devices = 1;
  bool local = false;
  int idle_poll_us = 250;
  int busy_poll_us = 1000;
};

template <class Pool>
void measure(Pool& pool, event_loop<steady_clock>& loop, const options& o, const task& t, const char* what) {
  auto tp = std::make_shared<const task>(t);
  auto c = std::make_shared<candidate>();
  c->task = t.name;
  c->source = "extern \"C\" __global__ void k() {}";
  c->plan = "launch k grid=(1,1,1) block=(32,1,1)";
  job_id next = 1;
  if (o.mode == "rtt") {
    std::vector<double> us;
    clk::time_point t0;
    std::function<void()> one = [&] {
      t0 = clk::now();
      pool.submit({.id = next++, .kind = stage::validate, .device = 0, .cand = c, .for_task = tp}, [&](eval_outcome) {
        us.push_back(std::chrono::duration<double, std::micro>(clk::now() - t0).count());
        if (static_cast<int>(us.size()) < o.jobs) one();
      });
    };
    one();
    loop.run();
    std::sort(us.begin(), us.end());
    std::printf("%s rtt: %zu jobs, median %.1f us, p10 %.1f us, p90 %.1f us\n", what, us.size(), us[us.size() / 2],
                us[us.size() / 10], us[us.size() * 9 / 10]);
    return;
  }
  int submitted = 0;
  int answered = 0;
  std::function<void(int)> feed = [&](int d) {
    if (submitted >= o.jobs) return;
    ++submitted;
    pool.submit({.id = next++, .kind = stage::validate, .device = d, .cand = c, .for_task = tp}, [&, d](eval_outcome) {
      ++answered;
      feed(d);
    });
  };
  const auto t0 = clk::now();
  for (int d = 0; d < pool.devices(); ++d) feed(d);
  loop.run();
  const double s = std::chrono::duration<double>(clk::now() - t0).count();
  std::printf("%s throughput: %d devices, %d jobs of %d us in %.3f s: %.0f evaluations/s (ideal %.0f)\n", what,
              pool.devices(), answered, o.latency_us, s, answered / s,
              o.latency_us ? pool.devices() * 1e6 / o.latency_us : 0.0);
}
}  // namespace

int main(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--mode") o.mode = value();
    else if (a == "--jobs") o.jobs = std::atoi(value().c_str());
    else if (a == "--latency-us") o.latency_us = std::atoi(value().c_str());
    else if (a == "--devices") o.devices = std::atoi(value().c_str());
    else if (a == "--local") o.local = true;
    else if (a == "--idle-poll-us") o.idle_poll_us = std::atoi(value().c_str());
    else if (a == "--busy-poll-us") o.busy_poll_us = std::atoi(value().c_str());
  }
  auto tasks = load_suite(SPECGEN_SOURCE_DIR "/tasks/examples");
  if (!tasks) {
    std::fprintf(stderr, "%s\n", tasks.error().message.c_str());
    return 1;
  }
  const auto latency = std::chrono::microseconds(o.latency_us);
  const auto busy_poll = std::chrono::microseconds(o.busy_poll_us);
  const auto idle_poll = std::chrono::microseconds(o.idle_poll_us);
  event_loop<steady_clock> loop;
  if (o.local) {
    mpi::testing::standin_evaluator standin(loop, o.devices, 2, latency);
    measure(standin, loop, o, tasks->front(), "local");
    return 0;
  }
  mpi::environment env(argc, argv);
  if (env.rank() != 0) {
    mpi::testing::standin_evaluator standin(loop, o.devices, 2, latency);
    auto served = mpi::serve(loop, mpi::local_evaluator::of(standin), *tasks,
                             {.busy_poll = busy_poll, .idle_poll = idle_poll});
    return served ? 0 : 1;
  }
  auto pool = mpi::mpi_pool::create(loop, {.busy_poll = busy_poll, .idle_poll = idle_poll});
  if (!pool) {
    std::fprintf(stderr, "%s\n", pool.error().message.c_str());
    return 1;
  }
  measure(**pool, loop, o, tasks->front(), fmt::format("mpi ({} worker ranks)", env.size() - 1).c_str());
  return 0;
}
