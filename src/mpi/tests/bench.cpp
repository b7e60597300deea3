// specgen-mpi-bench: what the MPI pool costs per job.
//   mpirun -np 2 specgen-mpi-bench --mode rtt --jobs 2000
//       round trip of a no-op validate job through rank 1 (median, p90)
//   mpirun -np N specgen-mpi-bench --mode throughput --jobs 4000 --latency-us 1000 --devices 2
//       evaluations per second with N-1 stand-in worker ranks of --devices devices each
//   mpirun -np 9 specgen-mpi-bench --mode scaling --jobs 2000 --latency-us 10000 --devices 2 [--json F]
//       in one run: the dispatch overhead (round trip through rank 1 against the stand-in in this
//       process), then evaluations per second with 1, 2, 4, 8 worker ranks busy against a local
//       stand-in with as many devices and against N times one rank
//   specgen-mpi-bench --local ... (no mpirun): the same stand-in in this process, without MPI
//   --busy-poll-us B --idle-poll-us U: how the MPI threads wait (worker_config, pool_config)
#include "mpi/testing/standin_evaluator.hpp"

#include <specgen/mpi/pool.hpp>
#include <specgen/task_io.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
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
  int idle_poll_us = 100;
  int busy_poll_us = 1000;
  std::string json{};
};

/// The candidate every job of the benchmark carries (the stand-in only reads its source).
std::shared_ptr<candidate> noop_candidate(const task& t) {
  auto c = std::make_shared<candidate>();
  c->task = t.name;
  c->source = "extern \"C\" __global__ void k() {}";
  c->plan = "launch k grid=(1,1,1) block=(32,1,1)";
  return c;
}

/// The value at quantile `q` of sorted `v` (not empty).
double quantile(const std::vector<double>& v, double q) {
  return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1))];
}

/// Round trips of a no-op validate job on device 0: sorted, in microseconds.
template <class Pool>
std::vector<double> round_trips(Pool& pool, event_loop<steady_clock>& loop, int jobs,
                                const std::shared_ptr<candidate>& c,
                                const std::shared_ptr<const task>& t, job_id& next) {
  std::vector<double> us;
  clk::time_point t0;
  std::function<void()> one = [&] {
    t0 = clk::now();
    pool.submit({.id = next++, .kind = stage::validate, .device = 0, .cand = c, .for_task = t}, [&](eval_outcome) {
      us.push_back(std::chrono::duration<double, std::micro>(clk::now() - t0).count());
      if (static_cast<int>(us.size()) < jobs) one();
    });
  };
  one();
  loop.run();
  std::sort(us.begin(), us.end());
  return us;
}

/// Evaluations per second with every one of devices 0 .. `devices`-1 kept busy by `jobs` jobs.
template <class Pool>
double throughput(Pool& pool, event_loop<steady_clock>& loop, int jobs, int devices,
                  const std::shared_ptr<candidate>& c,
                  const std::shared_ptr<const task>& t, job_id& next) {
  int submitted = 0;
  int answered = 0;
  std::function<void(int)> feed = [&](int d) {
    if (submitted >= jobs) return;
    ++submitted;
    pool.submit({.id = next++, .kind = stage::validate, .device = d, .cand = c, .for_task = t}, [&, d](eval_outcome) {
      ++answered;
      feed(d);
    });
  };
  const auto t0 = clk::now();
  for (int d = 0; d < devices; ++d) feed(d);
  loop.run();
  return answered / std::chrono::duration<double>(clk::now() - t0).count();
}

template <class Pool>
void measure(Pool& pool, event_loop<steady_clock>& loop, const options& o, const task& t, const char* what) {
  auto tp = std::make_shared<const task>(t);
  auto c = noop_candidate(t);
  job_id next = 1;
  if (o.mode == "rtt") {
    const auto us = round_trips(pool, loop, o.jobs, c, tp, next);
    std::printf("%s rtt: %zu jobs, median %.1f us, p10 %.1f us, p90 %.1f us\n", what, us.size(), quantile(us, 0.5),
                quantile(us, 0.1), quantile(us, 0.9));
    return;
  }
  const auto t0 = clk::now();
  const double rate = throughput(pool, loop, o.jobs, pool.devices(), c, tp, next);
  const double s = std::chrono::duration<double>(clk::now() - t0).count();
  std::printf("%s throughput: %d devices, %d jobs of %d us in %.3f s: %.0f evaluations/s (ideal %.0f)\n", what,
              pool.devices(), o.jobs, o.latency_us, s, rate, o.latency_us ? pool.devices() * 1e6 / o.latency_us : 0.0);
}

/// One run, side by side: the round trip of a job through rank 1 against the
/// same stand-in (the same latency) in this process, then evaluations per
/// second with the devices of the first 1, 2, 4, ... worker ranks busy,
/// against a local stand-in with as many devices, and against that many times
/// one rank's rate. Writes JSON to `json` when given.
void scaling(mpi::mpi_pool& pool, event_loop<steady_clock>& loop, const options& o, const task& t, int workers,
             const std::string& json) {
  auto tp = std::make_shared<const task>(t);
  auto c = noop_candidate(t);
  job_id next = 1;
  const auto latency = std::chrono::microseconds(o.latency_us);
  nlohmann::json out = {{"latency_us", o.latency_us}, {"devices_per_rank", o.devices}, {"workers", workers}};

  const int rtt_jobs = std::max(200, o.jobs / 4);
  const auto mpi_us = round_trips(pool, loop, rtt_jobs, c, tp, next);
  std::vector<double> local_us;
  {
    mpi::testing::standin_evaluator local(loop, 1, 2, latency);  // the workers' latency: the difference is dispatch
    local_us = round_trips(local, loop, rtt_jobs, c, tp, next);
  }
  std::printf("round trip of a %d us job, %d jobs: through rank 1 median %.1f us (p90 %.1f), in this process median "
              "%.1f us: dispatch overhead %.1f us per job at the median (target: at most 1000)\n",
              o.latency_us, rtt_jobs, quantile(mpi_us, 0.5), quantile(mpi_us, 0.9), quantile(local_us, 0.5),
              quantile(mpi_us, 0.5) - quantile(local_us, 0.5));
  out["rtt_mpi_median_us"] = quantile(mpi_us, 0.5);
  out["rtt_mpi_p90_us"] = quantile(mpi_us, 0.9);
  out["rtt_local_median_us"] = quantile(local_us, 0.5);
  out["dispatch_overhead_median_us"] = quantile(mpi_us, 0.5) - quantile(local_us, 0.5);

  std::printf("\n%-6s %8s %14s %14s %10s %14s\n", "ranks", "devices", "local eval/s", "mpi eval/s", "mpi/local",
              "vs N x 1 rank");
  double one_rank = 0;
  out["rows"] = nlohmann::json::array();
  std::vector<int> counts;  // 1, 2, 4, ... and every worker rank
  for (int k = 1; k < workers; k *= 2) counts.push_back(k);
  counts.push_back(workers);
  for (const int k : counts) {
    const int devices = k * o.devices;
    const int jobs = o.jobs * k;
    double local_rate = 0;
    {
      mpi::testing::standin_evaluator local(loop, devices, 2, latency);
      local_rate = throughput(local, loop, jobs, devices, c, tp, next);
    }
    const double mpi_rate = throughput(pool, loop, jobs, devices, c, tp, next);
    if (k == 1) one_rank = mpi_rate;
    const double scale = mpi_rate / (k * one_rank);
    std::printf("%-6d %8d %14.0f %14.0f %10.3f %14.3f\n", k, devices, local_rate, mpi_rate, mpi_rate / local_rate,
                scale);
    out["rows"].push_back({{"ranks", k}, {"devices", devices}, {"jobs", jobs}, {"local_per_s", local_rate},
                           {"mpi_per_s", mpi_rate}, {"mpi_over_local", mpi_rate / local_rate},
                           {"over_n_times_one_rank", scale}});
  }
  std::printf("target: with N ranks at least 0.9 x N times one rank's evaluations per second\n");
  if (!json.empty()) {
    std::ofstream f(json);
    f << out.dump(2) << '\n';
  }
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
    else if (a == "--json") o.json = value();
  }
  auto tasks = load_suite(SPECGEN_SOURCE_DIR "/tasks/examples");
  if (!tasks) {
    std::fprintf(stderr, "%s\n", tasks.error().message.c_str());
    return 1;
  }
  const auto latency = std::chrono::microseconds(o.latency_us);
  const mpi::polling poll{.busy_poll = std::chrono::microseconds(o.busy_poll_us),
                          .idle_poll = std::chrono::microseconds(o.idle_poll_us)};
  event_loop<steady_clock> loop;
  if (o.local) {
    mpi::testing::standin_evaluator standin(loop, o.devices, 2, latency);
    measure(standin, loop, o, tasks->front(), "local");
    return 0;
  }
  mpi::environment env(argc, argv);
  if (env.rank() != 0) {
    mpi::testing::standin_evaluator standin(loop, o.devices, 2, latency);
    auto served = mpi::serve(loop, mpi::local_evaluator::of(standin), *tasks, {.poll = poll});
    return served ? 0 : 1;
  }
  auto pool = mpi::mpi_pool::create(loop, {.poll = poll});
  if (!pool) {
    std::fprintf(stderr, "%s\n", pool.error().message.c_str());
    return 1;
  }
  if (o.mode == "scaling") {
    scaling(**pool, loop, o, tasks->front(), env.size() - 1, o.json);
    return 0;
  }
  measure(**pool, loop, o, tasks->front(), fmt::format("mpi ({} worker ranks)", env.size() - 1).c_str());
  return 0;
}
