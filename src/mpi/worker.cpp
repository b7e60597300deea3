// The worker rank's side: MPI initialisation (environment) and `serve`, the
// loop that runs rank 0's jobs on a local evaluator.
#include "mpi/link.hpp"
#include "mpi/wire.hpp"

#include <specgen/mpi/pool.hpp>

#include <mpi.h>

#include <fmt/format.h>

#include <sched.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

SPECGEN_BEGIN_NAMESPACE
namespace mpi {

environment::environment(int& argc, char**& argv) {
  int initialised = 0;
  MPI_Initialized(&initialised);
  int provided = MPI_THREAD_SINGLE;
  if (!initialised) {
    if (MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
      throw std::runtime_error("MPI_Init_thread failed");
    owns_ = true;
  } else {
    MPI_Query_thread(&provided);
  }
  if (provided < MPI_THREAD_SERIALIZED) {
    if (owns_) MPI_Finalize();
    throw std::runtime_error(fmt::format(
        "MPI gives thread level {}; the pool needs MPI_THREAD_SERIALIZED ({})", provided, MPI_THREAD_SERIALIZED));
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  // The ranks on this host, in world-rank order; every one but rank 0 is a worker.
  MPI_Comm host = MPI_COMM_NULL;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &host) != MPI_SUCCESS) {
    if (owns_) MPI_Finalize();
    throw std::runtime_error("MPI_Comm_split_type failed: cannot tell which ranks share this host");
  }
  int host_size = 0;
  MPI_Comm_size(host, &host_size);
  std::vector<int> world_ranks(static_cast<std::size_t>(host_size));
  MPI_Allgather(&rank_, 1, MPI_INT, world_ranks.data(), 1, MPI_INT, host);
  MPI_Comm_free(&host);
  std::sort(world_ranks.begin(), world_ranks.end());
  for (int r : world_ranks) {
    if (r == 0) continue;
    if (r == rank_) host_worker_index_ = host_workers_;
    ++host_workers_;
  }
}

namespace {
/// The CPU cores this process may run on (an MPI launcher may have bound it to one).
int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 0;
  return CPU_COUNT(&set);
}

std::string processor_name() {
  char host[MPI_MAX_PROCESSOR_NAME] = {};
  int n = 0;
  if (MPI_Get_processor_name(host, &n) != MPI_SUCCESS) n = 0;
  return {host, static_cast<std::size_t>(std::max(n, 0))};
}
}  // namespace

std::vector<int> share_devices(const std::vector<int>& devices, int workers, int index) {
  std::vector<int> mine;
  const int n = static_cast<int>(devices.size());
  if (n == 0 || workers <= 0 || index < 0) return mine;
  if (workers >= n) {
    mine.push_back(devices[static_cast<std::size_t>(index % n)]);
    return mine;
  }
  for (int d = index; d < n; d += workers) mine.push_back(devices[static_cast<std::size_t>(d)]);
  return mine;
}

environment::~environment() {
  // After a lost rank, Open MPI 4.1's MPI_Finalize may wait forever for it
  // (docs/distributed.md): the process ends without it.
  if (owns_ && !rank_was_lost()) MPI_Finalize();
}

expected<void, error> refuse(const std::string& why) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  try {
    send_now(0, wire::hello, nlohmann::json{{"refused", why}, {"host", processor_name()}}.dump());
    (void)receive(0, wire::stop);
  } catch (const std::exception& e) {
    return unexpected(error{fmt::format("rank {}: telling rank 0 it cannot serve: {}", rank, e.what())});
  }
  return unexpected(error{why});
}

expected<void, error> serve(event_loop<steady_clock>& loop, local_evaluator ev, const std::vector<task>& tasks,
                            worker_config config) {
  std::map<std::string, std::shared_ptr<const task>, std::less<>> by_name;
  for (const auto& t : tasks) by_name.emplace(t.name, std::make_shared<const task>(t));
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  try {
    send_now(0, wire::hello,
             nlohmann::json{{"devices", ev.devices},
                            {"compile_slots", ev.compile_slots},
                            {"host", processor_name()},
                            {"cores", usable_cores()},
                            {"device_names", ev.device_names}}
                 .dump());
  } catch (const std::exception& e) {
    return unexpected(error{fmt::format("rank {}: saying hello to rank 0: {}", rank, e.what())});
  }

  std::mutex mutex;
  std::condition_variable wake;
  std::deque<std::string> outbox;  // results, encoded
  std::string failure;
  std::set<job_id> in_flight;      // loop thread only

  auto answer = [&](const eval_outcome& o) {
    {
      std::lock_guard lock(mutex);
      outbox.push_back(wire::encode(o));
    }
    wake.notify_one();
  };
  auto run_job = [&](const wire::job_message& m) {
    eval_outcome o;
    o.id = m.id;
    o.kind = m.kind;
    o.device = m.device;
    auto t = by_name.find(m.task);
    if (t == by_name.end()) {
      o.unjudged = true;
      o.result.summary = fmt::format("rank {} has no task '{}' (every rank must load the same tasks)", rank, m.task);
      answer(o);
      return;
    }
    auto c = std::make_shared<candidate>();
    c->task = m.task;
    c->source = m.source;
    c->plan = m.plan;
    in_flight.insert(m.id);
    try {
      ev.submit({.id = m.id, .kind = m.kind, .device = m.device, .cand = std::move(c), .for_task = t->second},
                [&](eval_outcome out) {
                  in_flight.erase(out.id);
                  answer(out);
                });
    } catch (const std::exception& e) {
      in_flight.erase(m.id);
      o.unjudged = true;
      o.result.summary = fmt::format("rank {}: {}", rank, e.what());
      answer(o);
    }
  };
  bool stopped = false;  // loop thread only
  auto stop_all = [&] {
    if (stopped) return;
    stopped = true;
    const std::set<job_id> ids = in_flight;
    for (job_id id : ids) ev.cancel(id);
    loop.release();
  };

  loop.hold();  // until rank 0 says stop
  std::thread mpi_thread([&] {
    using clk = std::chrono::steady_clock;
    link l;
    auto last_sent = clk::now();
    poll_waiter waiter(config.poll);
    try {
      bool done = false;
      while (!done) {
        std::deque<std::string> out;
        {
          std::lock_guard lock(mutex);
          out.swap(outbox);
        }
        bool active = !out.empty();
        for (auto& body : out) l.send(0, wire::result, std::move(body));
        if (!out.empty()) last_sent = clk::now();
        if (clk::now() - last_sent >= config.heartbeat) {
          l.send(0, wire::heartbeat, "{}");
          last_sent = clk::now();
        }
        l.progress();
        while (auto m = l.poll()) {
          active = true;
          if (m->tag == wire::job) {
            loop.post([&run_job, job = wire::decode_job(m->body)] { run_job(job); });
          } else if (m->tag == wire::cancel) {
            const auto id = nlohmann::json::parse(m->body).at("id").get<job_id>();
            loop.post([&ev, id] { ev.cancel(id); });
          } else if (m->tag == wire::stop) {
            if (nlohmann::json::parse(m->body).value("ranks_lost", 0) > 0) note_rank_lost();
            loop.post(stop_all);
            done = true;
            break;
          }
        }
        if (done) break;
        if (active) waiter.active();
        else waiter.wait(mutex, wake, [&] { return !outbox.empty(); });
      }
      l.flush(std::chrono::seconds(2));
    } catch (const std::exception& e) {
      {
        std::lock_guard lock(mutex);
        failure = e.what();
      }
      loop.post(stop_all);
    }
  });
  loop.run();
  mpi_thread.join();
  if (!failure.empty()) return unexpected(error{fmt::format("rank {}: {}", rank, failure)});
  return {};
}

}  // namespace mpi
SPECGEN_END_NAMESPACE
