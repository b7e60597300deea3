#pragma once
// CUPTI's range profiler (cupti_range_profiler.h, with the host API of
// cupti_profiler_host.h for the config image and the evaluation), loaded at
// run time (dlopen) like the activity pass (cupti.hpp): hardware metrics (DRAM,
// L2 and SM throughput, achieved occupancy, duration) over one range around
// "launch the plan once", replayed as many passes as the metrics need.
// Nothing links libcupti or libnvperf_host; a machine without them, or where
// the driver keeps the performance counters from this user, gets an error
// value naming the step that failed and CUPTI's error name.
//
// Coexistence with the activity pass (cupti_activity): both may be used by
// one process, one after the other, never at the same time. A `measure` must
// not run while a cupti_activity exists (its kernel records would count the
// replays, and CUPTI does not promise counters and concurrent-kernel tracing
// together): the caller destroys the cupti_activity (which disables
// CONCURRENT_KERNEL and flushes) before calling `measure`, and may start a new
// one after `measure` returns. Between measures the range profiler is not
// enabled on the context; only host-side state (the config image) is kept.
#include <specgen/detail/config.hpp>
#include <specgen/expected.hpp>

#include <cuda.h>

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

SPECGEN_BEGIN_NAMESPACE
namespace gpu::detail {

/// What one `measure` saw over its range (every pass of it).
struct range_metrics {
  /// Metric name -> value as CUPTI evaluates it for the range (units as the
  /// metric says: `.pct_of_peak_*` in percent, `gpu__time_duration.sum` in
  /// ns, `dram__bytes.sum` in bytes, `.per_second` per second, cycles).
  /// Only finite values; the rest are named in `not_evaluated`.
  std::map<std::string, double> values{};
  std::vector<std::string> not_evaluated{};  ///< metrics CUPTI gave NaN or infinity for
  double seconds_spent = 0;  ///< wall time of the whole measure: every pass, decoding, evaluation
  std::size_t passes = 0;    ///< how many times `launch_once` ran
};

/// The metrics measured when the caller names none (all verified against the
/// CUDA 13.0 host API for GH100, the H100/H200 chip):
/// dram__throughput.avg.pct_of_peak_sustained_elapsed (DRAM, % of peak),
/// dram__bytes.sum and dram__bytes.sum.per_second (DRAM bytes, bytes/s),
/// lts__throughput.avg.pct_of_peak_sustained_elapsed (L2 slices, % of peak),
/// sm__throughput.avg.pct_of_peak_sustained_elapsed (SM, % of peak),
/// sm__warps_active.avg.pct_of_peak_sustained_active (achieved occupancy, %),
/// gpu__time_duration.sum (ns) and gpc__cycles_elapsed.max (cycles).
/// Together they take 8 passes on GH100 (sm__throughput alone needs 8,
/// lts__throughput 4, the others 1).
std::vector<std::string> default_metric_names();

/// Loads libcupti from `candidates` (uncached; for tests) and resolves every
/// function the range profiler pass uses: the file loaded, or why not.
expected<std::string> probe_range_profiler(const std::vector<std::string>& candidates);

/// Host only, no GPU needed: the passes `metrics` take on `chip` ("GH100"),
/// from a config image made without a counter availability image; an error
/// names a metric the chip does not know. For tests and offline checks.
expected<std::size_t> metric_passes(const std::string& chip, const std::vector<std::string>& metrics);

/**
 * The range profiler on one context, configured for a list of metrics.
 *
 * @code
 *   auto pass = metrics_pass::open(ctx, device);
 *   if (!pass) log(pass.error().message);  // no metrics; nothing else changes
 *   else if (auto m = pass->measure(launch_once, reset_state)) use(m->values);
 * @endcode
 *
 * Single-threaded: one `measure` at a time per process, on the thread that
 * owns `ctx` (it is made current).
 */
class metrics_pass {
 public:
  /// A step the caller supplies: success, or why it failed.
  using step = std::function<expected<void>()>;

  /// Loads libcupti (and has libnvperf_host.so, which CUPTI loads itself,
  /// found next to it), initialises CUPTI's profiler, checks the device
  /// supports range profiling, builds the config image for `metric_names` on
  /// the device's chip with the context's counter availability, and enables
  /// then disables the range profiler once so a permission problem
  /// (CUPTI_ERROR_INSUFFICIENT_PRIVILEGES, ERR_NVGPUCTRPERM) shows here.
  /// Never throws; every failure is an error naming the step and CUPTI's error.
  /// Call it while no activity tracing is enabled (see the file comment).
  static expected<metrics_pass> open(CUcontext ctx, int device_ordinal,
                                     std::vector<std::string> metric_names = default_metric_names());

  /**
   * One range around `launch_once`, replayed until CUPTI has every pass
   * (user replay: `passes()` calls of `launch_once`, one per pass), then
   * decoded and evaluated. Per pass: `before_pass` (when given) outside the
   * range and outside the profiling session, a context synchronisation, then
   * start, push the range, `launch_once`, a context synchronisation, pop the
   * range, stop.
   *
   * The caller must:
   * - not have a cupti_activity alive (destroy it first);
   * - make every pass do the same work from the same state: put whatever
   *   restores it (module reload, output poison, scratch reset, L2 flush) in
   *   `before_pass`, so that its memsets and copies are not in the range;
   * - have `launch_once` return only when the launched work has finished (or
   *   failed), e.g. with the executor's deadline polling: the decode
   *   synchronises the context and must not meet a hung kernel.
   * A failed CUPTI call disables the profiler before `measure` returns.
   * When a step of the caller's (or a CUDA call between them) fails,
   * `measure` returns its error at once without another CUPTI call (the GPU
   * may be hung) and the profiler stays enabled, maybe with the range open:
   * the caller then calls `abandon()` when the context is unusable (a fault
   * or a timeout), else `cleanup()` before any other GPU work (the next
   * `measure` and the destructor also clean up).
   */
  expected<range_metrics> measure(const step& launch_once, const step& before_pass = {});

  /// After a fault or a timeout: the destructor makes no CUPTI call at all
  /// (a hung GPU would block it); every later `measure` fails.
  void abandon() noexcept;
  /// Pops the range, stops and disables the profiler a failed `measure` left
  /// enabled (errors ignored); nothing when there is none or after `abandon()`.
  void cleanup() noexcept;

  [[nodiscard]] std::size_t passes() const noexcept;  ///< replays the metrics need (from the config image)
  [[nodiscard]] const std::string& chip() const noexcept;  ///< "GH100"
  [[nodiscard]] const std::vector<std::string>& metric_names() const noexcept;

  metrics_pass(metrics_pass&&) noexcept;
  metrics_pass& operator=(metrics_pass&&) noexcept;
  metrics_pass(const metrics_pass&) = delete;
  metrics_pass& operator=(const metrics_pass&) = delete;
  /// Disables the range profiler if a failed measure left it enabled, frees
  /// the host object and, with the last open pass, deinitialises CUPTI's
  /// profiler (cuptiProfilerDeInitialize); nothing after `abandon()`.
  ~metrics_pass();

  struct state;  // defined in cupti_metrics.cpp

 private:
  explicit metrics_pass(std::unique_ptr<state> s) noexcept;
  std::unique_ptr<state> s_;
};

}  // namespace gpu::detail
SPECGEN_END_NAMESPACE
