#pragma once
/// One `evaluator` spread over the ranks of an MPI job (Open MPI).
///
/// Rank 0 runs the engine and an `mpi_pool`; every other rank runs `serve`
/// with a local evaluator (a `gpu::gpu_pool` over its GPUs, or a stand-in).
/// The pool's devices are the workers' devices, concatenated in rank order:
/// rank 1's devices first, then rank 2's, and so on. MPI carries the messages;
/// what crosses is described in docs/distributed.md.
///
/// @code
///   specgen::mpi::environment env(argc, argv);     // MPI_Init_thread / MPI_Finalize
///   specgen::event_loop<specgen::steady_clock> loop;
///   if (env.rank() == 0) {
///     auto pool = specgen::mpi::mpi_pool::create(loop, {}).value();
///     // ... drive *pool like any evaluator, then loop.run() ...
///   } else {
///     auto gpus = specgen::gpu::gpu_pool::create(loop, {}).value();
///     specgen::mpi::serve(loop, specgen::mpi::local_evaluator::of(*gpus), tasks);
///   }
/// @endcode
///
/// Not every thread may call MPI: the pool and `serve` each keep one thread
/// that makes every MPI call after `environment`'s initialisation
/// (MPI_THREAD_SERIALIZED). A program that makes MPI calls of its own while a
/// pool or `serve` runs must ask for MPI_THREAD_MULTIPLE itself.
#include <specgen/clock.hpp>
#include <specgen/evaluator.hpp>
#include <specgen/expected.hpp>
#include <specgen/task.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace mpi {

/// MPI_Init_thread (MPI_THREAD_SERIALIZED) on construction, MPI_Finalize on
/// destruction; errors on MPI_COMM_WORLD are returned, not fatal, so the pool
/// can survive a lost rank where the runtime lets it (docs/distributed.md).
/// Throws std::runtime_error when MPI cannot give that thread level. If MPI
/// was initialised already, neither initialises nor finalises. Once a rank
/// of the job was lost, the destructor skips MPI_Finalize: Open MPI 4.1's
/// waits for every rank, the lost one too, and may never return.
class environment {
 public:
  environment(int& argc, char**& argv);
  ~environment();
  environment(const environment&) = delete;
  environment& operator=(const environment&) = delete;
  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }
  /// How many worker ranks (every rank but 0) run on this rank's host, and
  /// which of them this one is (0, 1, ...; -1 on rank 0). Worker ranks that
  /// share a host use these to share its GPUs (`share_devices`). Found by
  /// MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) in the constructor, which
  /// every rank runs.
  [[nodiscard]] int host_workers() const noexcept { return host_workers_; }
  [[nodiscard]] int host_worker_index() const noexcept { return host_worker_index_; }

 private:
  bool owns_ = false;
  int rank_ = 0;
  int size_ = 1;
  int host_workers_ = 0;
  int host_worker_index_ = -1;
};

/// The devices worker `index` of `workers` ranks on one host takes from the
/// host's `devices`: every `workers`-th one, starting at its index. With more
/// worker ranks than devices, ranks share them: worker i takes device
/// i mod (number of devices). Empty `devices` gives empty.
std::vector<int> share_devices(const std::vector<int>& devices, int workers, int index);

/// A worker rank's evaluator behind a type-erased face: what `serve` drives.
/// Build one with `of` from any `evaluator` (gpu::gpu_pool, sim::simulated_device,
/// a stand-in); the evaluator must outlive `serve`.
struct local_evaluator {
  int devices = 0;
  int compile_slots = 0;
  std::function<void(eval_job, eval_callback)> submit{};
  std::function<bool(job_id)> cancel{};
  /// What each device is (a GPU's name), as rank 0 shows it; may be empty.
  std::vector<std::string> device_names{};

  template <evaluator E>
  static local_evaluator of(E& e) {
    local_evaluator l{.devices = e.devices(),
                      .compile_slots = e.compile_slots(),
                      .submit = [&e](eval_job j, eval_callback cb) { e.submit(std::move(j), std::move(cb)); },
                      .cancel = [&e](job_id id) { return e.cancel(id); }};
    if constexpr (requires { e.device(0).name; }) {
      for (int d = 0; d < l.devices; ++d) l.device_names.emplace_back(e.device(d).name);
    }
    return l;
  }
};

/// How an MPI thread of the pool or of a worker waits for messages (Open MPI
/// has no blocking wait that does not spin): for `busy_poll` after the last
/// message it looks again and again, yielding the core in between; then it
/// sleeps 20 us, 40 us, ... up to `idle_poll` between looks. `idle_poll` 0:
/// never sleeps. docs/distributed.md has what they cost.
struct polling {
  std::chrono::microseconds busy_poll{1000};
  std::chrono::microseconds idle_poll{100};
};

struct worker_config {
  /// How often the worker tells rank 0 it is alive when it has nothing else
  /// to send. Keep it well under the pool's `dead_after`.
  std::chrono::milliseconds heartbeat{100};
  /// How the MPI thread waits for messages.
  polling poll{};
};

/// A worker rank's loop: says which devices it has, then runs the jobs rank 0
/// sends on `ev` until rank 0 says stop. Runs `loop` (a real-time loop, on
/// which `ev` posts its results) on the calling thread. `tasks` must be the
/// tasks rank 0 uses (loaded from the same files): jobs name their task. A job
/// naming an unknown task is answered unjudged. Returns once rank 0 has sent
/// stop, or an error if MPI fails.
expected<void, error> serve(event_loop<steady_clock>& loop, local_evaluator ev, const std::vector<task>& tasks,
                            worker_config config = {});

/// A worker rank that cannot serve (its GPUs would not start, say) tells
/// rank 0 why instead of calling `serve`, and waits for rank 0's stop, so
/// that the job ends with that reason rather than waiting on the rank:
/// `mpi_pool::create` then returns an error naming every refusing rank.
/// Returns the error the worker ends with: `why`, or the MPI failure that
/// kept rank 0 from hearing it.
expected<void, error> refuse(const std::string& why);

/// What `pool_config::on_rank_lost` is told of a lost rank.
struct rank_loss {
  int rank = 0;
  std::chrono::milliseconds silent{0};  ///< how long nothing had come from it
  int resent = 0;                       ///< its jobs sent again to live ranks (or queued for them)
  int unjudged = 0;                     ///< its jobs answered unjudged: no rank was left
  int ranks_left = 0;                   ///< worker ranks still alive
};

struct pool_config {
  /// A worker rank from which nothing (no result, no heartbeat) has arrived
  /// for this long is taken for dead: its jobs go to the other ranks.
  std::chrono::milliseconds dead_after{3000};
  /// How the MPI thread waits for messages.
  polling poll{};
  /// Called on the loop's thread when a rank is taken for dead.
  std::function<void(const rank_loss&)> on_rank_lost{};
};

/// A worker rank as rank 0 sees it.
struct worker_info {
  int rank = 0;
  std::string host{};                  ///< the host it runs on (its hello's)
  std::vector<std::string> devices{};  ///< its devices' names, in its order (may be empty strings)
  int first_device = 0;                ///< the pool's number of its first device
  int compile_slots = 0;
  /// CPU cores the rank's process may run on (0: unknown). An MPI launcher
  /// may bind a rank to one core (Open MPI's mpirun does for 2 ranks or
  /// fewer); its compiles and GPU workers then share it.
  int cores = 0;
  bool alive = true;                   ///< false once taken for dead
  std::uint64_t jobs = 0;              ///< jobs it answered
};

struct pool_stats {
  std::vector<std::uint64_t> jobs{};  ///< per worker rank (index 0: rank 1), jobs answered
  std::uint64_t cancelled = 0;
  std::uint64_t requeued = 0;         ///< jobs sent again after their rank was lost
  std::vector<int> lost_ranks{};      ///< ranks taken for dead, in the order noticed
};

/**
 * The workers of MPI_COMM_WORLD as one `evaluator`, on rank 0.
 *
 * `create` waits until every other rank has called `serve` and said which
 * devices it has, or `refuse`d: then every worker is stopped and the error
 * names each refusing rank with its reason. Validate and profile jobs go to
 * the rank owning their device; compile jobs go to the worker rank with the
 * most free compile slots
 * (the rank compiles for its own GPUs, and its compile cache then serves its
 * validations). Results are posted to the executor, once per job.
 *
 * When a rank is lost, `devices()` stays the same (the scheduler keeps its
 * device numbers) but each of the lost rank's devices is served by a device of
 * a live rank, which then runs both devices' jobs in turn: the pool shrinks
 * in capacity, not in names. The lost rank's jobs are sent again; with no rank
 * left, every job is answered unjudged.
 */
class mpi_pool {
 public:
  static expected<std::unique_ptr<mpi_pool>, error> create(executor& loop, pool_config config = {});
  /// Cancels what is outstanding (callbacks report `cancelled`), tells every
  /// worker to stop (a rank taken for dead too, in case it was only slow),
  /// and joins the MPI thread.
  ~mpi_pool();
  mpi_pool(const mpi_pool&) = delete;
  mpi_pool& operator=(const mpi_pool&) = delete;

  [[nodiscard]] int devices() const noexcept;
  [[nodiscard]] int compile_slots() const noexcept;
  void submit(eval_job job, eval_callback done);
  bool cancel(job_id id);

  /// Which worker rank and local device serve pool device `device` now.
  [[nodiscard]] std::pair<int, int> owner(int device) const;
  [[nodiscard]] pool_stats stats() const;
  /// Every worker rank, in rank order.
  [[nodiscard]] std::vector<worker_info> workers() const;

 private:
  struct state;
  explicit mpi_pool(std::unique_ptr<state> s);
  std::unique_ptr<state> state_;
};

static_assert(evaluator<mpi_pool>);

}  // namespace mpi
SPECGEN_END_NAMESPACE
