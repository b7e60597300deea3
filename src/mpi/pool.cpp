// mpi_pool: rank 0's evaluator over the worker ranks. One thread makes every
// MPI call; the pool's state is shared with the loop's thread under a mutex.
#include "mpi/link.hpp"
#include "mpi/wire.hpp"

#include <specgen/mpi/pool.hpp>

#include <mpi.h>

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>

SPECGEN_BEGIN_NAMESPACE
namespace mpi {

namespace {
using clk = std::chrono::steady_clock;
}

struct mpi_pool::state {
  struct record {
    eval_job job;
    eval_callback cb;
    int rank = -1;  // where it was sent; -1 while queued here
    int slot = -1;  // the device slot it runs on (validate/profile)
    bool cancel_requested = false;
  };
  struct device_slot {
    int rank = 0;
    int local = 0;
    bool busy = false;
    std::deque<job_id> queue;
  };
  struct rank_info {
    bool alive = true;
    std::string host;
    int cores = 0;
    std::vector<std::string> names;
    int first_device = 0;
    int compile_slots = 0;
    int compiling = 0;
    std::uint64_t jobs = 0;
    clk::time_point last_heard{};
  };
  struct outgoing {
    int rank;
    int tag;
    std::string body;
  };

  state(executor& e, pool_config c) : loop(e), config(std::move(c)) {}

  executor& loop;
  pool_config config;

  mutable std::mutex mutex;
  std::condition_variable wake;
  std::vector<device_slot> slots;       // every worker device, in rank order
  std::vector<int> device_map;          // pool device -> slot
  std::map<int, rank_info> ranks;       // worker ranks
  std::map<job_id, record> jobs;        // submitted, not yet answered
  std::deque<job_id> compile_queue;
  std::vector<outgoing> outbox;
  bool stopping = false;
  std::uint64_t cancelled = 0;
  std::uint64_t requeued = 0;
  std::vector<int> lost;
  std::thread mpi_thread;

  /// Hands `o` to `cb` on the loop's thread and drops the job's hold there.
  void post(eval_callback cb, eval_outcome o) {
    executor& l = loop;
    loop.post([&l, cb = std::move(cb), o = std::move(o)]() mutable {
      cb(std::move(o));
      l.release();
    });
  }

  static eval_outcome cancelled_outcome(const eval_job& j) {
    eval_outcome o;
    o.id = j.id;
    o.kind = j.kind;
    o.device = j.kind == stage::compile ? -1 : j.device;
    o.cancelled = true;
    return o;
  }

  /// Answers job `id` with `o` and forgets it (the only way a job ends).
  void finish(std::map<job_id, record>::iterator it, eval_outcome o) {
    if (o.cancelled) ++cancelled;
    post(std::move(it->second.cb), std::move(o));
    jobs.erase(it);
  }

  [[nodiscard]] bool alive(int rank) const {
    std::lock_guard lock(mutex);
    return ranks.at(rank).alive;
  }

  [[nodiscard]] bool any_alive() const {
    return std::any_of(ranks.begin(), ranks.end(), [](const auto& r) { return r.second.alive; });
  }

  [[nodiscard]] int live_compile_slots() const {
    int n = 0;
    for (const auto& [r, info] : ranks)
      if (info.alive) n += info.compile_slots;
    return n;
  }

  void send_job(record& rec, int rank, int local_device) {
    rec.rank = rank;
    wire::job_message m{.id = rec.job.id,
                        .kind = rec.job.kind,
                        .device = local_device,
                        .task = rec.job.for_task->name,
                        .source = rec.job.cand->source,
                        .plan = rec.job.cand->plan};
    outbox.push_back({rank, wire::job, wire::encode(m)});
  }

  /// Sends whatever can start now: one job per free device, compiles up to
  /// each rank's compile slots (most free slots first).
  void dispatch() {
    for (std::size_t s = 0; s < slots.size(); ++s) {
      device_slot& slot = slots[s];
      if (slot.busy || slot.queue.empty() || !ranks[slot.rank].alive) continue;
      const job_id id = slot.queue.front();
      slot.queue.pop_front();
      record& rec = jobs.at(id);
      rec.slot = static_cast<int>(s);
      slot.busy = true;
      send_job(rec, slot.rank, slot.local);
    }
    while (!compile_queue.empty()) {
      int best = -1;
      int best_free = 0;
      for (const auto& [r, info] : ranks) {
        const int free = info.compile_slots - info.compiling;
        if (info.alive && free > best_free) {
          best = r;
          best_free = free;
        }
      }
      if (best < 0) break;
      const job_id id = compile_queue.front();
      compile_queue.pop_front();
      ++ranks[best].compiling;
      send_job(jobs.at(id), best, -1);
    }
  }

  void on_result(int rank, const std::string& body) {
    eval_outcome o = wire::decode_outcome(body);
    auto it = jobs.find(o.id);
    if (it == jobs.end() || it->second.rank != rank) return;  // cancelled here already, or sent again elsewhere
    record& rec = it->second;
    ++ranks[rank].jobs;
    if (rec.job.kind == stage::compile) --ranks[rank].compiling;
    else slots[static_cast<std::size_t>(rec.slot)].busy = false;
    if (rec.cancel_requested) {
      o = cancelled_outcome(rec.job);
    } else {
      o.device = rec.job.kind == stage::compile ? -1 : rec.job.device;  // the pool's device, not the rank's
    }
    finish(it, std::move(o));
    dispatch();
  }

  /// Rank `rank` is gone: its devices are served by live ones and its jobs
  /// sent again (or answered, when cancelled or when no rank is left).
  void lose(int rank) {
    const auto silent = std::chrono::duration_cast<std::chrono::milliseconds>(clk::now() - ranks[rank].last_heard);
    rank_loss loss{.rank = rank, .silent = silent};
    ranks[rank].alive = false;
    ranks[rank].compiling = 0;
    lost.push_back(rank);
    note_rank_lost();
    std::vector<std::size_t> live;
    for (std::size_t s = 0; s < slots.size(); ++s)
      if (ranks[slots[s].rank].alive) live.push_back(s);
    // The lost rank's devices move to live ones, spread round-robin.
    std::size_t next = 0;
    for (int& s : device_map) {
      if (slots[static_cast<std::size_t>(s)].rank != rank || live.empty()) continue;
      s = static_cast<int>(live[next++ % live.size()]);
    }
    std::vector<job_id> again;
    for (auto& [id, rec] : jobs) {
      const bool queued_on_lost =
          rec.rank < 0 && rec.job.kind != stage::compile && slots[static_cast<std::size_t>(rec.slot)].rank == rank;
      if (rec.rank == rank || queued_on_lost) again.push_back(id);
    }
    for (auto& s : slots)
      if (s.rank == rank) {
        s.queue.clear();
        s.busy = false;
      }
    for (job_id id : again) {
      auto it = jobs.find(id);
      record& rec = it->second;
      if (rec.cancel_requested) {
        finish(it, cancelled_outcome(rec.job));
        continue;
      }
      if (live.empty()) {
        ++loss.unjudged;
        eval_outcome o;
        o.id = id;
        o.kind = rec.job.kind;
        o.device = rec.job.kind == stage::compile ? -1 : rec.job.device;
        o.unjudged = true;
        o.result.summary = fmt::format("no worker rank is left to evaluate it (rank {} was lost last)", rank);
        finish(it, std::move(o));
        continue;
      }
      if (rec.rank >= 0) ++requeued;
      ++loss.resent;
      rec.rank = -1;
      if (rec.job.kind == stage::compile) {
        compile_queue.push_front(id);
      } else {
        rec.slot = device_map[static_cast<std::size_t>(rec.job.device)];
        slots[static_cast<std::size_t>(rec.slot)].queue.push_front(id);
      }
    }
    // Compiles queued here wait for a live rank; with none left they never would.
    if (live.empty()) {
      for (job_id id : std::deque<job_id>(compile_queue)) {
        auto it = jobs.find(id);
        eval_outcome o;
        o.id = id;
        o.kind = stage::compile;
        o.unjudged = true;
        o.result.summary = fmt::format("no worker rank is left to evaluate it (rank {} was lost last)", rank);
        finish(it, std::move(o));
      }
      compile_queue.clear();
    }
    for (const auto& [r, info] : ranks) loss.ranks_left += info.alive ? 1 : 0;
    if (config.on_rank_lost) loop.post([cb = config.on_rank_lost, loss] { cb(loss); });
    dispatch();
  }

  void run() {
    link l;
    poll_waiter waiter(config.poll);
    try {
      while (true) {
        std::vector<outgoing> out;
        bool stop_now = false;
        {
          std::lock_guard lock(mutex);
          out.swap(outbox);
          stop_now = stopping;
        }
        bool active = !out.empty();
        for (auto& o : out) {
          l.send(o.rank, o.tag, std::move(o.body));
          if (!alive(o.rank)) l.abandon(o.rank);  // the stop to a lost rank: no waiting for it
        }
        l.progress();
        if (stop_now) break;  // the stop messages were in `out`
        while (auto m = l.poll()) {
          active = true;
          std::lock_guard lock(mutex);
          auto r = ranks.find(m->rank);
          if (r == ranks.end() || !r->second.alive) continue;  // a lost rank's late word changes nothing
          r->second.last_heard = clk::now();
          if (m->tag == wire::result) {
            try {
              on_result(m->rank, m->body);
            } catch (const std::exception& e) {
              std::fprintf(stderr, "specgen mpi_pool: unreadable result from rank %d: %s\n", m->rank, e.what());
            }
          }
        }
        {
          std::lock_guard lock(mutex);
          const auto now = clk::now();
          for (auto& [r, info] : ranks)
            if (info.alive && now - info.last_heard > config.dead_after) {
              l.abandon(r);
              lose(r);
              active = true;
            }
        }
        if (active) waiter.active();
        else waiter.wait(mutex, wake, [&] { return !outbox.empty() || stopping; });
      }
      l.flush(std::chrono::seconds(2));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "specgen mpi_pool: MPI failed, the pool stops: %s\n", e.what());
      std::lock_guard lock(mutex);
      for (auto& [r, info] : ranks)
        if (info.alive) lose(r);
    }
  }
};

expected<std::unique_ptr<mpi_pool>, error> mpi_pool::create(executor& loop, pool_config config) {
  if (loop.is_virtual())
    return unexpected(
        error{"mpi_pool needs a real-time executor (event_loop<steady_clock>): its thread posts results"});
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (rank != 0) return unexpected(error{fmt::format("mpi_pool runs on rank 0, not on rank {}", rank)});
  if (size < 2) return unexpected(error{"mpi_pool needs worker ranks: start the program with mpirun -np 2 or more"});
  auto s = std::make_unique<state>(loop, std::move(config));
  // Every worker's hello first, refusals included, so that all of them hear the outcome.
  std::string refused;
  for (int r = 1; r < size; ++r) {
    auto& info = s->ranks[r];
    try {
      const message m = receive(r, wire::hello);
      const auto j = nlohmann::json::parse(m.body);
      info.host = j.value("host", std::string{});
      if (j.contains("refused")) {
        refused += fmt::format("{}rank {}{}: {}", refused.empty() ? "" : "; ", r,
                               info.host.empty() ? "" : " on " + info.host, j.at("refused").get<std::string>());
        continue;
      }
      const int devices = j.at("devices").get<int>();
      info.compile_slots = j.at("compile_slots").get<int>();
      info.cores = j.value("cores", 0);
      info.names = j.value("device_names", std::vector<std::string>{});
      info.names.resize(static_cast<std::size_t>(devices));
      info.first_device = static_cast<int>(s->slots.size());
      for (int d = 0; d < devices; ++d) s->slots.push_back({.rank = r, .local = d, .busy = false, .queue = {}});
    } catch (const std::exception& e) {
      refused += fmt::format("{}rank {}'s hello: {}", refused.empty() ? "" : "; ", r, e.what());
    }
  }
  if (!refused.empty() || s->slots.empty()) {
    // The workers that said hello wait for a job or a stop: they get the stop.
    for (int r = 1; r < size; ++r) {
      try {
        send_now(r, wire::stop, "{}");
      } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch): the error below is what counts
      }
    }
    return unexpected(
        error{refused.empty() ? "no worker rank has a device" : "worker ranks could not start: " + refused});
  }
  for (std::size_t i = 0; i < s->slots.size(); ++i) s->device_map.push_back(static_cast<int>(i));
  const auto now = clk::now();
  for (auto& [r, info] : s->ranks) info.last_heard = now;
  s->mpi_thread = std::thread([st = s.get()] { st->run(); });
  return std::unique_ptr<mpi_pool>(new mpi_pool(std::move(s)));
}

mpi_pool::mpi_pool(std::unique_ptr<state> s) : state_(std::move(s)) {}

mpi_pool::~mpi_pool() {
  state& s = *state_;
  {
    std::lock_guard lock(s.mutex);
    while (!s.jobs.empty()) s.finish(s.jobs.begin(), state::cancelled_outcome(s.jobs.begin()->second.job));
    s.compile_queue.clear();
    for (auto& slot : s.slots) slot.queue.clear();
    const std::string stop = nlohmann::json{{"ranks_lost", s.lost.size()}}.dump();
    for (const auto& [r, info] : s.ranks) s.outbox.push_back({r, wire::stop, stop});
    s.stopping = true;
  }
  s.wake.notify_all();
  if (s.mpi_thread.joinable()) s.mpi_thread.join();
}

int mpi_pool::devices() const noexcept { return static_cast<int>(state_->device_map.size()); }

int mpi_pool::compile_slots() const noexcept {
  std::lock_guard lock(state_->mutex);
  return std::max(1, state_->live_compile_slots());
}

void mpi_pool::submit(eval_job job, eval_callback done) {
  state& s = *state_;
  if (!job.cand || !job.for_task)
    throw std::logic_error(fmt::format("mpi_pool: job {} has no candidate or no task", job.id));
  if (job.kind != stage::compile && (job.device < 0 || job.device >= devices()))
    throw std::logic_error(fmt::format("mpi_pool: job {} names device {}, but there are {} (0..{})", job.id,
                                       job.device, devices(), devices() - 1));
  if (job.kind == stage::compile) job.device = -1;
  s.loop.hold();
  {
    std::lock_guard lock(s.mutex);
    if (s.jobs.contains(job.id)) {
      s.loop.release();
      throw std::logic_error(fmt::format("mpi_pool: job id {} is already queued or running", job.id));
    }
    const job_id id = job.id;
    const stage kind = job.kind;
    const int device = job.device;
    auto it = s.jobs.emplace(id, state::record{std::move(job), std::move(done)}).first;
    if (!s.any_alive()) {  // every rank is lost
      eval_outcome o;
      o.id = id;
      o.kind = kind;
      o.device = device;
      o.unjudged = true;
      o.result.summary = "no worker rank is left to evaluate it";
      s.finish(it, std::move(o));
      return;
    }
    if (kind == stage::compile) {
      s.compile_queue.push_back(id);
    } else {
      it->second.slot = s.device_map[static_cast<std::size_t>(device)];
      s.slots[static_cast<std::size_t>(it->second.slot)].queue.push_back(id);
    }
    s.dispatch();
  }
  s.wake.notify_all();
}

bool mpi_pool::cancel(job_id id) {
  state& s = *state_;
  {
    std::lock_guard lock(s.mutex);
    auto it = s.jobs.find(id);
    if (it == s.jobs.end()) return false;
    state::record& rec = it->second;
    if (rec.rank < 0) {  // still queued here
      if (rec.job.kind == stage::compile) {
        std::erase(s.compile_queue, id);
      } else {
        std::erase(s.slots[static_cast<std::size_t>(rec.slot)].queue, id);
      }
      s.finish(it, state::cancelled_outcome(rec.job));
      return true;
    }
    if (!rec.cancel_requested) {
      rec.cancel_requested = true;
      s.outbox.push_back({rec.rank, wire::cancel, nlohmann::json{{"id", id}}.dump()});
    }
  }
  s.wake.notify_all();
  return true;
}

std::pair<int, int> mpi_pool::owner(int device) const {
  std::lock_guard lock(state_->mutex);
  const int slot_index = state_->device_map.at(static_cast<std::size_t>(device));
  const auto& slot = state_->slots.at(static_cast<std::size_t>(slot_index));
  return {slot.rank, slot.local};
}

pool_stats mpi_pool::stats() const {
  const state& s = *state_;
  std::lock_guard lock(s.mutex);
  pool_stats out;
  for (const auto& [r, info] : s.ranks) out.jobs.push_back(info.jobs);
  out.cancelled = s.cancelled;
  out.requeued = s.requeued;
  out.lost_ranks = s.lost;
  return out;
}

std::vector<worker_info> mpi_pool::workers() const {
  const state& s = *state_;
  std::lock_guard lock(s.mutex);
  std::vector<worker_info> out;
  for (const auto& [r, info] : s.ranks)
    out.push_back({.rank = r,
                   .host = info.host,
                   .devices = info.names,
                   .first_device = info.first_device,
                   .compile_slots = info.compile_slots,
                   .cores = info.cores,
                   .alive = info.alive,
                   .jobs = info.jobs});
  return out;
}

}  // namespace mpi
SPECGEN_END_NAMESPACE
