#pragma once
/// Evaluating candidates on real GPUs: the validator that cannot be fooled,
/// the profiler, and the device pool that implements the `evaluator` concept
/// (the same one the simulated device implements).
///
/// Three ways in, from the lowest level up:
///  - `device_session`: one GPU, synchronous calls. `compile`, `validate`,
///    `profile` (a custom search loop, a test, a benchmark).
///  - `gpu_pool`: every configured GPU behind the `evaluator` concept, results
///    posted to an `executor` (the engine's loop).
///  - `evaluate_batch`: a list of candidates through compile, validate and
///    profile on all GPUs, blocking (an autotuner's tuning space).
///
/// Trust boundary: candidate kernels run only in `specgen-worker` processes.
/// Reference outputs are computed once per (task, shape, seed, distribution)
/// and kept in *this* process; every comparison that decides a verdict runs
/// here, never in the worker. The defences and the timing method are
/// described in docs/evaluation.md.
///
/// @code
///   using namespace specgen;
///   auto s = gpu::device_session::open({.device = 0});
///   if (!s) return fmt::print("{}\n", s.error().message);   // "no GPU: ..." without one
///   evaluation e = (*s)->evaluate(my_task, my_candidate);   // compile + validate + profile
///   fmt::print("{} {:.2f}x\n", to_string(e.result.kind), e.timing ? e.timing->speedup : 0.0);
/// @endcode
/// Implemented in src/gpu/eval/ (target `specgen::gpu_eval`).
#include <specgen/clock.hpp>
#include <specgen/detail/config.hpp>
#include <specgen/evaluator.hpp>
#include <specgen/expected.hpp>
#include <specgen/gpu/compiler.hpp>
#include <specgen/gpu/device_info.hpp>
#include <specgen/json.hpp>
#include <specgen/task.hpp>
#include <specgen/types.hpp>

#include <nlohmann/json.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace gpu {

/// Shared-memory poison words: before a checked launch the worker fills all
/// shared memory of every SM with one of them (see
/// `validation_config::shared_memory_poison`).
/// All bits set: a NaN read as f32, f16 or bf16 (any width), -1 read as a
/// signed integer of any width, the maximum as an unsigned one.
inline constexpr std::uint32_t smem_poison_ones = 0xFFFFFFFFu;
/// 3.39e38 read as f32 (and as bf16), a NaN as f16; 2,139,062,143 as i32: a
/// maximum that an uninitialised value wins.
inline constexpr std::uint32_t smem_poison_high = 0x7F7F7F7Fu;
/// -1.69e38 read as f32 (and as bf16), a NaN as f16; -16,843,010 as i32: a
/// minimum that an uninitialised value wins.
inline constexpr std::uint32_t smem_poison_low = 0xFEFEFEFEu;
/// The three together: a kernel that reduces uninitialised values with a sum,
/// a max or a min gives a wrong answer under at least one of them.
inline constexpr std::array<std::uint32_t, 3> smem_poison_patterns{smem_poison_ones, smem_poison_high,
                                                                   smem_poison_low};

/// How a session runs and watches its worker process (`session_config::worker`).
/// Durations are serialised as `*_ns`.
struct worker_config {
  std::string program{};           ///< path of the worker executable
  std::vector<std::string> args{}; ///< extra arguments after argv[0]
  int device = 0;                  ///< passed to the worker as SPECGEN_WORKER_DEVICE
  duration heartbeat_interval = std::chrono::milliseconds(100);
  duration heartbeat_timeout = std::chrono::milliseconds(500);  ///< idle worker silent this long is replaced
  duration startup_timeout = std::chrono::seconds(10);          ///< spawn to hello (CUDA context creation)
  /// Shared memory (a memfd mapped by both sides) through which the worker
  /// returns large binary parts instead of the channel: one copy instead of
  /// several. Reserved, not allocated: pages exist once written. 0: off.
  std::uint64_t bulk_bytes = std::uint64_t{4} << 30;
  friend bool operator==(const worker_config&, const worker_config&) = default;
};

inline void to_json(nlohmann::json& j, const worker_config& c) {
  j = {{"program", c.program},
       {"args", c.args},
       {"device", c.device},
       {"heartbeat_interval_ns", c.heartbeat_interval.count()},
       {"heartbeat_timeout_ns", c.heartbeat_timeout.count()},
       {"startup_timeout_ns", c.startup_timeout.count()},
       {"bulk_bytes", c.bulk_bytes}};
}
inline void from_json(const nlohmann::json& j, worker_config& c) {
  specgen::detail::read(j, "program", c.program);
  specgen::detail::read(j, "args", c.args);
  specgen::detail::read(j, "device", c.device);
  specgen::detail::read(j, "heartbeat_interval_ns", c.heartbeat_interval);
  specgen::detail::read(j, "heartbeat_timeout_ns", c.heartbeat_timeout);
  specgen::detail::read(j, "startup_timeout_ns", c.startup_timeout);
  specgen::detail::read(j, "bulk_bytes", c.bulk_bytes);
}

/// A session's worker counters (`session_stats::worker`): replacements and
/// why, since the session opened; for logs and tests.
struct worker_stats {
  std::uint64_t spawns = 0;           ///< successful starts, the first included
  std::uint64_t respawns = 0;         ///< replacements after a failure
  std::uint64_t timeouts = 0;
  std::uint64_t crashes = 0;
  std::uint64_t protocol_errors = 0;
  std::uint64_t cancellations = 0;
  std::uint64_t heartbeat_misses = 0;  ///< idle workers replaced for silence
  double last_respawn_seconds = 0;     ///< failure detected -> new worker's hello
  std::uint64_t bulk_bytes = 0;        ///< response bytes that came through the bulk region
  friend bool operator==(const worker_stats&, const worker_stats&) = default;
};

/// One set of inputs a candidate is checked on, at every validation shape.
struct validation_case {
  std::uint64_t seed = 1;
  /// Replaces the distribution of every floating-point input whose own one is
  /// a named random one (normal, uniform, signed_uniform, large); inputs with
  /// a distribution the task states (`normal(1000, 1)`, `const(2)`, zeros,
  /// ...), and integer inputs, keep theirs. Empty: each input's own. A case
  /// that replaces applies only where the task's tolerances hold for it
  /// (`task::distributions`).
  std::optional<distribution> floats{};
  friend bool operator==(const validation_case&, const validation_case&) = default;
};

/// How candidates are validated.
struct validation_config {
  /// Run at every validation shape of the task (those that apply, see
  /// `validation_case::floats`). The default covers the task's own inits and
  /// the four random distributions.
  std::vector<validation_case> cases{{1, std::nullopt},
                                     {2, distribution::normal},
                                     {3, distribution::uniform},
                                     {4, distribution::signed_uniform},
                                     {5, distribution::large}};
  /// Runs of each case; outputs are poisoned before every run and each run is
  /// compared with the reference. A later run failing after the first passed
  /// is `unstable` (a race). All cases of one shape run in one call, in one
  /// loaded instance of the candidate's module, as a caller who loads it once
  /// and calls it many times would: a kernel that keeps results across calls
  /// (in `__device__` variables) is judged on what the later calls return.
  int repeats = 2;
  /// True: every case of a shape runs in one call, in one loaded module (see
  /// `repeats`). False: each case in a call of its own, with a fresh module
  /// instance before every run; state kept across calls then goes unseen.
  /// Only for measuring what the repeated-call check costs.
  bool same_module = true;
  /// Before every launch of a checked run, all shared memory of every SM is
  /// filled with one of these words (run k gets word k mod n), so a kernel
  /// reading shared memory it never wrote sees garbage, never leftovers that
  /// happen to work. Empty: no poison.
  std::vector<std::uint32_t> shared_memory_poison{smem_poison_patterns.begin(), smem_poison_patterns.end()};
  std::size_t guard_bytes = 256;   ///< canary zone before and after every buffer
  duration run_deadline = seconds(2);  ///< one plan run; past it: `timeout`, worker replaced
  friend bool operator==(const validation_config&, const validation_config&) = default;
};

/// How candidates are timed (docs/evaluation.md, "Timing").
struct profile_config {
  int warmup = 10;             ///< untimed runs first (candidate and baseline each)
  int min_samples = 20;        ///< timed samples before the noise rule may stop
  int max_samples = 200;       ///< cap on timed samples
  /// Stop when the estimated relative standard error of the median
  /// (1.253 * 1.4826 * MAD / sqrt(n) / median) is at most this.
  double target_noise = 0.005;
  double max_seconds = 10;     ///< wall-time cap of the sampling loop
  bool flush_l2 = true;        ///< write a buffer of 2x the L2 size between samples
  bool interleave_baseline = true;  ///< time the baseline in the same loop, alternating
  bool cupti_check = true;     ///< a CUPTI activity pass cross-checks kernels and durations
  int cupti_runs = 5;
  /// A CUPTI range-profiler pass (8 replays of the candidate) for feedback
  /// metrics: `hw_dram_pct`, `hw_l2_pct`, `hw_sm_pct`, `hw_occupancy_pct`, ...
  /// in `measurement::metrics`. Off by default: it needs GPU counter access
  /// (ERR_NVGPUCTRPERM otherwise, reported as a note) and adds the replays.
  bool hardware_metrics = false;
  /// `suspicious` when CUPTI's summed kernel time and the event time disagree
  /// by more than this fraction (work outside the plan's kernels).
  double cupti_tolerance = 0.25;
  /// `suspicious` when the median is below this fraction of the time needed
  /// to move the task's inputs and outputs once at peak DRAM bandwidth.
  double roofline_margin = 0.8;
  /// Seed of the timed inputs; the last timed run uses `recheck_seed` inputs,
  /// which the kernel has not seen, and its outputs are checked again.
  std::uint64_t seed = 101;
  std::uint64_t recheck_seed = 102;
  duration run_deadline = seconds(5);  ///< one plan run
  friend bool operator==(const profile_config&, const profile_config&) = default;
};

/// A reference computed on the host: outputs (in the task's order) from
/// inputs (in the task's order), at `shape`. Registered by name; a task
/// whose `reference.host` names it uses it.
using host_reference = std::function<std::vector<std::vector<std::byte>>(
    const task&, const shape_binding& shape, const std::vector<std::span<const std::byte>>& inputs)>;

/// Reference outputs kept in the host process, keyed by (task content,
/// shape, seed, distribution); shared by the sessions of a pool. Opaque:
/// created by `device_session::open` when `session_config::references` is null.
class reference_cache;

/// Everything a session needs. `worker_program` empty: $SPECGEN_WORKER, else
/// `specgen-worker` beside the running executable, else the build tree's
/// (see `find_worker_program`).
struct session_config {
  int device = 0;
  std::string worker_program{};
  worker_config worker{};  ///< heartbeats and startup timeout (program/device are set from above)
  /// The host's allowance per worker call beyond the kernels' own deadlines
  /// (input generation, transfers, module load, the context at the first
  /// run). A call's host deadline is run_deadline x runs + this.
  duration call_margin = seconds(30);
  /// Shared between sessions of a pool; created from `compiler_settings` when null.
  std::shared_ptr<compiler> shared_compiler{};
  compiler_config compiler_settings{};
  compile_options compile{.arch = ""};  ///< arch empty: the device's own (sm_90a on an H200)
  validation_config validation{};
  profile_config profile{};
  std::map<std::string, host_reference> host_references{};
  /// Shared between sessions of a pool; created (with `reference_cache_bytes`) when null.
  std::shared_ptr<reference_cache> references{};
  std::size_t reference_cache_bytes = std::size_t{4} << 30;  ///< oldest entries dropped beyond this
  /// For tests and stand-in workers only: describe the device with this
  /// instead of asking the driver, and accept any worker hello. With it a
  /// session opens on a machine without a GPU (its worker then must not need one).
  std::optional<device_info> assumed_device{};
};

/// The worker executable a session starts: `configured` if not empty, else
/// $SPECGEN_WORKER, else `specgen-worker` beside /proc/self/exe if it exists,
/// else the one in the build tree this library was built in.
/// @code
///   auto path = specgen::gpu::find_worker_program("");   // ".../build/src/gpu/worker/specgen-worker"
/// @endcode
[[nodiscard]] std::string find_worker_program(const std::string& configured = {});

/// A compiled candidate, or why not.
struct compile_outcome {
  verdict result{};                     ///< ok, compile_error or invalid_plan
  compile_report report{};
  std::shared_ptr<const compiled> binary{};  ///< when ok
};

/// Counters of one session.
struct session_stats {
  std::uint64_t validations = 0;
  std::uint64_t profiles = 0;
  std::uint64_t reference_runs = 0;     ///< reference outputs computed (each cached afterwards)
  std::uint64_t reference_hits = 0;     ///< reference outputs served from the cache
  std::uint64_t module_resends = 0;     ///< cubins sent again after the worker answered module_missing
  std::uint64_t poison_fault_reruns = 0;  ///< validation calls run again without the shared-memory poison after a fault
  worker_stats worker{};
};

/**
 * One GPU, driven synchronously through its worker. Thread-compatible: one
 * call at a time, except `cancel` which may come from any thread.
 */
class device_session {
 public:
  /// Starts the worker and queries the device. "no GPU: ..." when there is none.
  static expected<std::unique_ptr<device_session>, error> open(session_config config);
  ~device_session();
  device_session(const device_session&) = delete;
  device_session& operator=(const device_session&) = delete;

  [[nodiscard]] const device_info& device() const noexcept;
  [[nodiscard]] const session_config& config() const noexcept;

  /// Compiles for this device and checks the plan against the task and the
  /// device's limits at every validation shape and the benchmark shape.
  compile_outcome compile(const task& t, const candidate& c);
  /// Compiles (cached) and validates: verdict ok, or what was wrong.
  verdict validate(const task& t, const candidate& c);
  /// Profiles against the task's baseline, interleaved; re-checks the last
  /// timed run. `timing` is set when the verdict is ok.
  evaluation profile(const task& t, const candidate& c);
  /// compile, then validate, then profile, stopping at the first failure.
  evaluation evaluate(const task& t, const candidate& c);

  /// Aborts the call in progress (its worker is killed and replaced); the
  /// call returns a verdict whose summary says it was cancelled. False when
  /// nothing was running.
  bool cancel();

  [[nodiscard]] session_stats stats() const;

 private:
  struct state;
  explicit device_session(std::unique_ptr<state> s);
  std::unique_ptr<state> state_;
};

/// The pool's configuration: which GPUs, and the session settings for each.
struct pool_config {
  std::vector<int> devices{};  ///< empty: every visible GPU
  session_config session{};    ///< `device` is overwritten per GPU
  /// Called on a GPU's thread right before each validate or profile job runs
  /// there, with the GPU's CUDA ordinal and the job's working-set estimate in
  /// bytes (`job_working_set_bytes`). For a tenant of the GPU's spare memory,
  /// such as the KV store, to make room first: the evaluation always wins.
  /// Exceptions are swallowed (the hook is advisory). Empty: nothing is called.
  /// @code
  ///   pc.before_job = [s = store](int device, std::uint64_t bytes) { s->make_room(device, bytes); };
  /// @endcode
  std::function<void(int device, std::uint64_t bytes)> before_job{};
};

/// The device memory one validate or profile job of `t` may need on `d`, as
/// an upper estimate: its inputs and outputs at the largest shape, twice (the
/// candidate's and the baseline's or reference's buffers, guard zones
/// included), plus the L2 flush buffer (2 x L2) and 256 MiB for the worker's
/// context growth and modules. A shape whose size cannot be computed counts 0.
[[nodiscard]] std::uint64_t job_working_set_bytes(const task& t, const device_info& d);

struct pool_stats {
  std::vector<double> busy_seconds{};   ///< per device, measured wall time holding a job
  std::vector<std::uint64_t> jobs{};    ///< per device, validate + profile jobs finished
  std::uint64_t compiles = 0;
  std::uint64_t cancelled = 0;
  std::uint64_t respawns = 0;           ///< worker replacements over all devices
};

/**
 * All configured GPUs as one `evaluator`: compile jobs on the compiler's
 * threads, validate/profile jobs on a thread per GPU, results posted to the
 * executor (whose loop the caller runs). The caller (the engine's scheduler)
 * picks the device and sends at most one job per device at a time.
 */
class gpu_pool {
 public:
  static expected<std::unique_ptr<gpu_pool>, error> create(executor& loop, pool_config config);
  ~gpu_pool();  // cancels what is queued or running and joins the threads
  gpu_pool(const gpu_pool&) = delete;
  gpu_pool& operator=(const gpu_pool&) = delete;

  [[nodiscard]] int devices() const noexcept;
  [[nodiscard]] int compile_slots() const noexcept;
  void submit(eval_job job, eval_callback done);
  bool cancel(job_id id);

  [[nodiscard]] const device_info& device(int index) const;
  [[nodiscard]] pool_stats stats() const;

 private:
  struct state;
  explicit gpu_pool(std::unique_ptr<state> s);
  std::unique_ptr<state> state_;
};

static_assert(evaluator<gpu_pool>);

/// Progress of `evaluate_batch`: called (on the calling thread) once per
/// candidate when its evaluation is final.
using batch_progress = std::function<void(std::size_t index, const evaluation&)>;

/// Compiles, validates and profiles every candidate on all GPUs of `config`
/// and returns their evaluations in input order. Blocks.
expected<std::vector<evaluation>, error> evaluate_batch(const pool_config& config, const task& t,
                                                        const std::vector<candidate>& candidates,
                                                        const batch_progress& progress = {});

}  // namespace gpu
SPECGEN_END_NAMESPACE
